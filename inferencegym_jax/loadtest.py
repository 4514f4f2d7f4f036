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

**Episodes.** `episodes` episodes, keys split from `jax.random.key(seed)` (all of them first,
then sliced: episode i has the same key whatever the batching), run `EPISODE_BATCH` at a time
(vmapped; the episodes are spread evenly over the fewest batches of at most that size, the last
padded with repeated keys whose results are dropped, so every batch has one shape: one
compilation). Each episode runs `warmup` 1-s intervals that are simulated and not measured, then
`seconds` measured ones (`lax.scan` over intervals). The rate is a traced value: one compilation
per static structure (point shapes, `seconds`, `warmup`, batch size), whatever the rates and knob
values. Each batch's measured intervals are folded into the row's running sums (`Pooled`), one
episode at a time and in episode order, while the next batch runs, then dropped: host memory is
two batches' intervals plus O(grid) floats, whatever `episodes` is. The row does not depend on
the batch size beyond float32 rounding: every batching folds the same episodes in the same order,
but XLA compiles each batch shape on its own and may round differently (seen on CPU: 3 vs 2
episodes a batch differ by 1e-9 relative, 256 vs 4 x 64 not at all; the slow tier tests 1e-6).
Same seed and batch size, same bits.

**Statistics per row**, over the measured intervals of every episode pooled:

* `requests_per_s`, `output_tokens_per_s`: completions and output tokens per second.
* `ttft_p50_s`, `ttft_p90_s`, `ttft_p99_s`, `ttft_mean_s` [s]: over the *requests* whose first
  token came in the measured window, not means of per-interval percentiles. The engine returns
  each interval's TTFT distribution of those requests as a mixture (`serving.RequestLatency`):
  uniform components (the fluid engine: one per admitted (class, age) queue bin,
  `serving.latency.FirstToken`, weighted by the requests admitted) and shifted exponentials (the
  mixed engine's fresh arrivals). Every interval's components are streamed into one CDF on a
  fixed log grid (`request_stats.TtftCdf`: 8,192 points from 0.1 ms to 10^4 s, 0.225 % apart),
  exact at the grid points for the uniforms, the exponentials cut into 36 uniform pieces (each
  quantile overstated by at most 0.0103 x the exponential's mean wait); each quantile inverts it
  with linear interpolation between grid points, so it is within one grid cell (0.225 % in x) of
  the exact quantile of the pooled uniforms (`request_stats.mixture_quantiles`, which sorts every
  component; tested). The mean is exact: the request-weighted mean of the components' means.
  NaN when no request got a first token.
* `tpot_mean_s` [s/token]: vLLM's per-request TPOT is (e2e - TTFT) / (output - 1), averaged over
  requests. The fluid engine tracks no request's decode, so this is its stand-in: the
  output-token-weighted mean of each interval's `IntervalMetrics.tpot_s` (wall time per token of
  the running sequences). A request's TPOT is the token-weighted mean of the intervals it
  decodes in; with equal outputs, the mean over requests is the token-weighted mean over time.
* Per-request TPOT quantiles (`Pooled.tpot_quantiles`, not a row key): under "request" SLO
  accounting (`LoadPoint.slo_accounting`, `serving.request_tpot`) the engine gives the mean TPOT
  of each cohort of good requests that finished and their number (`RequestLatency.tpot_s`,
  `tpot_requests`); they are pooled as point masses in a second `request_stats.TtftCdf` (the same
  streamed log-grid CDF), each quantile within one grid cell.

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
and the `RequestLatency` components. The host-side statistics are `Pooled` and
`inferencegym_jax.request_stats`.
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
from inferencegym_jax.request_stats import TtftCdf
from inferencegym_jax.serving.types import ENGINES, SLO_ACCOUNTINGS
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
EPISODE_BATCH = 64  # episodes per jitted call: a batch's intervals on the host (fluid engine, 600 s: 22 MB)
MAX_EPISODES = 10**5  # episodes per row: 6 x 10^7 measured intervals at 600 s, hours on 2 cores


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
      engine: the engine model, "fluid" or "mixed" (`serving.types.ENGINES`); None: the base
        task's.
      slo_accounting: "completion" or "request" (`serving.types.SLO_ACCOUNTINGS`; "request" gives
        per-request TPOT quantiles, `Pooled.tpot_quantiles`); None: the base task's.
      length_strata: the prompt-length strata rule, "moments" or "clamped"
        (`workload.LENGTH_STRATA_RULES`, the mixed engine's TTFT nodes); None: "moments".
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
    engine: str | None = None
    length_strata: str | None = None
    slo_accounting: str | None = None

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
        if self.engine is not None:
            _choice("engine", self.engine, ENGINES)
        if self.slo_accounting is not None:
            _choice("slo_accounting", self.slo_accounting, SLO_ACCOUNTINGS)
        if self.length_strata is not None:
            _choice("length_strata", self.length_strata, workload.LENGTH_STRATA_RULES)
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
    if point.engine is not None:
        raw["server"]["engine"] = point.engine
    if point.slo_accounting is not None:
        raw["server"]["slo_accounting"] = point.slo_accounting
    # base_rate: a placeholder in the schema's range; each run sets its own (a traced value).
    raw["workload"] = {"schedule": "constant", "base_rate": PROBE_START_RATE, "class_mix": list(CLASS_MIX),
                       "prompt": dict(point.prompt), "output": dict(point.output)}
    if point.length_strata is not None:
        raw["workload"]["length_strata"] = point.length_strata
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
    return Carry(serving.initial_state(action, params.server.num_age_buckets, params.server.slo_accounting),
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
             params: EnvParams | None = None, batch: int = EPISODE_BATCH) -> Pooled:
    """The measured intervals of `episodes` episodes at offered `rate` [req/s], pooled (`Pooled`);
    `params` (from `env_params`) saves rebuilding them. Episodes run `batch` at a time at most
    (module docstring): host memory is two batches' `Measured` (this engine: 3 x 3 x 16 float32 TTFT
    parameters per episode-second, 22 MB for 64 episodes of 600 s) plus the O(grid) accumulator.

    Raises:
      ValueError: `batch` not an integer in [1, MAX_EPISODES].
    """
    _integer_in("batch", batch, 1, MAX_EPISODES)
    params = env_params(point, warmup + seconds) if params is None else params
    keys = jax.random.split(jax.random.key(seed), episodes)  # episode i's key whatever the batching
    batches = -(-episodes // batch)
    size = -(-episodes // batches)  # the fewest batches of at most `batch`, spread evenly
    keys = jnp.concatenate([keys, keys[: batches * size - episodes]])  # padding, dropped below
    rate_, action = jnp.float32(rate), point.action()

    def launch(i: int) -> Measured:  # dispatched asynchronously: the next batch runs while one is folded
        return _episodes(keys[i * size:(i + 1) * size], rate_, action, params, warmup=warmup, seconds=seconds)

    pooled, pending = Pooled(), launch(0)
    for i in range(batches):
        done = pending
        if i + 1 < batches:
            pending = launch(i + 1)
        measured = jax.tree_util.tree_map(np.asarray, done)
        for e in range(min(size, episodes - i * size)):
            pooled.add(jax.tree_util.tree_map(lambda leaf, e=e: leaf[e], measured))
    return pooled


# ----------------------------------------------------------------- statistics on the host


class Pooled:
    """Running sums of measured intervals, the row's statistics (module docstring), float64.

    Attributes:
      intervals: [intervals] measured intervals added (episodes x seconds).
      completed: [requests] finished in them.
      output_tokens: [tokens] generated in them.
      tpot_tokens: [s] sum over intervals of tpot_s x output_tokens (TPOT's token-weighted sum).
      ttft: the pooled TTFT distribution (`request_stats.TtftCdf`: O(grid) floats).
      tpot: the pooled per-request TPOT of the good finished requests (a `TtftCdf` of point masses;
        empty unless the point runs "request" accounting).
    """

    def __init__(self) -> None:
        self.intervals = 0
        self.completed = 0.0
        self.output_tokens = 0.0
        self.tpot_tokens = 0.0
        self.ttft = TtftCdf()
        self.tpot = TtftCdf()

    def add(self, episode: Measured) -> None:
        """Fold one episode's measured intervals (NumPy leaves (seconds, ...)) into the sums."""
        tokens = np.asarray(episode.output_tokens, np.float64)
        self.intervals += tokens.size
        self.completed += float(np.asarray(episode.completed, np.float64).sum())
        self.output_tokens += float(tokens.sum())
        self.tpot_tokens += float((np.asarray(episode.tpot_s, np.float64) * tokens).sum())
        ft = episode.first_token
        self.ttft.add_uniform(ft.low_s, ft.high_s, ft.requests)
        self.ttft.add_shifted_exponential(ft.exp_shift_s, ft.exp_scale_s, ft.exp_requests)
        self.tpot.add_uniform(ft.tpot_s, ft.tpot_s, ft.tpot_requests)

    def tpot_quantiles(self, qs: Sequence[float]) -> list[float]:
        """Per-request TPOT [s per token] at each quantile in `qs` of the good finished requests
        (within one grid cell); NaN where none finished (or not "request" accounting)."""
        return [float(q) for q in self.tpot.quantiles(qs)]


def row(rate: float | str, pooled: Pooled) -> dict[str, float | str]:
    """One output row (keys `ROW_KEYS`) from the pooled measured intervals of every episode."""
    measured_s = pooled.intervals * INTERVAL_S  # episodes x seconds
    p50, p90, p99 = pooled.ttft.quantiles(QUANTILES)
    return {
        "rate": rate,
        "requests_per_s": pooled.completed / measured_s,
        "output_tokens_per_s": pooled.output_tokens / measured_s,
        "ttft_p50_s": float(p50),
        "ttft_p90_s": float(p90),
        "ttft_p99_s": float(p99),
        "ttft_mean_s": pooled.ttft.mean(),
        "tpot_mean_s": pooled.tpot_tokens / pooled.output_tokens if pooled.output_tokens > 0 else math.nan,
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
    _integer_in("episodes", episodes, 1, MAX_EPISODES)
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
                 warmup: int = 60, episodes: int = 4, seed: int = 0,
                 batch: int = EPISODE_BATCH) -> list[dict[str, float | str]]:
    """One row per rate (in order), plus a final {"rate": "saturation", ...} row when
    `saturation`; each row has exactly `ROW_KEYS` (units in the module docstring). `batch`:
    episodes per jitted call at most (the rows do not depend on it).

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
        pooled = simulate(point, rate, seconds=seconds, warmup=warmup, episodes=episodes, seed=seed, params=params,
                          batch=batch)
        return row(rate if label is None else label, pooled)

    rows = [run(r) for r in rates]
    if saturation:
        rows.append(run(SATURATION_OVERLOAD * saturation_probe(run), "saturation"))
    return rows
