"""The agent's observation, declared once.

Each field of `Observation` is declared with `feature(...)`: its unit, bounds, how it is
normalised to [0, 1] for networks and where it is read from the env state. The pytree, the
observation spaces, `flatten` and `OBS_SIZE` all follow from these declarations, so adding a
field is one line here.

Normalisation scales come from the task (`Scales`): TTFT against TTFT_SLOS times the
mix-weighted SLO, TPOT against TTFT_SLOS times the tightest class's SLO, the arrival rate against the peak
scheduled rate, memory against the limit, cost against the most the episode could cost (two
GPUs all the time).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import Array

from inferencegym_jax import spaces
from inferencegym_jax.actions import KNOB_RANGES, KNOBS
from inferencegym_jax.traffic import workload
from inferencegym_jax.traffic.workload import NUM_CLASSES

# Queues beyond this many requests are off the observation's log scale [requests].
QUEUE_SCALE = 10_000.0
# Longest context of Llama-3-8B, the scale of prompt lengths [tokens].
CONTEXT_SCALE = 8192.0
# Latencies are observed up to this multiple of their SLO (where the reward's TTFT ratio,
# serving.latency.TTFT_RATIO_CAP, saturates too).
TTFT_SLOS = 4.0
# Largest batch on the knob grid, the scale of the running batch [sequences].
MAX_BATCH = float(KNOB_RANGES[KNOBS.index("batch_size")][1])


@struct.dataclass
class Scales:
    """Task-derived normalisation scales; float32 scalars.

    Attributes:
      ttft_slo_s: [s] class-mix-weighted TTFT SLO.
      tpot_slo_s: [s] the tightest class's TPOT SLO.
      peak_rate: [req/s] mean scheduled rate plus one burst's extra rate.
      memory_limit_bytes: [B] the task's memory limit.
      horizon: [intervals] episode length.
      max_cost_usd: [$] two GPUs at the highest tier price for the whole episode.
    """

    ttft_slo_s: Array
    tpot_slo_s: Array
    peak_rate: Array
    memory_limit_bytes: Array
    horizon: Array
    max_cost_usd: Array


def scales(params: Any) -> Scales:
    """The `Scales` of an `env.EnvParams`."""
    s, wl = params.server, params.workload
    horizon = params.max_steps_in_episode.astype(jnp.float32)
    return Scales(
        ttft_slo_s=jnp.sum(wl.class_mix * s.ttft_slo_s),
        tpot_slo_s=jnp.min(s.tpot_slo_s),
        peak_rate=workload.mean_rate(wl) + wl.base_rate * (wl.burst_multiplier - 1.0),
        memory_limit_bytes=s.memory_limit_bytes,
        horizon=horizon,
        max_cost_usd=2.0 * jnp.max(s.profiles.price_per_hour) * horizon * s.dt_s / 3600.0,
    )


@dataclasses.dataclass(frozen=True)
class Feature:
    """How one observation field is bounded, normalised and read.

    Attributes:
      unit: physical unit of the field.
      low, high: bounds in that unit (a tuple per entry for vector fields).
      size: entries (1 for a scalar).
      normalise: (value, Scales) -> value in [0, 1] (trailing axis `size` for vector fields).
      read: env.EnvState -> value (float32).
      doc: what the field is.
    """

    unit: str
    low: float | tuple[float, ...]
    high: float | tuple[float, ...]
    size: int
    normalise: Callable[[Array, Scales], Array]
    read: Callable[[Any], Array]
    doc: str


def feature(unit: str, low: Any, high: Any, normalise: Callable, read: Callable, doc: str, size: int = 1) -> Any:
    """A dataclass field of `Observation` carrying its `Feature`."""
    return dataclasses.field(metadata={"feature": Feature(unit, low, high, size, normalise, read, doc)})


def _fraction(x: Array, s: Scales) -> Array:
    return x


def _log_queue(x: Array, s: Scales) -> Array:
    return jnp.log1p(x) / jnp.log1p(QUEUE_SCALE)


def _knob_positions(c: Array, s: Scales) -> Array:
    """Each knob's position in its range; batch size on a log2 scale (its grid is geometric)."""
    parts = []
    for i, (name, (lo, hi)) in enumerate(zip(KNOBS, KNOB_RANGES)):
        if name == "batch_size":
            parts.append(jnp.log2(jnp.maximum(c[..., i], lo)) / float(np.log2(hi)))
        else:
            parts.append((c[..., i] - lo) / (hi - lo))
    return jnp.stack(parts, axis=-1)


INF = float("inf")


@struct.dataclass
class Observation:
    """What the agent sees after each interval; float32, shape () unless `size` says otherwise.

    Every field is declared with its unit, bounds, normalisation and source (`feature`);
    `describe()` prints the table.
    """

    queue_depth: Array = feature("requests", 0, INF, _log_queue, lambda st: st.last.queue_depth,
                                 "waiting for admission")
    mean_prompt_len: Array = feature("tokens", 0, INF, lambda x, s: x / CONTEXT_SCALE,
                                     lambda st: st.last.queue_mean_prompt, "mean prompt of the waiting requests")
    arrival_rate_ema: Array = feature("req/s", 0, INF, lambda x, s: x / jnp.maximum(s.peak_rate, 1e-6),
                                      lambda st: st.arrival_rate_ema, "smoothed arrival rate (env.RATE_EMA_WEIGHT)")
    kv_occupancy: Array = feature("fraction", 0, 1, _fraction, lambda st: st.last.kv_occupancy,
                                  "resident KV tokens / capacity")
    ttft_p50_s: Array = feature("s", 0, INF, lambda x, s: x / (TTFT_SLOS * s.ttft_slo_s),
                                lambda st: st.last.ttft_p50_s,
                                "median TTFT of the interval's requests (waiting ones at their wait so far)")
    ttft_p99_s: Array = feature("s", 0, INF, lambda x, s: x / (TTFT_SLOS * s.ttft_slo_s),
                                lambda st: st.last.ttft_p99_s, "99th percentile of the same")
    tpot_p50_s: Array = feature("s", 0, INF, lambda x, s: x / (TTFT_SLOS * s.tpot_slo_s),
                                lambda st: st.last.tpot_s, "wall time per output token (stalls included)")
    slo_violation_rate: Array = feature("fraction", 0, 1, _fraction, lambda st: st.last.slo_violation_rate,
                                        "requests past their TTFT or TPOT SLO, timed out or failed")
    gpu_memory_gb: Array = feature("GB", 0, INF, lambda x, s: x * 1e9 / s.memory_limit_bytes,
                                   lambda st: st.last.gpu_memory_bytes / 1e9,
                                   "weights + resident KV + reserve on the decode GPU")
    spec_acceptance: Array = feature("fraction", 0, 1, _fraction, lambda st: st.last.spec_acceptance,
                                     "accepted draft tokens / drafted")
    priority_mix: Array = feature("fraction", 0, 1, _fraction, lambda st: st.last.class_share,
                                  "share of waiting and new requests per priority class", size=NUM_CLASSES)
    timestep: Array = feature("intervals", 0, INF, lambda x, s: x / s.horizon,
                              lambda st: st.time.astype(jnp.float32), "since the episode began")
    cost_so_far: Array = feature("$", 0, INF, lambda x, s: x / s.max_cost_usd, lambda st: st.cost_so_far,
                                 "GPU cost in the episode")
    running_seqs: Array = feature("sequences", 0, INF, lambda x, s: x / MAX_BATCH,
                                  lambda st: st.server.running.seqs, "in the decode batch")
    config: Array = feature("knob units", tuple(r[0] for r in KNOB_RANGES), tuple(r[1] for r in KNOB_RANGES),
                            _knob_positions, lambda st: st.server.config.as_vector(),
                            f"the knobs in force: {', '.join(KNOBS)}", size=len(KNOBS))

    @staticmethod
    def describe() -> str:
        """The declared fields as a markdown table (name, shape, unit, bounds, meaning)."""
        rows = ["| field | shape | unit | bounds | meaning |", "|---|---|---|---|---|"]
        for name, f in FEATURES:
            shape = "()" if f.size == 1 else f"({f.size},)"
            if isinstance(f.low, tuple) and isinstance(f.high, tuple):
                bounds = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in zip(f.low, f.high))
            else:
                bounds = f"[{f.low:g}, {f.high:g}]"
            rows.append(f"| {name} | {shape} | {f.unit} | {bounds} | {f.doc} |")
        return "\n".join(rows)


FEATURES: tuple[tuple[str, Feature], ...] = tuple(
    (f.name, f.metadata["feature"]) for f in dataclasses.fields(Observation)
)
OBS_SIZE = sum(f.size for _, f in FEATURES)


def observe(state: Any) -> Observation:
    """The observation of an `env.EnvState`."""
    return Observation(**{name: f.read(state) for name, f in FEATURES})


def observation_space() -> spaces.Dict:
    """Structured observation space, bounds in the fields' units."""
    return spaces.Dict({name: spaces.Box(f.low, f.high, () if f.size == 1 else (f.size,)) for name, f in FEATURES})


def flat_observation_space() -> spaces.Box:
    """Space of `flatten`: OBS_SIZE float32 values, each in [0, 1]."""
    return spaces.Box(0.0, 1.0, (OBS_SIZE,))


def flatten(obs: Observation, params: Any) -> Array:
    """The normalised float32 (..., OBS_SIZE) vector of an observation, entries in [0, 1]."""
    s = scales(params)
    parts = []
    for name, f in FEATURES:
        value = f.normalise(getattr(obs, name), s)
        parts.append(value[..., None] if f.size == 1 else value)
    return jnp.clip(jnp.concatenate(parts, axis=-1), 0.0, 1.0).astype(jnp.float32)
