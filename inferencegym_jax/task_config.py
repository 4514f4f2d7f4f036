"""The schema of a task file (configs/tasks/*.toml): one dataclass per table, every field typed,
documented, with its unit and physical range (`validation.parse` checks a file against it).

Fields a task's traffic does not use are left out of its file: a schedule or a length
distribution names the fields it needs (`REQUIRED`), and a field it does not use is an error,
so that nothing in a file is silently ignored. `tasks.build_params` fills the unused leaves of
the params pytree with inert values.

Ranges are what the physics stays finite and meaningful in (float32 included), not taste:
token counts up to 131,072 (the longest context of current open models, Llama 3.1), lognormal
sigmas up to 3 (a p99 1,000x the median; fits of ShareGPT and LMSYS lengths give 0.8-1.5, and
float32 moments of the clamped lognormal stay finite far beyond 3), times up to an hour.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from inferencegym_jax.actions import KNOB_RANGES, KNOBS
from inferencegym_jax.perf_model import SERVED_MODELS
from inferencegym_jax.profiles import DRAFTS, GPUS
from inferencegym_jax.reward import KINDS as REWARD_KINDS
from inferencegym_jax.serving.types import ENGINES, SLO_ACCOUNTINGS, TPOT_SPREADS
from inferencegym_jax.traffic.workload import LENGTH_KINDS, LENGTH_STRATA_RULES, NUM_CLASSES, SCHEDULES
from inferencegym_jax.validation import choice, integer, names, number, text, vector

# What a score of 1 is (inferencegym_jax.graders, "Score scale").
SCORE_SCALES = ("best_static", "oracle")
MAX_TOKENS = 131072.0  # [tokens] longest context of current open models (Llama 3.1: 128 k)
MAX_SIGMA = 3.0  # log-space standard deviation of a length distribution
HOUR_S = 3600.0  # [s]
# Lower bounds where zero would divide (float32 turns 1e-300 into 0) and physics ends first:
MIN_INTERVAL_S = 0.01  # [s] one decode step of an 8B model on one GPU (~10 ms): shorter times resolve nothing
MIN_SLO_S = 0.001  # [s] a latency target below any engine step (every request misses it)
MIN_RATE = 0.001  # [req/s] one request per ~17 minutes
MIN_SIGMA = 0.01  # a length spread of 1 %: narrower is a fixed length (use low = high)
MIN_MEMORY_GB = 1.0  # [GB] below every served model's weights: the engine cannot start (always OOM)
MIN_BUDGET = 1e-6  # [$ per 1k output tokens] far below any GPU's cost per token


def _require(path: str, owner: str, value: str, config: object, required: tuple[str, ...],
             optional: tuple[str, ...]) -> None:
    """ValueError for a field `value` (of `owner`) needs and lacks, or sets and does not use."""
    for f in optional:
        present = getattr(config, f) is not None
        if f in required and not present:
            raise ValueError(f"config key {path + f!r} is missing: {owner}={value!r} needs {list(required)}")
        if f not in required and present:
            raise ValueError(f"config key {path + f!r} is not used by {owner}={value!r} (it uses {list(required)})")


@dataclasses.dataclass(frozen=True)
class LengthConfig:
    """A distribution of tokens per request (prompt or output), the same for every class."""

    kind: str = choice(tuple(LENGTH_KINDS), "uniform on [low, high]; lognormal (median1, sigma1) or a two-lognormal "
                                           "mixture (weight2 of the second), clamped to [low, high]")
    low: float = number("tokens", 1, MAX_TOKENS, "lower bound (uniform start or clamp)")
    high: float = number("tokens", 1, MAX_TOKENS, "upper bound (uniform end or clamp)")
    median1: float | None = number("tokens", 1, MAX_TOKENS, "median of the (first) lognormal", optional=True)
    sigma1: float | None = number("", MIN_SIGMA, MAX_SIGMA, "log-space std of the (first) lognormal",
                                  optional=True)
    median2: float | None = number("tokens", 1, MAX_TOKENS, "median of the second lognormal", optional=True)
    sigma2: float | None = number("", MIN_SIGMA, MAX_SIGMA, "log-space std of the second lognormal",
                                  optional=True)
    weight2: float | None = number("", 0, 1, "probability of the second lognormal", optional=True)

    REQUIRED = {"uniform": (), "lognormal": ("median1", "sigma1"),
                "bimodal": ("median1", "sigma1", "median2", "sigma2", "weight2")}

    def check(self, path: str) -> None:
        if self.low > self.high:
            raise ValueError(f"config keys {path}low={self.low:g} and {path}high={self.high:g}: need low <= high")
        _require(path, f"{path}kind", self.kind, self, self.REQUIRED[self.kind], self.REQUIRED["bimodal"])


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """The serving engine and the SLOs."""

    dt_s: float = number("s", MIN_INTERVAL_S, HOUR_S, "control interval")
    num_age_buckets: int = integer("intervals", 2, 1024, "queue ages tracked; also the client timeout")
    ttft_slo_s: tuple[float, ...] = vector("s", NUM_CLASSES, MIN_SLO_S, HOUR_S,
                                           "time-to-first-token SLO per priority class")
    tpot_slo_s: tuple[float, ...] = vector("s", NUM_CLASSES, MIN_SLO_S, 10,
                                           "time-per-output-token SLO per priority class")
    slo_accounting: str = choice(SLO_ACCOUNTINGS, "when requests are judged against their SLOs: at admission (v0) or "
                                                  "at completion, DistServe goodput (inferencegym_jax.serving.goodput)")
    memory_limit_gb: float = number("GB", MIN_MEMORY_GB, 1000, "memory above which the engine runs out of memory")
    max_batched_tokens: float = number("tokens", 1, MAX_TOKENS * 8, "tokens per engine step with chunked prefill")
    kv_watermark: float = number("", 0, 0.5, "fraction of KV blocks kept free at admission")
    restart_s: float = number("s", 0, HOUR_S, "engine restart after a weight change or an out-of-memory")
    prefill_start_s: float = number("s", 0, HOUR_S, "start of a prefill engine on a second GPU after its weight load")
    engine: str | None = choice(ENGINES, "the engine model: fluid (one prefill pass, then decode; v0/v1 tasks, the "
                                         "default) or mixed (chunked prefill in the decode iterations, "
                                         "inferencegym_jax.serving.mixed)", optional=True)
    tpot_spread: str | None = choice(TPOT_SPREADS, "how 'request' accounting judges a cohort's finished requests: "
                                                   "all by its mean TPOT (cohort, the default) or by the prompt "
                                                   "chunks in each one's decode (bursts; the mixed engine only, "
                                                   "inferencegym_jax.serving.tpot_spread)", optional=True)

    def check(self, path: str) -> None:
        if (self.tpot_spread or "cohort") != "cohort" and (self.engine != "mixed" or self.slo_accounting != "request"):
            raise ValueError(f"config key {path}tpot_spread={self.tpot_spread!r} needs {path}engine='mixed' and "
                             f"{path}slo_accounting='request' (not {self.engine!r}, {self.slo_accounting!r})")


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    """The traffic: an arrival schedule, the class mix, and length distributions or a trace."""

    schedule: str = choice(SCHEDULES, "constant, periodic bursts, Markov-modulated bursts, or trace replay")
    class_mix: tuple[float, ...] = vector("", NUM_CLASSES, 0, 1, "fraction of requests per priority class")
    base_rate: float | None = number("req/s", MIN_RATE, 1e4, "mean arrival rate outside bursts",
                                     optional=True)
    burst_multiplier: float | None = number("", 1, 1000, "rate factor during a burst", optional=True)
    burst_period_s: float | None = number("s", MIN_INTERVAL_S, 1e6, "period of periodic bursts", optional=True)
    burst_duration_s: float | None = number("s", MIN_INTERVAL_S, 1e6,
                                            "burst length (periodic) or mean burst length (mmpp)", optional=True)
    burst_gap_s: float | None = number("s", MIN_INTERVAL_S, 1e6, "mean time between mmpp bursts", optional=True)
    burst_class_mix: tuple[float, ...] | None = vector("", NUM_CLASSES, 0, 1, "fraction of requests per class during "
                                                       "a burst (default: class_mix)", optional=True)
    trace: str | None = text("trace per class, 'class0,class1,class2' (inferencegym_jax.traffic.traces)", optional=True)
    trace_keep_one_in: int | None = integer("", 1, 10**6, "keep every n-th request of the trace", optional=True)
    prompt: LengthConfig | None = None
    output: LengthConfig | None = None
    burst_prompt: LengthConfig | None = None  # prompt lengths of requests arriving in a burst (default: prompt)
    length_strata: str | None = choice(LENGTH_STRATA_RULES, "how an interval's prompt-length strata (the mixed "
                                       "engine's TTFT nodes) follow from the law: moments (v0-v2 tasks, the "
                                       "default) or clamped (none above the law's high; "
                                       "inferencegym_jax.traffic.strata)", optional=True)

    REQUIRED = {
        "constant": ("base_rate", "prompt", "output"),
        "periodic": ("base_rate", "burst_multiplier", "burst_period_s", "burst_duration_s", "prompt", "output"),
        "mmpp": ("base_rate", "burst_multiplier", "burst_duration_s", "burst_gap_s", "prompt", "output"),
        "trace": ("trace", "trace_keep_one_in"),
    }
    OPTIONAL = ("base_rate", "burst_multiplier", "burst_period_s", "burst_duration_s", "burst_gap_s", "trace",
                "trace_keep_one_in", "prompt", "output")

    BURST_REGIME = ("burst_class_mix", "burst_prompt")  # optional for the burst schedules, unused by the others

    def check(self, path: str) -> None:
        for name in ("class_mix", "burst_class_mix"):
            mix = getattr(self, name)
            if mix is not None and abs(sum(mix) - 1.0) > 1e-4:
                raise ValueError(f"config key {path}{name}={list(mix)}: must sum to 1")
        _require(path, f"{path}schedule", self.schedule, self, self.REQUIRED[self.schedule], self.OPTIONAL)
        if self.schedule not in ("periodic", "mmpp"):
            _require(path, f"{path}schedule", self.schedule, self, self.REQUIRED[self.schedule], self.BURST_REGIME)


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """The per-interval reward (inferencegym_jax.reward)."""

    weights: tuple[float, ...] = vector("", 5, 0, 10, "alpha (goodput), beta (TTFT), gamma (SLO violations), "
                                                      "delta (cost), epsilon (knob changes)")
    cost_budget_per_1k: float = number("$ per 1k output tokens", MIN_BUDGET, 1000, "cost budget")
    kind: str = choice(REWARD_KINDS, "'rates': the terms are the interval's rates (v0); 'increments': what the "
                                     "interval adds to the grader's episode sums (v1; inferencegym_jax.reward)")


def _knob(name: str) -> Any:
    lo, hi = KNOB_RANGES[KNOBS.index(name)]
    return number("", lo, hi, f"{name} of the default configuration (actions.KNOB_RANGES)")


@dataclasses.dataclass(frozen=True)
class ActionConfig:
    """A configuration of the five knobs in physical units (actions.ServingAction)."""

    kv_budget: float = _knob("kv_budget")
    spec_length: float = _knob("spec_length")
    batch_size: float = _knob("batch_size")
    prefill_disagg: float = _knob("prefill_disagg")
    quant_tier: float = _knob("quant_tier")


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """A whole task file."""

    id: str = text("versioned env id, InferenceGym-<Name>-v<N>")
    name: str = text("human-readable name")
    difficulty: str = choice(("easy", "medium", "hard"), "difficulty label")
    grader: str = text("grader of the task (inferencegym_jax.graders.GRADER_WEIGHTS)")
    score_scale: str = choice(SCORE_SCALES, "what a score of 1 is: the best static configuration (v0) or the "
                                            "clairvoyant ceiling (inferencegym_jax.graders)")
    gpu: str = choice(tuple(GPUS), "accelerator profile (inferencegym_jax.profiles)")
    model: str = choice(SERVED_MODELS, "served model")
    draft: str = choice(tuple(DRAFTS), "speculative draft method")
    active_knobs: tuple[str, ...] = names(KNOBS, "the knobs the agent controls")
    max_steps: int = integer("intervals", 1, 10**6, "horizon of an episode")
    # Required tables: None until parsed (`check` refuses a missing one), so typed as present.
    default_action: ActionConfig = None  # type: ignore[assignment]
    server: ServerConfig = None  # type: ignore[assignment]
    workload: WorkloadConfig = None  # type: ignore[assignment]
    reward: RewardConfig = None  # type: ignore[assignment]

    def check(self, path: str) -> None:
        for table in ("default_action", "server", "workload", "reward"):
            if getattr(self, table) is None:
                raise ValueError(f"config table {table!r} is missing")
