"""Load tests: one fixed server configuration under constant-rate Poisson traffic, measured per
request, as a benchmark client measures a server (`inferencegym loadtest`; issue 41).

    rows = run_loadtest(LoadPoint(gpu="a100-80gb", batch_size=64), rates=[4, 8, 12], saturation=True)

**Server and traffic.** A `LoadPoint` is a configuration of the five knobs (a fixed
`ServingAction`, every knob honoured: the interval function is called directly, no task masks a
knob), the engine's `max_batched_tokens` and a task file's length tables for prompts and outputs
(checked by the task-file schema, `task_config.LengthConfig`, so a bad table raises the
ValueError a task file would, naming e.g. `prompt.kind`). The server and traffic params are task
1's newest version (`tasks.newest_version(1)`: constant schedule, Llama-3-8B) with its workload
replaced (constant rate, every request in class 1, the point's lengths), the point's GPU and
`max_batched_tokens`, 1-s intervals, and SLOs out of reach (TTFT 1000 s, TPOT 10 s), so that SLO
accounting never changes what is served. The task's client timeout (`server.num_age_buckets`
intervals in the queue) is kept: only an overloaded server reaches it.

**Episodes.** `episodes` episodes, keys split from `jax.random.key(seed)`, vmapped; each runs
`warmup` 1-s intervals that are simulated and not measured, then `seconds` measured ones
(`lax.scan` over intervals). The rate is a traced value: one compilation per static structure
(point shapes, `seconds`, `warmup`), whatever the rates and knob values. Same seed, same bits.

**Statistics per row**, over the measured intervals of every episode pooled:

* `requests_per_s`, `output_tokens_per_s`: completions and output tokens per second.
* `ttft_p50_s`, `ttft_p90_s`, `ttft_p99_s`, `ttft_mean_s` [s]: over the *requests* whose first
  token came in the measured window, not means of per-interval percentiles. The engine returns
  each interval's TTFT distribution of those requests as a mixture of uniforms
  (`serving.RequestLatency`: for this engine one component per admitted (class, age) queue bin,
  `serving.latency.FirstToken`, weighted by the requests admitted). The components of every
  interval and episode are pooled and the mixture's CDF is inverted exactly on the host
  (`mixture_quantiles`: the CDF is piecewise linear between the sorted component ends, so each
  quantile is found by a search in the cumulative table and one linear solve); the mean is the
  request-weighted mean of the components' midpoints. NaN when no request got a first token.
* `tpot_mean_s` [s/token]: vLLM's per-request TPOT is (e2e - TTFT) / (output - 1), averaged over
  requests. The fluid engine tracks no request's decode, so this is its stand-in: the
  output-token-weighted mean of each interval's `IntervalMetrics.tpot_s` (wall time per token of
  the running sequences). A request's TPOT is the token-weighted mean of the intervals it
  decodes in; with equal outputs, the mean over requests is the token-weighted mean over time.

**Saturation row** (`"rate": "saturation"`), the reference's method
(experiments/crosscheck/README.md): a closed loop alone is not enough (identical requests
phase-lock into admission waves whose pattern depends on how the queue is fed). First a probe:
Poisson offered at 1, 2, 4, ... req/s (doubling, up to `MAX_RATE`) until the completions fall
below half of the offered rate, i.e. at least twice the capacity waits and the batch is always
full; that run's completions per second, C_probe, estimate the closed-loop capacity. A geometric
search rather than a roofline bound because it asks the engine nothing but its completions, so it
holds for any engine behind `_interval`; it costs ~log2(capacity) + 2 runs of the one compiled
program. Then Poisson offered at `SATURATION_OVERLOAD` x C_probe: that run's completions,
tokens, TTFT and TPOT are the row (its TTFT grows with the queue, up to the client timeout).

The engine-facing part is `_interval` (one interval: traffic, then `serving.serve_interval_with_requests`)
and `_initial_state`; the rest reads only `IntervalMetrics`' `completed`, `output_tokens`, `tpot_s`
and the `RequestLatency` components.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import serving, tasks, validation
from inferencegym_jax.actions import KNOB_RANGES, KNOBS, ServingAction
from inferencegym_jax.env import EnvParams
from inferencegym_jax.profiles import QUANT_TIERS
from inferencegym_jax.task_config import MAX_TOKENS, LengthConfig, TaskConfig
from inferencegym_jax.traffic import workload

ROW_KEYS = ("rate", "requests_per_s", "output_tokens_per_s", "ttft_p50_s", "ttft_p90_s",
            "ttft_p99_s", "ttft_mean_s", "tpot_mean_s")
GPUS = ("a100-80gb", "h100-sxm")  # the GPUs the cross-check's reference models (issue 41)
BASE_TASK = 1  # the task whose newest version supplies the model, draft and server constants
TTFT_SLO_OUT_OF_REACH_S = 1000.0  # [s] no request misses it (issue 41's setting)
TPOT_SLO_OUT_OF_REACH_S = 10.0  # [s/token] the task schema's largest TPOT SLO
INTERVAL_S = 1.0  # [s] control interval: rows are per second of steady state
CLASS_MIX = (0.0, 1.0, 0.0)  # every request in class 1 (one priority class)
MAX_RATE = 1e4  # [req/s] the task schema's largest `workload.base_rate`
MAX_INTERVALS = 10**6  # warm-up + measured intervals: the task schema's largest `max_steps`
MAX_SEED = 2**32 - 1  # jax.random.key keeps the low 32 bits of a seed
PROBE_START_RATE = 1.0  # [req/s] first offered rate of the saturation probe
SATURATION_OVERLOAD = 1.1  # offered / C_probe of the saturation row (the reference's 1.1 x)
QUANTILES = (0.5, 0.9, 0.99)


def _default_prompt() -> dict[str, Any]:
    return {"kind": "uniform", "low": 512, "high": 512}


def _default_output() -> dict[str, Any]:
    return {"kind": "uniform", "low": 128, "high": 128}


def _integer_in(name: str, value: Any, low: int, high: int) -> None:
    """ValueError naming `name` unless `value` is an int in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]")


def _choice(name: str, value: Any, options: Sequence[Any]) -> None:
    if value not in options or isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: must be one of {list(options)}")


@dataclasses.dataclass(frozen=True)
class LoadPoint:
    """One server configuration under test; `__post_init__` raises ValueError naming the field
    and its allowed range.

    Attributes:
      gpu: "a100-80gb" or "h100-sxm".
      batch_size: [sequences] max_num_seqs, an integer in the action space's range [1, 512].
      kv_budget: fraction of the free HBM given to the KV cache, in [0.1, 1].
      spec_length: speculative tokens per step, an integer in [0, 8] (0: off).
      quant_tier: weight precision, "fp16", "int8" or "int4".
      prefill_disagg: 1 to prefill on a second GPU, else 0.
      max_batched_tokens: [tokens] tokens per engine step (chunked prefill), an integer in
        [1, 1048576] (the task schema's range).
      prompt, output: a task file's length table [tokens] (`task_config.LengthConfig`), e.g.
        {"kind": "lognormal", "median1": 250, "sigma1": 1.0, "low": 8, "high": 4096}.
    """

    gpu: str = "a100-80gb"
    batch_size: int = 64
    kv_budget: float = 1.0
    spec_length: int = 0
    quant_tier: str = "fp16"
    prefill_disagg: int = 0
    max_batched_tokens: int = 2048
    prompt: Mapping[str, Any] = dataclasses.field(default_factory=_default_prompt)
    output: Mapping[str, Any] = dataclasses.field(default_factory=_default_output)

    def __post_init__(self) -> None:
        _choice("gpu", self.gpu, GPUS)
        ranges = dict(zip(KNOBS, KNOB_RANGES, strict=True))
        _integer_in("batch_size", self.batch_size, int(ranges["batch_size"][0]), int(ranges["batch_size"][1]))
        low, high = ranges["kv_budget"]
        budget = self.kv_budget
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not low <= budget <= high:
            raise ValueError(f"kv_budget={budget!r}: must be a number in [{low:g}, {high:g}]")
        _integer_in("spec_length", self.spec_length, int(ranges["spec_length"][0]), int(ranges["spec_length"][1]))
        _choice("quant_tier", self.quant_tier, QUANT_TIERS)
        _choice("prefill_disagg", self.prefill_disagg, (0, 1))
        _integer_in("max_batched_tokens", self.max_batched_tokens, 1, int(MAX_TOKENS * 8))
        for name in ("prompt", "output"):
            validation.parse(getattr(self, name), LengthConfig, f"{name}.")
            object.__setattr__(self, name, dict(getattr(self, name)))  # a copy: the caller's dict may change

    def action(self) -> ServingAction:
        """The fixed `ServingAction` of the point (float32 scalars, physical units)."""
        return ServingAction(kv_budget=jnp.float32(self.kv_budget), spec_length=jnp.float32(self.spec_length),
                             batch_size=jnp.float32(self.batch_size), prefill_disagg=jnp.float32(self.prefill_disagg),
                             quant_tier=jnp.float32(QUANT_TIERS.index(self.quant_tier)))


def point_config(point: LoadPoint, intervals: int) -> TaskConfig:
    """The validated task config of a point (module docstring): task `BASE_TASK`'s newest
    version with the workload replaced and the GPU, server and horizon overridden."""
    env_id = tasks.newest_version(BASE_TASK)
    if env_id is None:  # every release ships task 1
        raise ValueError(f"no task {BASE_TASK} is registered; the load test builds its server from it")
    raw = tasks.raw_task_config(env_id)
    raw.update(gpu=point.gpu, max_steps=intervals, active_knobs=list(KNOBS))
    raw["server"].update(dt_s=INTERVAL_S, max_batched_tokens=point.max_batched_tokens,
                         ttft_slo_s=[TTFT_SLO_OUT_OF_REACH_S] * 3, tpot_slo_s=[TPOT_SLO_OUT_OF_REACH_S] * 3)
    # base_rate: a placeholder in the schema's range; each run sets its own (a traced value).
    raw["workload"] = {"schedule": "constant", "base_rate": PROBE_START_RATE, "class_mix": list(CLASS_MIX),
                       "prompt": dict(point.prompt), "output": dict(point.output)}
    return validation.parse(raw, TaskConfig)


def env_params(point: LoadPoint, intervals: int) -> EnvParams:
    """The env params of a point (`point_config`); the rate is set per run."""
    return tasks.build_params(point_config(point, intervals))


# ----------------------------------------------------------------- the engine-facing part


class Carry(NamedTuple):
    """What one interval hands the next: the server and the traffic state."""

    server: serving.ServerState
    traffic: workload.WorkloadState


class Measured(NamedTuple):
    """One measured interval, float32 scalars unless noted.

    Attributes:
      completed: [requests] finished in the interval.
      output_tokens: [tokens] generated in the interval.
      tpot_s: [s/token] the interval's wall time per output token of the running sequences.
      first_token: `serving.RequestLatency` of the requests whose first token came in it.
    """

    completed: jax.Array
    output_tokens: jax.Array
    tpot_s: jax.Array
    first_token: serving.RequestLatency


def _initial_state(key: jax.Array, action: ServingAction, params: EnvParams) -> Carry:
    """An idle server and the traffic state of a fresh episode."""
    horizon_s = params.max_steps_in_episode * params.server.dt_s
    return Carry(serving.initial_state(action, params.server.num_age_buckets),
                 workload.init(key, params.workload, horizon_s))


def _interval(key: jax.Array, carry: Carry, t: jax.Array, action: ServingAction,
              params: EnvParams) -> tuple[Carry, Measured]:
    """Interval `t` (int32): its arrivals, then the server under `action`."""
    dt = params.server.dt_s
    traffic, arrivals = workload.step(key, carry.traffic, t.astype(jnp.float32) * dt, dt, params.workload)
    server, m, first_token = serving.serve_interval_with_requests(carry.server, arrivals, action, params.server)
    return Carry(server, traffic), Measured(m.completed, m.output_tokens, m.tpot_s, first_token)


# ----------------------------------------------------------------- the episodes


def _episode(key: jax.Array, rate: jax.Array, action: ServingAction, params: EnvParams, warmup: int,
             seconds: int) -> Measured:
    """One episode at offered `rate` [req/s]: the measured intervals' `Measured`, leaves (seconds, ...)."""
    params = dataclasses.replace(params, workload=dataclasses.replace(params.workload, base_rate=rate))
    k_reset, k_steps = jax.random.split(key)
    keys = jax.random.split(k_steps, warmup + seconds)
    steps = jnp.arange(warmup + seconds, dtype=jnp.int32)

    def body(carry: Carry, xs: tuple[jax.Array, jax.Array]) -> tuple[Carry, Measured]:
        return _interval(xs[0], carry, xs[1], action, params)

    def warm(carry: Carry, xs: tuple[jax.Array, jax.Array]) -> tuple[Carry, None]:
        return body(carry, xs)[0], None

    carry, _ = jax.lax.scan(warm, _initial_state(k_reset, action, params), (keys[:warmup], steps[:warmup]))
    _, measured = jax.lax.scan(body, carry, (keys[warmup:], steps[warmup:]))
    return measured


@functools.partial(jax.jit, static_argnames=("warmup", "seconds"))
def _episodes(keys: jax.Array, rate: jax.Array, action: ServingAction, params: EnvParams, *, warmup: int,
              seconds: int) -> Measured:
    """`_episode` for each key (vmapped): leaves (episodes, seconds, ...)."""
    return jax.vmap(_episode, in_axes=(0, None, None, None, None, None))(keys, rate, action, params, warmup, seconds)


def simulate(point: LoadPoint, rate: float, *, seconds: int, warmup: int, episodes: int, seed: int,
             params: EnvParams | None = None) -> Measured:
    """The measured intervals of `episodes` episodes at offered `rate` [req/s], as NumPy arrays
    (leaves (episodes, seconds, ...)); `params` (from `env_params`) saves rebuilding them.

    Memory: the engine's TTFT components of every measured interval come back, 3 float32 arrays
    of `RequestLatency`'s shape (this engine: 3 x 16, 576 B per episode-second; 1.4 MB for
    4 episodes of 600 s)."""
    params = env_params(point, warmup + seconds) if params is None else params
    keys = jax.random.split(jax.random.key(seed), episodes)
    out = _episodes(keys, jnp.float32(rate), point.action(), params, warmup=warmup, seconds=seconds)
    return jax.tree_util.tree_map(np.asarray, out)


# ----------------------------------------------------------------- statistics on the host


def mixture_quantiles(low: Any, high: Any, weight: Any, quantiles: Sequence[float]) -> np.ndarray:
    """Exact quantiles of a mixture of uniforms: component i holds `weight[i]` of the mass, uniform
    on [low[i], high[i]] (a point mass where high == low). Any equal shapes (flattened).

    The CDF F is piecewise linear between the sorted component ends (slope: the summed densities
    of the components open there; a jump at each point mass). The q-quantile is the smallest x with
    F(x) >= q W (W the total weight): the first end at which F reaches q W, then one linear solve
    on the segment before it. Float64 throughout. NaN for each quantile when W = 0.

    Returns float64 (len(quantiles),) [the unit of low and high].
    """
    lo = np.asarray(low, np.float64).ravel()
    hi = np.asarray(high, np.float64).ravel()
    w = np.asarray(weight, np.float64).ravel()
    keep = w > 0
    lo, hi, w = lo[keep], np.maximum(hi[keep], lo[keep]), w[keep]
    total = w.sum()
    if not total > 0:
        return np.full(len(quantiles), np.nan)
    width = hi - lo
    spread = width > 0
    density = np.where(spread, w / np.where(spread, width, 1.0), 0.0)
    ends = np.concatenate([lo, hi])
    slope_change = np.concatenate([density, -density])
    jump = np.concatenate([np.where(spread, 0.0, w), np.zeros_like(w)])
    order = np.argsort(ends, kind="stable")
    x, slope_change, jump = ends[order], slope_change[order], jump[order]
    slope_before = np.concatenate([[0.0], np.cumsum(slope_change)[:-1]])  # F's slope on (x[k-1], x[k])
    rise = slope_before * np.diff(x, prepend=x[0])  # F's increase over (x[k-1], x[k])
    reached_before = np.cumsum(rise + jump) - jump  # F just below x[k] (left limit)
    at = reached_before + jump  # F at x[k]
    out = np.empty(len(quantiles))
    for j, q in enumerate(quantiles):
        target = q * total
        k = min(int(np.searchsorted(at, target, side="left")), len(x) - 1)
        if k > 0 and reached_before[k] >= target and slope_before[k] > 0:
            start = reached_before[k] - rise[k]  # F at x[k-1]
            out[j] = min(max(x[k - 1] + (target - start) / slope_before[k], x[k - 1]), x[k])
        else:
            out[j] = x[k]
    return out


def row(rate: float | str, measured: Measured) -> dict[str, float | str]:
    """One output row (keys `ROW_KEYS`) from the measured intervals of every episode."""
    completed = np.asarray(measured.completed, np.float64)
    tokens = np.asarray(measured.output_tokens, np.float64)
    measured_s = completed.size * INTERVAL_S  # episodes x seconds
    ft = measured.first_token
    p50, p90, p99 = mixture_quantiles(ft.low_s, ft.high_s, ft.requests, QUANTILES)
    w = np.asarray(ft.requests, np.float64)
    mid = 0.5 * (np.asarray(ft.low_s, np.float64) + np.asarray(ft.high_s, np.float64))
    first = w.sum()
    token_sum = tokens.sum()
    return {
        "rate": rate,
        "requests_per_s": float(completed.sum() / measured_s),
        "output_tokens_per_s": float(token_sum / measured_s),
        "ttft_p50_s": float(p50),
        "ttft_p90_s": float(p90),
        "ttft_p99_s": float(p99),
        "ttft_mean_s": float((w * mid).sum() / first) if first > 0 else math.nan,
        "tpot_mean_s": float((np.asarray(measured.tpot_s, np.float64) * tokens).sum() / token_sum)
        if token_sum > 0 else math.nan,
    }


# ----------------------------------------------------------------- the load test


def check_rates(rates: Sequence[float], name: str = "rates") -> list[float]:
    """The rates as floats; ValueError naming `name` unless each is a finite number in (0, MAX_RATE]."""
    out = []
    for r in rates:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not (0.0 < r <= MAX_RATE):
            raise ValueError(f"{name}: {r!r} is not a rate; each must be a finite number in (0, {MAX_RATE:g}] req/s")
        out.append(float(r))
    return out


def check_run(seconds: int, warmup: int, episodes: int, seed: int) -> None:
    """ValueError naming the argument unless each is an integer in its range."""
    _integer_in("seconds", seconds, 1, MAX_INTERVALS)
    _integer_in("warmup", warmup, 0, MAX_INTERVALS - seconds)
    _integer_in("episodes", episodes, 1, 10**5)
    _integer_in("seed", seed, 0, MAX_SEED)


def saturation_probe(run: Any) -> float:
    """C_probe [req/s] (module docstring): `run(rate)` gives a row; offered PROBE_START_RATE,
    doubling, until completions < offered / 2 (or the offered rate would pass MAX_RATE)."""
    offered = PROBE_START_RATE
    while True:
        served = float(run(offered)["requests_per_s"])
        if served < 0.5 * offered or 2.0 * offered > MAX_RATE:
            return served
        offered *= 2.0


def run_loadtest(point: LoadPoint, rates: Sequence[float], *, saturation: bool = False, seconds: int = 600,
                 warmup: int = 60, episodes: int = 4, seed: int = 0) -> list[dict[str, float | str]]:
    """One row per rate (in order), plus a final {"rate": "saturation", ...} row when
    `saturation`; each row has exactly `ROW_KEYS` (units in the module docstring).

    Raises:
      ValueError: a rate that is not a finite number in (0, MAX_RATE], neither rates nor
        saturation, or a run argument out of range (each named).
    """
    rates = check_rates(rates)
    if not rates and not saturation:
        raise ValueError("rates: give at least one rate, or ask for the saturation row")
    check_run(seconds, warmup, episodes, seed)
    params = env_params(point, warmup + seconds)

    def run(rate: float, label: float | str | None = None) -> dict[str, float | str]:
        measured = simulate(point, rate, seconds=seconds, warmup=warmup, episodes=episodes, seed=seed, params=params)
        return row(rate if label is None else label, measured)

    rows = [run(r) for r in rates]
    if saturation:
        rows.append(run(SATURATION_OVERLOAD * saturation_probe(run), "saturation"))
    return rows
