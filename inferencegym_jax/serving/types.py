"""The server's parameters, state and per-interval metrics (pytrees), and the pools they hold."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax import perf_model
from inferencegym_jax.actions import ServingAction
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.traffic.workload import NUM_CLASSES


@struct.dataclass
class ServerParams:
    """Engine and SLO parameters of one task (a pytree).

    Attributes:
      profiles: `perf_model.Profile` with a leading axis of 3, one per precision tier.
      dt_s: float32 [s], length of one control interval.
      ttft_slo_s: float32 (3,) [s], time-to-first-token SLO per priority class.
      tpot_slo_s: float32 (3,) [s], time-per-output-token SLO per priority class.
      memory_limit_bytes: float32 [B], memory above which the engine runs out of memory.
      max_batched_tokens: float32 [tokens], tokens per engine step with chunked prefill
        (vLLM's max_num_batched_tokens; 2048 is vLLM V1's default for the online server).
      kv_watermark: float32, fraction of KV blocks kept free at admission (vLLM: 0.01).
      restart_s: float32 [s], engine restart after a weight change or OOM (CUDA-graph capture
        and warm-up; vLLM logs 5-30 s, we take the warm end).
      prefill_start_s: float32 [s], start of a prefill-only engine on a second GPU once its
        weights are loaded (process and KV-transfer setup; prefill runs large batches without
        CUDA graphs, so no graph capture).
      num_age_buckets: static int, queue ages tracked; also the client timeout in intervals.
      slo_accounting: static str, when a request's SLO outcome is decided (`serving.goodput`):
        "admission" (v0 tasks: at admission, against the TTFT and the interval's TPOT) or
        "completion" (DistServe goodput: a request is good when it meets its TTFT SLO and its
        class's TPOT SLO in every interval it decodes; goodput is the output tokens of such
        requests as they are generated, attainment is counted when requests finish) or "request"
        (the same, with TPOT judged as vLLM reports it, on each request's mean over its decode:
        `serving.request_tpot`).
      engine: static str, the engine model (`ENGINES`): "fluid" (the v0/v1 tasks': one prefill
        pass per interval, then decode; `serving.latency`) or "mixed" (prefill chunks ride in the
        decode iterations, one forward each, and fresh arrivals' TTFT follows the iteration-length
        chain; `serving.mixed`).
      tpot_spread: static str, how "request" accounting judges a cohort's finished requests
        (`TPOT_SPREADS`): "cohort" (every v2 task's: all by the cohort's mean TPOT) or "bursts" (the
        share whose own TPOT, the prompt chunks landing in their own decode, is within the SLO;
        `serving.tpot_spread`; the mixed engine and "request" accounting only).
    """

    profiles: perf_model.Profile
    dt_s: Array
    ttft_slo_s: Array
    tpot_slo_s: Array
    memory_limit_bytes: Array
    max_batched_tokens: Array
    kv_watermark: Array
    restart_s: Array
    prefill_start_s: Array
    num_age_buckets: int = struct.field(pytree_node=False, default=16)
    slo_accounting: str = struct.field(pytree_node=False, default="admission")
    engine: str = struct.field(pytree_node=False, default="fluid")
    tpot_spread: str = struct.field(pytree_node=False, default="cohort")


SLO_ACCOUNTINGS = ("admission", "completion", "request")
ENGINES = ("fluid", "mixed")
TPOT_SPREADS = ("cohort", "bursts")


def judged_metric(slo_accounting: str) -> str:
    """The IntervalMetrics field counting the requests an interval judged against their SLOs:
    "admitted", or "completed" under "completion" and "request" accounting (serving.goodput)."""
    return "admitted" if slo_accounting == "admission" else "completed"


@struct.dataclass
class OnTime:
    """The running sequences' SLO standing, for "completion" accounting (zeros otherwise).

    Both parts are subsets of `ServerState.running`, tracked apart so that a finished
    request's outcome is a product of non-negative amounts (no difference of two nearly equal
    sums, whose float32 rounding would count a few millionths of a request either way).

    Attributes:
      seqs: float32 (3,) [sequences] per class, admitted within their class's TTFT SLO and never
        decoded in an interval above its TPOT SLO, nor preempted.
      remaining: float32 (3,) [tokens] of output they still have to generate.
      late_seqs: float32 () [sequences] that have missed an SLO (admitted late, readmitted after
        a preemption, or decoded too slowly): a violation each when they finish.
    """

    seqs: Array
    remaining: Array
    late_seqs: Array

    def scaled(self, fraction: Array) -> OnTime:
        """Every field times `fraction` (a scalar share of the running pool)."""
        return OnTime(fraction * self.seqs, fraction * self.remaining, fraction * self.late_seqs)


# [intervals] cohorts tracked. At Fleet1's and the cross-check's lengths a request decodes for 1-10 s
# (10-200 output tokens at 20-50 ms); 16 keep every cohort of a 1-s interval apart until its mean is
# settled, and the longest outputs (2,048 tokens, ~40-100 s) share the last cohort's mean.
TPOT_COHORTS = 16


@struct.dataclass
class TpotCohorts:
    """The good running sequences by the interval of their first token, for "request" SLO
    accounting (`serving.request_tpot`); H = TPOT_COHORTS.

    Attributes:
      seqs: float32 (3, H) [sequences] per class and cohort.
      remaining: float32 (3, H) [tokens] of output they still have to generate.
      decode_s: float32 (H,) [s] wall time since the first token, per sequence of the cohort.
      tokens: float32 (H,) [tokens] output tokens emitted since the first token, per sequence.
    """

    seqs: Array
    remaining: Array
    decode_s: Array
    tokens: Array

    def scaled(self, fraction: Array) -> TpotCohorts:
        """Every cohort's sequences and tokens to go times `fraction` (a share of the running pool)."""
        return TpotCohorts(fraction * self.seqs, fraction * self.remaining, self.decode_s, self.tokens)

    def mean_tpot_s(self) -> Array:
        """float32 (H,) [s per token] each cohort's mean TPOT so far (0 before its first token)."""
        return safe_div(self.decode_s, self.tokens)


def empty_cohorts() -> TpotCohorts:
    """No good running sequence."""
    return TpotCohorts(jnp.zeros((NUM_CLASSES, TPOT_COHORTS), jnp.float32),
                       jnp.zeros((NUM_CLASSES, TPOT_COHORTS), jnp.float32),
                       jnp.zeros((TPOT_COHORTS,), jnp.float32), jnp.zeros((TPOT_COHORTS,), jnp.float32))


@struct.dataclass
class Queue:
    """Requests waiting for admission, by priority class and age; leaves float32 (3, A).

    Age a holds the requests that arrived a intervals ago (a = 0: this interval's arrivals).

    Attributes:
      count: [requests] waiting.
      prompt: [tokens], their prompt tokens.
      output: [tokens], their output tokens still to generate.
      prompt_sq: [tokens^2], their summed squared prompt lengths (prefill attention).
    """

    count: Array
    prompt: Array
    output: Array
    prompt_sq: Array

    def scaled(self, fraction: Array) -> Queue:
        """Every field times `fraction` (broadcast against (3, A)): a share of each bin."""
        return Queue(fraction * self.count, fraction * self.prompt, fraction * self.output, fraction * self.prompt_sq)

    def __sub__(self, other: Queue) -> Queue:
        return Queue(self.count - other.count, self.prompt - other.prompt, self.output - other.output,
                     self.prompt_sq - other.prompt_sq)


@struct.dataclass
class Sequences:
    """A pool of sequences: the decode batch, or the preempted ones awaiting recompute.

    Attributes:
      seqs: float32 [sequences].
      context: float32 [tokens], KV-resident (running) or to recompute (preempted).
      remaining: float32 [tokens] of output still to generate.
    """

    seqs: Array
    context: Array
    remaining: Array

    def scaled(self, fraction: Array) -> Sequences:
        """The same share of every field (a fraction of the pool's sequences)."""
        return Sequences(fraction * self.seqs, fraction * self.context, fraction * self.remaining)

    def __add__(self, other: Sequences) -> Sequences:
        return Sequences(self.seqs + other.seqs, self.context + other.context, self.remaining + other.remaining)

    def __sub__(self, other: Sequences) -> Sequences:
        return Sequences(self.seqs - other.seqs, self.context - other.context, self.remaining - other.remaining)


@struct.dataclass
class ServerState:
    """The server between two control intervals.

    Attributes:
      queue: Queue, (3, A) leaves.
      running: Sequences in the decode batch.
      preempted: Sequences preempted (or dropped by a reload), waiting to be recomputed.
      stall_s: float32 [s] of reconfiguration or restart still to sit out.
      prefill_warmup_s: float32 [s] until a newly requested prefill GPU is ready.
      config: ServingAction in force (the task default before the first interval).
      started: bool, whether the engine has been configured once; the first configuration is free.
      on_time: OnTime, the part of `running` still on course to meet both SLOs; under "request"
        accounting only its late part (the good part is `tpot`).
      tpot: TpotCohorts of the good running sequences under "request" accounting
        (`serving.request_tpot`), else None.
    """

    queue: Queue
    running: Sequences
    preempted: Sequences
    stall_s: Array
    prefill_warmup_s: Array
    config: ServingAction
    started: Array
    on_time: OnTime
    tpot: TpotCohorts | None = None


@struct.dataclass
class IntervalMetrics:
    """What one control interval produced; float32 scalars unless noted.

    Attributes:
      ttft_p50_s, ttft_p99_s: [s] percentiles of time to first token (see `serving.latency`).
      ttft_slo_ratio: mean over requests of min(TTFT / class SLO, 4) / 4, in [0, 1].
      tpot_s: [s] wall time per output token of a running sequence (stalls included).
      output_tokens: [tokens] output tokens generated in the interval.
      good_tokens: [tokens] goodput: under "admission" accounting the output owed to the
        requests admitted this interval within their TTFT and TPOT SLOs; under "completion"
        accounting the output tokens generated in the interval for requests still meeting both
        (under "request" accounting, those whose mean TPOT so far is within its SLO).
      tokens_per_s: [tokens/s] output tokens generated per second.
      quality_tokens_per_s: [tokens/s] generated tokens times (1 - quality loss of the tier).
      prefill_tokens: [tokens] prompt tokens prefilled (recompute included).
      admitted: [requests] admitted for the first time.
      completed: [requests] finished.
      slo_violations: [requests] that missed an SLO, decided this interval: "admission"
        accounting, admitted past their TTFT SLO or with TPOT above its SLO; "completion" and
        "request" accounting, finished without meeting both; plus those that timed out or failed.
      slo_violation_rate: violations / decided (admitted, or under "completion" and "request"
        accounting completed, + timed out + failed), 0 when none.
      timeouts: [requests] that gave up waiting.
      failed: [requests] lost to an out-of-memory restart.
      evictions: [sequences] preempted for lack of KV space (or by a reconfiguration).
      oom: 1.0 when the engine ran out of memory, else 0.
      gpu_memory_bytes: [B] memory in use on the decode GPU.
      kv_capacity_tokens: [tokens] KV capacity at the applied kv_budget.
      kv_occupancy: resident KV tokens / capacity, in [0, 1].
      spec_acceptance: fraction of draft tokens accepted, 0 without speculation.
      num_gpus: GPUs in use (2 when disaggregated).
      cost_usd: [$] GPU cost of the interval.
      stall_s: [s] of the interval lost to reconfiguration or restart.
      queue_depth: [requests] waiting at the end of the interval.
      queue_mean_prompt: [tokens] mean prompt length of the waiting requests (0 if none).
      class_share: float32 (3,) share of waiting and new requests per class.
    """

    ttft_p50_s: Array
    ttft_p99_s: Array
    ttft_slo_ratio: Array
    tpot_s: Array
    output_tokens: Array
    good_tokens: Array
    tokens_per_s: Array
    quality_tokens_per_s: Array
    prefill_tokens: Array
    admitted: Array
    completed: Array
    slo_violations: Array
    slo_violation_rate: Array
    timeouts: Array
    failed: Array
    evictions: Array
    oom: Array
    gpu_memory_bytes: Array
    kv_capacity_tokens: Array
    kv_occupancy: Array
    spec_acceptance: Array
    num_gpus: Array
    cost_usd: Array
    stall_s: Array
    queue_depth: Array
    queue_mean_prompt: Array
    class_share: Array


def initial_state(config: ServingAction, num_age_buckets: int, slo_accounting: str = "admission") -> ServerState:
    """An idle server with an empty queue, not yet started: its first configuration is free.

    `config` (the task default) is what the server reports as in force until it is configured;
    `slo_accounting` (`ServerParams.slo_accounting`) "request" adds the empty TPOT cohorts.
    """
    zeros = jnp.zeros((NUM_CLASSES, num_age_buckets), jnp.float32)
    z = jnp.zeros((), jnp.float32)
    return ServerState(
        queue=Queue(zeros, zeros, zeros, zeros),
        running=Sequences(z, z, z),
        preempted=Sequences(z, z, z),
        stall_s=z,
        prefill_warmup_s=z,
        config=config,
        started=jnp.zeros((), bool),
        on_time=OnTime(jnp.zeros((NUM_CLASSES,), jnp.float32), jnp.zeros((NUM_CLASSES,), jnp.float32),
                       jnp.zeros((), jnp.float32)),
        tpot=empty_cohorts() if slo_accounting == "request" else None,
    )


def zero_metrics() -> IntervalMetrics:
    """The metrics before any interval: zeros, and an even class share."""
    z = jnp.zeros((), jnp.float32)
    fields = {f: z for f in IntervalMetrics.__dataclass_fields__}
    fields["class_share"] = jnp.full((NUM_CLASSES,), 1.0 / NUM_CLASSES, jnp.float32)
    return IntervalMetrics(**fields)


def select_profile(profiles: perf_model.Profile, tier: Array) -> perf_model.Profile:
    """The profile of one precision tier from the stacked (3,) profiles."""
    tier = jnp.clip(jnp.asarray(tier, jnp.int32), 0, 2)
    return jax.tree_util.tree_map(lambda x: x[tier], profiles)
