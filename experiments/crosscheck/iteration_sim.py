"""Per-iteration scheduler study (issue 41): this project's step-time physics under a vLLM V1 scheduler.

A small discrete-event simulator of one vLLM worker, iteration by iteration, driven by the very requests
that `reference.py` hands to AISimulate (its `draw_requests`, same seeds, same rates), so that the two
sides differ only in (a) the scheduler model and (b) the step times. Two kernel models (and two ways of
composing a mixed iteration, `MODES`):

* `project` (default): THIS project's roofline, the NumPy reference
  `inferencegym_jax/testing/reference/roofline.forward_time` on the calibrated profile of
  `inferencegym_jax.perf_model.get_profile(gpu, "llama-3-8b", quant)`, plus the profile's per-step
  overhead `step_overhead_s` once per iteration. The project has no mixed-pass function, but its
  `forward_time(num_tokens, kv_tokens_read, attn_flops, lm_head_tokens)` is one forward pass of any
  composition, and `prefill_time` / `decode_step_time` are its two special cases. A mixed iteration
  with decodes of contexts c_i and prefill chunks of k_j tokens after s_j already prefilled tokens is

      num_tokens     = sum_j k_j + B                      (weights read once for all of them)
      kv_tokens_read = sum_j (s_j + k_j) + sum_i c_i      (a chunk reads its prefix and writes itself)
      attn_flops     = A * (sum_j (k_j s_j + k_j^2 / 2) + sum_i c_i),  A = 4 * n_layers * d_model
      lm_head_tokens = B + number of chunks
      t_iter         = forward_time(...) + step_overhead_s

  With no decodes and one chunk from s = 0 it is exactly `prefill_time(k)`; with no chunks exactly
  `decode_step_time(B, mean c)` (both checked at start-up against the JAX `perf_model`).
* `reference` (`--reference-steps`): the reference's own kernels, from `reference.json`'s static
  AIConfigurator tables. A pure-decode iteration is the static decode table, interpolated linearly in
  batch and context. A mixed iteration is, as AISimulate charges it (probe_mixed_step.py), a prefill pass
  over the chunks, G(chunk tokens) + gamma * (causal attention pairs), plus the decode table's step; in
  `reference-one-forward` it is composed as one forward pass instead:
  G(total tokens) + gamma * (causal prefill attention pairs) + D1(B) * sum c_i / B, where G and gamma are a
  least-squares fit of the static prefill table (t(isl, b) = G(isl * b) + gamma * b * isl^2 / 2, G
  piecewise linear in the token count) and D1(B) the per-batch slope of the decode table in context.

The scheduler (vLLM V1, as AISimulate models it; experiments/crosscheck/README.md): every iteration has
a budget of `max_num_batched_tokens` (2048). Running requests first, in admission order: a decode takes
1 token, a partly prefilled prompt its next chunk min(remaining, budget). Then waiting requests FCFS,
while running < max_num_seqs (the batch cap) and budget remains, each taking min(prompt, budget) (the
last one cut). A request's first token comes at the end of the iteration that finishes its prompt; every
later iteration it is in adds one token; it leaves after exactly its output length. No per-request
overhead (switch: `--request-overhead`, the project's REQUEST_OVERHEAD_S added to TTFT). KV capacity is
the project's at kv_budget 1.0: admission waits for room; the peak resident tokens are reported (they
never come near it at these points, so no preemption is modelled).

Pure-decode stretches (nothing to prefill and either the batch full or nobody waiting) are stepped in
one vectorised block up to the next completion or arrival; that is exact, not an approximation.

Measurement (reference.py's, so rows join on (point, rate)): Poisson arrivals for `--seconds` per seed,
seeds 0..n-1, requests arriving in the first `--warmup` s dropped, the run drained; percentiles (NumPy,
linear) pooled over seeds. Saturation: the reference's own overload stream (Poisson at 1.1 x its
closed-loop rate, seeds 20000+s), completions in [warmup, seconds) per second, and TPOT of those.

    .venv-test/bin/python experiments/crosscheck/iteration_sim.py            # all MODES, writes the JSON (~16 min)
    .venv-test/bin/python experiments/crosscheck/iteration_sim.py --report   # the README tables from the JSON
    .venv-test/bin/python experiments/crosscheck/iteration_sim.py --reference-steps --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from reference import LENGTHS, OperatingPoint, draw_requests, request_summary  # noqa: E402  (the reference's own generator)
from vllm_worker import Worker  # noqa: E402  (the scheduler itself)

DEFAULT_OUT = HERE / "iteration_sim.json"
REFERENCE_JSON = HERE / "reference.json"
MAX_BATCHED_TOKENS = 2048
TARGETS = {  # issue 41's criteria, |project / reference - 1| at most
    "saturation_requests_per_s": 0.03,
    "ttft_p50_s": 0.15,
    "ttft_mean_s": 0.15,
    "ttft_p99_s": 0.25,
    "tpot_mean_s": 0.10,
}
Log = Callable[[str], None]
# mode -> (kernels, how a mixed iteration's time is composed). "one-forward": prefill chunks and decodes in
# one forward pass (weights read once; what vLLM runs). "additive": a prefill pass over the chunks plus a
# decode step of the batch (what this AISimulate wheel does; probe_mixed_step.py measures it).
# "project-refit": the project's roofline with its FLOP rates and bandwidth scaled by refit_scales (two
# static rows of the reference), to see what is left once the two efficiencies agree.
MODES: dict[str, tuple[str, str]] = {
    "project": ("project", "one-forward"),
    "project-additive": ("project", "additive"),
    "project-additive-refit": ("project-refit", "additive"),
    "reference": ("reference", "additive"),
    "reference-one-forward": ("reference", "one-forward"),
}


# --------------------------------------------------------------------------------------------------
# Step-time models


class StepModel:
    """Duration [s] of one engine iteration; subclasses give the two kernel models (module docstring)."""

    name = "abstract"

    def mixed(self, chunk_k: Sequence[int], chunk_s: Sequence[int], n_dec: int, ctx_sum: float) -> float:
        """One iteration: prefill chunks of k_j tokens after s_j prefilled ones, plus n_dec decodes whose
        contexts sum to ctx_sum [tokens]."""
        raise NotImplementedError

    def decode_run(self, n_dec: int, ctx_sum: float, steps: int) -> np.ndarray:
        """Durations [s] of `steps` successive pure-decode iterations of n_dec sequences, contexts growing
        by one token per sequence per step; shape (steps,)."""
        raise NotImplementedError


class ProjectSteps(StepModel):
    """The project's roofline (NumPy reference forward_time) on its calibrated profile."""

    name = "project"

    def __init__(
        self, gpu: str, quant: str, additive: bool = False, flops_scale: float = 1.0, bw_scale: float = 1.0
    ) -> None:
        self.additive = additive
        from inferencegym_jax import perf_model

        prof = perf_model.get_profile(gpu, "llama-3-8b", quant)
        self._use_profile(prof, flops_scale, bw_scale)
        self.parity = self._check(perf_model, prof)

    def _use_profile(self, prof: Any, flops_scale: float, bw_scale: float) -> None:
        """Step times from the JAX `Profile` `prof` as float64 NumPy (the reference roofline), its FLOP
        rates times `flops_scale` and its bandwidth times `bw_scale` (1.0 unless the refit mode asks)."""
        from inferencegym_jax import perf_model
        from inferencegym_jax.testing.reference import roofline

        leaves = {k: np.asarray(getattr(prof, k)) for k in prof.__dataclass_fields__}
        # Python-float leaves (float64 arithmetic; the vector fields stay arrays).
        self.p = SimpleNamespace(**{k: (float(v) if v.ndim == 0 else v.astype(np.float64)) for k, v in leaves.items()})
        self.p.linear_flops *= flops_scale
        self.p.bf16_flops *= flops_scale
        self.p.mem_bw *= bw_scale
        self.forward = roofline.forward_time
        self.overhead = self.p.step_overhead_s
        self.attn = self.p.attn_flops_per_token_context
        self.kv_capacity = float(perf_model.kv_capacity_tokens(prof, 1.0))
        self.request_overhead_s = float(perf_model.REQUEST_OVERHEAD_S)

    def _check(self, perf_model: Any, prof: Any) -> dict[str, float]:
        """The mixed formula's special cases against the JAX perf_model: max relative difference."""
        worst_pre, worst_dec = 0.0, 0.0
        for n in (8, 128, 512, 2048, 4096):
            ours = self.mixed([n], [0], 0, 0.0)
            jax_t = float(perf_model.prefill_time(prof, n))
            worst_pre = max(worst_pre, abs(ours / jax_t - 1.0))
        for b in (1, 8, 64, 256):
            for c in (128, 1024, 4096):
                ours = self.mixed([], [], b, float(b * c))
                jax_t = float(perf_model.decode_step_time(prof, b, c, 0))
                worst_dec = max(worst_dec, abs(ours / jax_t - 1.0))
                run = float(self.decode_run(b, float(b * c), 1)[0])
                worst_dec = max(worst_dec, abs(run / jax_t - 1.0))
        return {"prefill_max_rel_diff": worst_pre, "decode_max_rel_diff": worst_dec}

    def mixed(self, chunk_k: Sequence[int], chunk_s: Sequence[int], n_dec: int, ctx_sum: float) -> float:
        if self.additive and len(chunk_k) and n_dec:  # AISimulate's composition: a prefill pass, then a decode step
            return self.mixed(chunk_k, chunk_s, 0, 0.0) + self.mixed([], [], n_dec, ctx_sum)
        k = np.asarray(chunk_k, np.float64)
        s = np.asarray(chunk_s, np.float64)
        n = float(k.sum()) + n_dec
        kv = float((s + k).sum()) + ctx_sum
        pairs = float((k * s + 0.5 * k * k).sum()) + ctx_sum
        t = self.forward(
            self.p, np.float64(n), np.float64(kv), np.float64(self.attn * pairs), np.float64(n_dec + len(k))
        )
        return float(t) + self.overhead

    def decode_run(self, n_dec: int, ctx_sum: float, steps: int) -> np.ndarray:
        ctx = ctx_sum + n_dec * np.arange(steps, dtype=np.float64)
        b = np.full(steps, float(n_dec))
        return np.asarray(self.forward(self.p, b, ctx, self.attn * ctx, b), np.float64) + self.overhead


class ReferenceSteps(StepModel):
    """The reference's kernels from reference.json's static AIConfigurator tables (module docstring)."""

    name = "reference"

    def __init__(self, static: dict[str, Any], gpu: str, dtype: str, additive: bool = True) -> None:
        self.additive = additive
        pre = [r for r in static["prefill"] if r["gpu"] == gpu and r["dtype"] == dtype]
        dec = [r for r in static["decode"] if r["gpu"] == gpu and r["dtype"] == dtype]
        # Decode table: t[b, c] on the grid, plus a per-batch linear fit t = D0 + D1 * c.
        self.dec_b = np.array(sorted({r["batch"] for r in dec}), np.float64)
        self.dec_c = np.array(sorted({r["context"] for r in dec}), np.float64)
        grid = {(r["batch"], r["context"]): r["time_s"] for r in dec}
        self.dec_t = np.array([[grid[(int(b), int(c))] for c in self.dec_c] for b in self.dec_b])
        fits = np.array([np.polyfit(self.dec_c, row, 1) for row in self.dec_t])  # (slope, intercept)
        self.d1, self.d0 = fits[:, 0], fits[:, 1]
        self.decode_fit_max_rel = float(
            np.max(np.abs((self.d0[:, None] + self.d1[:, None] * self.dec_c[None, :]) / self.dec_t - 1.0))
        )
        # Prefill table: t(isl, b) = G(isl * b) + gamma * b * isl^2 / 2, G piecewise linear at the token totals.
        knots = np.array(sorted({r["tokens"] for r in pre}), np.float64)
        rows = []
        for r in pre:
            x = np.zeros(len(knots) + 1)
            x[np.searchsorted(knots, r["tokens"])] = 1.0
            x[-1] = r["batch"] * r["prompt_tokens"] ** 2 / 2.0
            rows.append(x)
        a, y = np.array(rows), np.array([r["time_s"] for r in pre])
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        self.g_knots, self.g_vals, self.gamma = knots, coef[:-1], float(coef[-1])
        self.prefill_fit_max_rel = float(np.max(np.abs(a @ coef / y - 1.0)))
        self.prefill_fit_median_rel = float(np.median(np.abs(a @ coef / y - 1.0)))
        # Below the first knot (128 tokens) G runs linearly down to the 1-token decode intercept.
        self.g_x = np.concatenate([[1.0], knots])
        self.g_y = np.concatenate([[self.d0[0]], self.g_vals])
        self.consistency = {
            f"G({int(n)}) / decode_intercept({int(n)})": float(self.g(n) / np.interp(n, self.dec_b, self.d0))
            for n in (128.0, 256.0, 512.0)
        }

    def g(self, n: float) -> float:
        """Non-attention time [s] of a pass over n tokens (linear extrapolation past the last knot)."""
        if n > self.g_x[-1]:
            slope = (self.g_y[-1] - self.g_y[-2]) / (self.g_x[-1] - self.g_x[-2])
            return float(self.g_y[-1] + slope * (n - self.g_x[-1]))
        return float(np.interp(n, self.g_x, self.g_y))

    def decode_table(self, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Static decode step [s], bilinear in batch and mean context (linear extrapolation in context)."""
        b = np.clip(np.asarray(b, np.float64), self.dec_b[0], self.dec_b[-1])
        c = np.asarray(c, np.float64)
        i = np.clip(np.searchsorted(self.dec_b, b, side="right") - 1, 0, len(self.dec_b) - 2)
        wb = (b - self.dec_b[i]) / (self.dec_b[i + 1] - self.dec_b[i])
        j = np.clip(np.searchsorted(self.dec_c, c, side="right") - 1, 0, len(self.dec_c) - 2)
        wc = (c - self.dec_c[j]) / (self.dec_c[j + 1] - self.dec_c[j])

        def at(ii: np.ndarray) -> np.ndarray:
            return self.dec_t[ii, j] * (1.0 - wc) + self.dec_t[ii, j + 1] * wc

        return np.maximum(at(i) * (1.0 - wb) + at(i + 1) * wb, 1e-6)

    def mixed(self, chunk_k: Sequence[int], chunk_s: Sequence[int], n_dec: int, ctx_sum: float) -> float:
        if not len(chunk_k):
            return float(self.decode_table(np.float64(n_dec), np.float64(ctx_sum / n_dec)))
        k = np.asarray(chunk_k, np.float64)
        s = np.asarray(chunk_s, np.float64)
        pairs = float((k * s + 0.5 * k * k).sum())
        if self.additive:  # AISimulate's composition (probe_mixed_step.py): prefill pass + decode step
            dec = float(self.decode_table(np.float64(n_dec), np.float64(ctx_sum / n_dec))) if n_dec else 0.0
            return self.g(float(k.sum())) + self.gamma * pairs + dec
        # D1(B) is the slope of the step time in the mean context at batch B: attention = D1(B) * sum c / B.
        attn_dec = float(np.interp(n_dec, self.dec_b, self.d1)) * ctx_sum / n_dec if n_dec else 0.0
        return self.g(float(k.sum()) + n_dec) + self.gamma * pairs + attn_dec

    def decode_run(self, n_dec: int, ctx_sum: float, steps: int) -> np.ndarray:
        ctx = ctx_sum + n_dec * np.arange(steps, dtype=np.float64)
        return self.decode_table(np.full(steps, float(n_dec)), ctx / n_dec)


# --------------------------------------------------------------------------------------------------
# The scheduler


@dataclass
class RunResult:
    """Per-request times of one run [s] (NaN where not reached) and run diagnostics."""

    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    outputs: np.ndarray
    iterations: int = 0
    blocks: int = 0
    peak_resident_tokens: float = 0.0
    kv_waits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def simulate(
    arrivals_s: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    cap: int,
    steps: StepModel,
    kv_capacity: float,
    stop_s: float = math.inf,
    budget_tokens: int = MAX_BATCHED_TOKENS,
) -> RunResult:
    """One vLLM worker over these requests (module docstring; `vllm_worker.Worker`); stops when all are
    done or at the first iteration that would start at or after stop_s."""
    n_req = len(arrivals_s)
    first = np.full(n_req, np.nan)
    finish = np.full(n_req, np.nan)
    worker = Worker(cap, steps, kv_capacity, budget_tokens, first, finish)
    for i in range(n_req):
        worker.add(i, float(arrivals_s[i]), int(prompts[i]), int(outputs[i]))
    worker.run_until(stop_s)
    return RunResult(arrivals_s, first, finish, outputs, worker.iterations, worker.blocks, worker.peak,
                     worker.kv_waits)


# --------------------------------------------------------------------------------------------------
# Statistics (reference.py's definitions)


def latency_stats(ttft: np.ndarray, e2e: np.ndarray, outputs: np.ndarray) -> dict[str, float]:
    """TTFT p50/p90/p99/mean and per-request TPOT mean/p99 [s]."""
    m = outputs > 1
    tpot = (e2e[m] - ttft[m]) / (outputs[m] - 1)
    return request_summary(ttft, tpot)


def rel(project: float, reference: float) -> float:
    return project / reference - 1.0


@dataclass(frozen=True)
class Settings:
    seconds: float = 600.0
    warmup: float = 60.0
    seeds: tuple[int, ...] = (0, 1, 2)
    request_overhead: bool = False


def measure_rate(
    point: OperatingPoint,
    rate: float,
    steps: StepModel,
    kv_cap: float,
    st: Settings,
    overhead_s: float,
    classes: int = 0,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Poisson at `rate`, st.seeds; pooled latency of requests arriving after warmup; throughput in window."""
    ttft, e2e, outs = [], [], []
    completions = tokens = 0
    diag = {"iterations": 0, "blocks": 0, "peak_resident_tokens": 0.0, "kv_waits": 0}
    window = st.seconds - st.warmup
    for seed in st.seeds:
        arr_ms, prompts, outputs = draw_requests(point, rate, None, st.seconds, seed)
        if classes:
            pd, od = LENGTHS[point.lengths]
            prompts = quantize_lengths(prompts, classes, pd.low, pd.high)
            outputs = quantize_lengths(outputs, classes, od.low, od.high)
        r = simulate(arr_ms / 1000.0, prompts, outputs, point.batch_cap, steps, kv_cap)
        if np.isnan(r.finish).any():
            raise RuntimeError(f"{point} at {rate}: requests left unfinished")
        steady = r.arrival >= st.warmup
        ttft.append(r.first_token[steady] - r.arrival[steady] + overhead_s)
        e2e.append(r.finish[steady] - r.arrival[steady] + overhead_s)
        outs.append(outputs[steady])
        in_win = (r.finish >= st.warmup) & (r.finish < st.seconds)
        completions += int(in_win.sum())
        tokens += int(outputs[in_win].sum())
        diag["iterations"] += r.iterations
        diag["blocks"] += r.blocks
        diag["peak_resident_tokens"] = max(diag["peak_resident_tokens"], r.peak_resident_tokens)
        diag["kv_waits"] += r.kv_waits
    stats = latency_stats(np.concatenate(ttft), np.concatenate(e2e), np.concatenate(outs))
    row = {
        "requests_per_s": completions / (window * len(st.seeds)),
        "output_tokens_per_s": tokens / (window * len(st.seeds)),
        **stats,
        "requests_measured": int(sum(len(x) for x in ttft)),
    }
    return row, diag


def measure_saturation(
    point: OperatingPoint, rate: float, steps: StepModel, kv_cap: float, st: Settings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference's overload stream (rate = 1.1 x its closed loop, seeds 20000+s): completions per second."""
    per_seed, ttft, e2e, outs = [], [], [], []
    diag = {"iterations": 0, "blocks": 0, "peak_resident_tokens": 0.0, "kv_waits": 0, "waiting_at_stop": []}
    window = st.seconds - st.warmup
    for seed in st.seeds:
        arr_ms, prompts, outputs = draw_requests(point, rate, None, st.seconds, 20_000 + seed)
        r = simulate(arr_ms / 1000.0, prompts, outputs, point.batch_cap, steps, kv_cap, stop_s=st.seconds)
        done = (r.finish >= st.warmup) & (r.finish < st.seconds)
        per_seed.append(int(done.sum()) / window)
        ttft.append(r.first_token[done] - r.arrival[done])
        e2e.append(r.finish[done] - r.arrival[done])
        outs.append(outputs[done])
        diag["iterations"] += r.iterations
        diag["blocks"] += r.blocks
        diag["peak_resident_tokens"] = max(diag["peak_resident_tokens"], r.peak_resident_tokens)
        diag["kv_waits"] += r.kv_waits
        diag["waiting_at_stop"].append(int(np.isnan(r.first_token).sum()))  # > 0: the queue grew (saturated)
    stats = latency_stats(np.concatenate(ttft), np.concatenate(e2e), np.concatenate(outs))
    return {
        "rate": rate,
        "requests_per_s": float(np.mean(per_seed)),
        "tpot_mean_s": stats["tpot_mean_s"],
        "tpot_p99_s": stats["tpot_p99_s"],
        "per_seed_requests_per_s": per_seed,
    }, diag


# --------------------------------------------------------------------------------------------------
# Static comparison (the kernel model alone) and what the tables imply for A100 prefill


def _bisect(f: Callable[[float], float], lo: float = 0.3, hi: float = 3.0) -> float:
    """The x in [lo, hi] where the decreasing f crosses 0."""
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


def refit_scales(m: ProjectSteps, static: dict[str, Any], gpu: str, dtype: str) -> tuple[float, float]:
    """Two scales of the project's profile fitted on two static rows of the reference: the FLOP rates
    (linear and BF16) so that the 2048-token prefill matches, then the HBM bandwidth so that the batch-1
    decode step at 512 tokens of context matches (twice round, as each moves the other a little).
    Returns (flops_scale, bw_scale); `m` is left as it was."""
    pre = next(
        r["time_s"]
        for r in static["prefill"]
        if r["gpu"] == gpu and r["dtype"] == dtype and r["prompt_tokens"] == 2048 and r["batch"] == 1
    )
    dec = next(
        r["time_s"]
        for r in static["decode"]
        if r["gpu"] == gpu and r["dtype"] == dtype and r["batch"] == 1 and r["context"] == 512
    )
    base = (m.p.linear_flops, m.p.bf16_flops, m.p.mem_bw)
    fs, bs = 1.0, 1.0

    def apply(f: float, b: float) -> None:
        m.p.linear_flops, m.p.bf16_flops, m.p.mem_bw = base[0] * f, base[1] * f, base[2] * b

    for _ in range(2):
        fs = _bisect(lambda x, b=bs: (apply(x, b), m.mixed([2048], [0], 0, 0.0) - pre)[1])
        bs = _bisect(lambda x, f=fs: (apply(f, x), m.mixed([], [], 1, 512.0) - dec)[1])
    apply(1.0, 1.0)
    return fs, bs


def _static_errors(m: ProjectSteps, pre: list[dict[str, Any]], dec: list[dict[str, Any]]) -> dict[str, Any]:
    pe = np.array([m.mixed([r["prompt_tokens"]] * r["batch"], [0] * r["batch"], 0, 0.0) / r["time_s"] - 1 for r in pre])
    de = np.array([m.mixed([], [], r["batch"], float(r["batch"] * r["context"])) / r["time_s"] - 1 for r in dec])
    both = np.abs(np.concatenate([pe, de]))
    by_batch = {
        str(b): float(np.median([e for e, r in zip(de, dec) if r["batch"] == b]))
        for b in sorted({r["batch"] for r in dec})
    }
    return {
        "decode_rel_err_median_by_batch": by_batch,
        "prefill_rel_err": {
            "median": float(np.median(pe)),
            "min": float(pe.min()),
            "max": float(pe.max()),
            "rows": len(pe),
        },
        "decode_rel_err": {
            "median": float(np.median(de)),
            "min": float(de.min()),
            "max": float(de.max()),
            "rows": len(de),
        },
        "all_abs_err": {"median": float(np.median(both)), "max": float(both.max())},
    }


def static_comparison(ref: dict[str, Any], points: list[dict[str, Any]]) -> dict[str, Any]:
    """Project prefill_time / decode_step_time against every static row (oom rows skipped), as shipped and
    after the two-scale refit; the efficiencies the refit implies (calibration eta x scale)."""
    calibration = json.loads((ROOT / "data" / "calibration.json").read_text())
    out: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    for p in points:
        gpu, dtype = p["gpu"], p["dtype"]
        if (gpu, dtype) in seen:
            continue
        seen.add((gpu, dtype))
        m = ProjectSteps(p["project"]["gpu"], p["project"]["quant_tier"])
        pre = [r for r in ref["static"]["prefill"] if r["gpu"] == gpu and r["dtype"] == dtype and not r["oom"]]
        dec = [r for r in ref["static"]["decode"] if r["gpu"] == gpu and r["dtype"] == dtype and not r["oom"]]
        pre2048 = next(r["time_s"] for r in pre if r["prompt_tokens"] == 2048 and r["batch"] == 1)
        shipped = _static_errors(m, pre, dec)
        project_2048 = m.mixed([2048], [0], 0, 0.0)
        fs, bs = refit_scales(m, ref["static"], gpu, dtype)
        mr = ProjectSteps(p["project"]["gpu"], p["project"]["quant_tier"], flops_scale=fs, bw_scale=bs)
        cal = calibration["gpus"][p["project"]["gpu"]]
        out[f"{gpu}/{dtype}"] = {
            **shipped,
            "prefill_2048_s": {"reference": pre2048, "project": project_2048},
            "refit": {
                "flops_scale": fs,
                "bw_scale": bs,
                "eta_flops_implied": cal["eta_flops"] * fs,
                "eta_bw_implied": cal["eta_bw"] * bs,
                "eta_flops_shipped": cal["eta_flops"],
                "eta_bw_shipped": cal["eta_bw"],
                **_static_errors(mr, pre, dec),
            },
        }
    return out


# --------------------------------------------------------------------------------------------------
# Driver


def point_of(p: dict[str, Any]) -> OperatingPoint:
    return OperatingPoint(p["gpu"], p["batch_cap"], p["lengths"], p["dtype"])


def label(p: dict[str, Any]) -> str:
    return f"{p['gpu']}/{p['batch_cap']}/{p['lengths']}/{p['dtype']}"


def quantize_lengths(x: np.ndarray, classes: int, low: int, high: int) -> np.ndarray:
    """Each length replaced by the mean length of its class: `classes` log-spaced bins over [low, high]
    (the mean keeps the work; what a queue of length classes instead of single requests would see)."""
    edges = np.geomspace(low, high + 1, classes + 1)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, classes - 1)
    out = x.astype(np.float64).copy()
    for c in range(classes):
        m = idx == c
        if m.any():
            out[m] = x[m].mean()
    return np.maximum(np.rint(out), 1).astype(np.int64)


def run_point(
    p: dict[str, Any], static: dict[str, Any], modes: Sequence[str], st: Settings, classes: Sequence[int]
) -> dict[str, Any]:
    """Every mode at one operating point (one worker process); returns rows, diagnostics and log lines."""
    t_point = time.process_time()
    lines: list[str] = []
    rows: list[dict[str, Any]] = []
    point = point_of(p)
    pm = ProjectSteps(p["project"]["gpu"], p["project"]["quant_tier"])
    pm_add = ProjectSteps(p["project"]["gpu"], p["project"]["quant_tier"], additive=True)
    kv_cap = pm.kv_capacity
    overhead = pm.request_overhead_s if st.request_overhead else 0.0
    keys = (
        "requests_per_s",
        "output_tokens_per_s",
        "ttft_p50_s",
        "ttft_p90_s",
        "ttft_p99_s",
        "ttft_mean_s",
        "tpot_mean_s",
        "tpot_p99_s",
    )
    fit: dict[str, Any] = {}
    for mode in modes:
        kernels, composition = MODES[mode]
        steps: StepModel
        if kernels == "project":
            steps = pm if composition == "one-forward" else pm_add
        elif kernels == "project-refit":
            fs, bs = refit_scales(pm, static, p["gpu"], p["dtype"])
            steps = ProjectSteps(
                p["project"]["gpu"],
                p["project"]["quant_tier"],
                additive=composition == "additive",
                flops_scale=fs,
                bw_scale=bs,
            )
        else:
            rs = ReferenceSteps(static, p["gpu"], p["dtype"], additive=composition == "additive")
            fit = {
                "prefill_fit_max_rel": rs.prefill_fit_max_rel,
                "prefill_fit_median_rel": rs.prefill_fit_median_rel,
                "decode_linear_fit_max_rel": rs.decode_fit_max_rel,
                "gamma_s_per_pair": rs.gamma,
                "consistency": rs.consistency,
            }
            steps = rs
        t0 = time.process_time()
        sat_ref = p["saturation"]
        sat, sdiag = measure_saturation(point, sat_ref["rate"], steps, kv_cap, st)
        row: dict[str, Any] = {
            "point": label(p),
            "mode": mode,
            "rate": "saturation",
            "offered_rate": sat_ref["rate"],
            "sim": {
                "requests_per_s": sat["requests_per_s"],
                "tpot_mean_s": sat["tpot_mean_s"],
                "tpot_p99_s": sat["tpot_p99_s"],
            },
            "reference": {
                "requests_per_s": sat_ref["requests_per_s"],
                "tpot_mean_s": sat_ref["tpot_mean_s"],
                "tpot_p99_s": sat_ref["tpot_p99_s"],
            },
            "diagnostics": {**sdiag, "per_seed_requests_per_s": sat["per_seed_requests_per_s"]},
        }
        row["rel_err"] = {k: rel(row["sim"][k], row["reference"][k]) for k in ("requests_per_s", "tpot_mean_s")}
        rows.append(row)
        lines.append(
            f"{label(p)} [{mode}] saturation {sat['requests_per_s']:.2f} vs {sat_ref['requests_per_s']:.2f}"
            f" req/s, TPOT {sat['tpot_mean_s'] * 1e3:.1f} vs {sat_ref['tpot_mean_s'] * 1e3:.1f} ms"
        )
        for rr in p["rates"]:
            sim, diag = measure_rate(point, rr["rate"], steps, kv_cap, st, overhead)
            row = {
                "point": label(p),
                "mode": mode,
                "rate": rr["rate"],
                "load_fraction": rr["load_fraction"],
                "sim": sim,
                "reference": {k: rr[k] for k in keys},
                "diagnostics": diag,
            }
            row["rel_err"] = {k: rel(sim[k], rr[k]) for k in keys}
            rows.append(row)
            e = row["rel_err"]
            lines.append(
                f"  {rr['load_fraction']:.0%} {rr['rate']:.3f}: TTFT p50 {e['ttft_p50_s']:+.1%} mean "
                f"{e['ttft_mean_s']:+.1%} p99 {e['ttft_p99_s']:+.1%}, TPOT {e['tpot_mean_s']:+.1%}"
            )
        lines.append(f"  ({time.process_time() - t0:.1f} s CPU)")
    # Length classes: the reference's kernels and composition, every request's prompt and output replaced
    # by its class mean; the error against AISimulate is what a K-class queue would cost.
    class_rows: list[dict[str, Any]] = []
    if p["lengths"] != "fixed-512-128":
        rs = ReferenceSteps(static, p["gpu"], p["dtype"], additive=True)
        for k in classes:
            for rr in p["rates"]:
                sim, _ = measure_rate(point, rr["rate"], rs, kv_cap, st, 0.0, classes=k)
                class_rows.append(
                    {
                        "point": label(p),
                        "classes": k,
                        "rate": rr["rate"],
                        "load_fraction": rr["load_fraction"],
                        "sim": sim,
                        "rel_err": {q: rel(sim[q], rr[q]) for q in keys},
                    }
                )
    return {
        "rows": rows,
        "class_rows": class_rows,
        "fit": (f"{p['gpu']}/{p['dtype']}", fit),
        "kv_capacity": (f"{p['gpu']}/{p['dtype']}", kv_cap),
        "parity": (f"{p['gpu']}/{p['dtype']}", pm.parity),
        "request_overhead_s": pm.request_overhead_s,
        "lines": lines,
        "cpu_s": time.process_time() - t_point,
    }


def run(
    ref: dict[str, Any],
    modes: Sequence[str],
    st: Settings,
    points_filter: str | None,
    jobs: int,
    classes: Sequence[int],
    log: Log,
) -> dict[str, Any]:
    from concurrent.futures import ProcessPoolExecutor

    wall0, cpu0 = time.time(), time.process_time()
    points = [p for p in ref["points"] if not points_filter or points_filter in label(p)]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_point, p, ref["static"], modes, st, classes) for p in points]
        for f in futures:
            r = f.result()
            for line in r["lines"]:
                log(line)
            results.append(r)
    rows = [row for r in results for row in r["rows"]]
    class_rows = [row for r in results for row in r["class_rows"]]
    step_diag = {k: v for r in results for k, v in [r["fit"]] if v}
    kv_caps = dict(r["kv_capacity"] for r in results)
    parity = dict(r["parity"] for r in results)
    worker_cpu = sum(r["cpu_s"] for r in results)
    summary = summarise(rows, modes)
    return {
        "schema": "inferencegym-crosscheck-iteration-sim/1",
        "generated_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
        "reference_generated_utc": ref["generated_utc"],
        "settings": {
            "max_batched_tokens": MAX_BATCHED_TOKENS,
            "seconds": st.seconds,
            "warmup": st.warmup,
            "seeds": list(st.seeds),
            "request_overhead_s": results[0]["request_overhead_s"] if st.request_overhead and results else 0.0,
            "length_classes": list(classes),
            "modes": {m: {"kernels": MODES[m][0], "composition": MODES[m][1]} for m in modes},
            "requests": "reference.draw_requests (same seeds, rates and lengths as the reference)",
            "saturation": "reference's overload stream: offered rate = saturation.rate (1.1 x its closed loop), "
            "seeds 20000+s, completions in [warmup, seconds) per second; stopped at `seconds`",
            "kv_capacity_tokens": kv_caps,
            "targets": TARGETS,
        },
        "project_parity_with_jax_perf_model": parity,
        "reference_step_model_fit": step_diag,
        "static_comparison": static_comparison(ref, points),
        "summary": summary,
        "rows": rows,
        "length_class_rows": class_rows,
        "length_class_summary": summarise_classes(class_rows, rows),
        "wall_s": time.time() - wall0,
        "cpu_s": time.process_time() - cpu0 + worker_cpu,
    }


def summarise_classes(rows: list[dict[str, Any]], full: list[dict[str, Any]]) -> dict[str, Any]:
    """Per number of length classes, |error| (median / max) against AISimulate and against the same simulator
    without classes (mode `reference`; the error the classes alone cause), loads up to 90 % and up to 75 %."""
    base = {(r["point"], r["rate"]): r["sim"] for r in full if r["mode"] == "reference" and r["rate"] != "saturation"}
    out: dict[str, Any] = {}
    qs = ("ttft_p50_s", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s")
    for k in sorted({r["classes"] for r in rows}):
        rs = [r for r in rows if r["classes"] == k]
        entry: dict[str, Any] = {}
        for q in qs:
            vs_ref = [abs(r["rel_err"][q]) for r in rs]
            vs_sim = [
                abs(rel(r["sim"][q], base[(r["point"], r["rate"])][q])) for r in rs if (r["point"], r["rate"]) in base
            ]
            vs_sim75 = [
                abs(rel(r["sim"][q], base[(r["point"], r["rate"])][q]))
                for r in rs
                if (r["point"], r["rate"]) in base and r["load_fraction"] <= 0.75
            ]
            entry[q] = {
                "vs_aisimulate_median_abs": float(np.median(vs_ref)),
                "vs_aisimulate_max_abs": float(max(vs_ref)),
            }
            if vs_sim:
                entry[q].update(
                    {
                        "vs_unclassed_median_abs": float(np.median(vs_sim)),
                        "vs_unclassed_max_abs": float(max(vs_sim)),
                        "vs_unclassed_max_abs_loads_le_75": float(max(vs_sim75)),
                    }
                )
        out[str(k)] = entry
    return out


def summarise(rows: list[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    """Per mode and criterion: rows within target, median and max |error|."""
    out: dict[str, Any] = {}
    for mode in modes:
        rs = [r for r in rows if r["mode"] == mode]
        crit: dict[str, Any] = {}
        for name, target in TARGETS.items():
            if name == "saturation_requests_per_s":
                errs = [r["rel_err"]["requests_per_s"] for r in rs if r["rate"] == "saturation"]
            elif name == "tpot_mean_s":
                errs = [r["rel_err"]["tpot_mean_s"] for r in rs]  # saturation included, as the issue asks
            else:
                errs = [r["rel_err"][name] for r in rs if r["rate"] != "saturation"]
            a = np.abs(errs)
            crit[name] = {
                "target": target,
                "rows": len(a),
                "within": int((a <= target).sum()),
                "median_abs": float(np.median(a)),
                "max_abs": float(a.max()),
            }
        # The scope: loads up to 90 %; also the subset up to 75 % (the 90 % rows are the noisy knee).
        le75 = [r for r in rs if r["rate"] != "saturation" and r["load_fraction"] <= 0.75]
        crit["ttft_p99_s_loads_le_75"] = {
            "target": TARGETS["ttft_p99_s"],
            "rows": len(le75),
            "within": int(sum(abs(r["rel_err"]["ttft_p99_s"]) <= TARGETS["ttft_p99_s"] for r in le75)),
            "median_abs": float(np.median([abs(r["rel_err"]["ttft_p99_s"]) for r in le75])),
        }
        out[mode] = crit
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--reference", type=Path, default=REFERENCE_JSON)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {sorted(MODES)}")
    ap.add_argument(
        "--reference-steps",
        action="store_true",
        help="the reference's step times, composed as AISimulate does (= --modes reference)",
    )
    ap.add_argument("--request-overhead", action="store_true", help="add the project's REQUEST_OVERHEAD_S to TTFT")
    ap.add_argument("--seconds", type=float, default=Settings.seconds)
    ap.add_argument("--warmup", type=float, default=Settings.warmup)
    ap.add_argument("--seeds", type=int, default=len(Settings.seeds))
    ap.add_argument("--point", help="only points whose label (gpu/cap/lengths/dtype) contains this")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (one operating point each)")
    ap.add_argument("--classes", default="4,8,16", help="length-class counts to try on lognormal points ('' = none)")
    ap.add_argument("--report", action="store_true", help="print the README tables from --out (and the probe JSON)")
    args = ap.parse_args(argv)
    if args.report:
        probe_path = HERE / "probe_mixed_step.json"
        probe = json.loads(probe_path.read_text()) if probe_path.exists() else None
        print(report(json.loads(args.out.read_text()), probe))
        return 0
    modes = ["reference"] if args.reference_steps else args.modes.split(",")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: {m!r} is not one of {sorted(MODES)}")
    st = Settings(args.seconds, args.warmup, tuple(range(args.seeds)), args.request_overhead)
    ref = json.loads(args.reference.read_text())

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    classes = [int(c) for c in args.classes.split(",") if c]
    doc = run(ref, modes, st, args.point, args.jobs, classes, log)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    tmp.replace(args.out)
    log(f"wrote {args.out} ({doc['wall_s']:.0f} s wall, {doc['cpu_s']:.0f} s CPU)")
    return 0


# --------------------------------------------------------------------------------------------------
# The README section's tables, printed from the JSON (so every number there comes from it)


def _pc(x: float) -> str:
    return f"{x * 100:+.1f} %"


def report(doc: dict[str, Any], probe: dict[str, Any] | None) -> str:
    """Markdown tables of iteration_sim.json (and probe_mixed_step.json when given)."""
    lines: list[str] = []
    modes = list(doc["settings"]["modes"])
    lines.append("Criteria, rows within target (median / max |error|), per mode:\n")
    lines.append(
        "| mode | kernels | composition | saturation (3 %) | TTFT p50 (15 %) | TTFT mean (15 %) | TTFT p99 (25 %) |"
        " TTFT p99, loads <= 75 % | TPOT mean (10 %) |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for m in modes:
        s = doc["summary"][m]
        cell = [
            f"{s[k]['within']}/{s[k]['rows']} ({s[k]['median_abs'] * 100:.1f} / {s[k]['max_abs'] * 100:.1f} %)"
            for k in ("saturation_requests_per_s", "ttft_p50_s", "ttft_mean_s", "ttft_p99_s")
        ]
        c75 = s["ttft_p99_s_loads_le_75"]
        cell.append(f"{c75['within']}/{c75['rows']} ({c75['median_abs'] * 100:.1f} %)")
        t = s["tpot_mean_s"]
        cell.append(f"{t['within']}/{t['rows']} ({t['median_abs'] * 100:.1f} / {t['max_abs'] * 100:.1f} %)")
        k, c = doc["settings"]["modes"][m]["kernels"], doc["settings"]["modes"][m]["composition"]
        lines.append(f"| `{m}` | {k} | {c} | " + " | ".join(cell) + " |")
    for m in modes:
        lines.append(f"\nPer point, mode `{m}` (sim / AISimulate - 1; loads 25 / 50 / 75 / 90 %):\n")
        lines.append("| point | saturation | TPOT at sat. | TTFT p50 | TTFT mean | TTFT p99 | TPOT mean |")
        lines.append("|---|---|---|---|---|---|---|")
        for point in dict.fromkeys(r["point"] for r in doc["rows"]):
            rs = [r for r in doc["rows"] if r["point"] == point and r["mode"] == m]
            sat = next(r for r in rs if r["rate"] == "saturation")
            loads = sorted((r for r in rs if r["rate"] != "saturation"), key=lambda r: r["load_fraction"])

            def col(q: str, loads: list[dict[str, Any]] = loads) -> str:
                return " / ".join(f"{r['rel_err'][q] * 100:+.0f}" for r in loads)

            lines.append(
                f"| {point} | {_pc(sat['rel_err']['requests_per_s'])} ({sat['sim']['requests_per_s']:.2f}"
                f" vs {sat['reference']['requests_per_s']:.2f}) | {_pc(sat['rel_err']['tpot_mean_s'])} | "
                f"{col('ttft_p50_s')} | {col('ttft_mean_s')} | {col('ttft_p99_s')} | {col('tpot_mean_s')} |"
            )
    lines.append(
        "\nStatic step times, project roofline / AIConfigurator - 1 (oom rows skipped), as shipped and after"
        " the two-scale refit (FLOP rates to the 2048-token prefill, bandwidth to the batch-1 decode):\n"
    )
    lines.append(
        "| GPU/dtype | prefill median (min, max) | decode median (min, max) | all: median / max abs |"
        " 2048 prefill ms, ref / project | refit: eta_flops, eta_bw (shipped) | refit: all median / max abs |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for key, v in doc["static_comparison"].items():
        pe, de, al, rf = v["prefill_rel_err"], v["decode_rel_err"], v["all_abs_err"], v["refit"]
        lines.append(
            f"| {key} | {_pc(pe['median'])} ({_pc(pe['min'])}, {_pc(pe['max'])}) | {_pc(de['median'])} "
            f"({_pc(de['min'])}, {_pc(de['max'])}) | {al['median'] * 100:.1f} / {al['max'] * 100:.1f} % | "
            f"{v['prefill_2048_s']['reference'] * 1e3:.1f} / {v['prefill_2048_s']['project'] * 1e3:.1f} | "
            f"{rf['eta_flops_implied']:.3f}, {rf['eta_bw_implied']:.3f} ({rf['eta_flops_shipped']:.3f}, "
            f"{rf['eta_bw_shipped']:.3f}) | {rf['all_abs_err']['median'] * 100:.1f} / "
            f"{rf['all_abs_err']['max'] * 100:.1f} % |"
        )
    lines.append("\nDecode step, project / AIConfigurator - 1, median over contexts, by batch (shipped; refit):\n")
    batches = list(next(iter(doc["static_comparison"].values()))["decode_rel_err_median_by_batch"])
    lines.append("| GPU/dtype | " + " | ".join(batches) + " |")
    lines.append("|---|" + "---:|" * len(batches))
    for key, v in doc["static_comparison"].items():
        a, b = v["decode_rel_err_median_by_batch"], v["refit"]["decode_rel_err_median_by_batch"]
        lines.append(f"| {key} | " + " | ".join(f"{a[x] * 100:+.0f}; {b[x] * 100:+.0f}" for x in batches) + " |")
    if doc.get("length_class_summary"):
        lines.append(
            "\nLength classes (reference kernels and composition, each prompt and output replaced by its class"
            " mean; the 6 lognormal points x 4 loads): |change| against the same simulator without classes,"
            " median / max (max over loads <= 75 %), and against AISimulate, median:\n"
        )
        lines.append(
            "| classes | TTFT p50 | TTFT mean | TTFT p99 | TPOT mean | vs AISimulate: p50 / mean / p99 / TPOT |"
        )
        lines.append("|---:|---|---|---|---|---|")
        for k, v in doc["length_class_summary"].items():

            def mm(q: str, v: dict[str, Any] = v) -> str:
                e = v[q]
                return (
                    f"{e['vs_unclassed_median_abs'] * 100:.1f} / {e['vs_unclassed_max_abs'] * 100:.1f} % "
                    f"({e['vs_unclassed_max_abs_loads_le_75'] * 100:.1f} %)"
                )

            va = " / ".join(
                f"{v[q]['vs_aisimulate_median_abs'] * 100:.1f}"
                for q in ("ttft_p50_s", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s")
            )
            lines.append(
                f"| {k} | {mm('ttft_p50_s')} | {mm('ttft_mean_s')} | {mm('ttft_p99_s')} | {mm('tpot_mean_s')} |"
                f" {va} % |"
            )
    lines.append(
        "\nIterations and event blocks per second of arrivals (mode `project`, 90 % load, drain included),"
        " peak resident KV tokens / capacity:\n"
    )
    lines.append("| point | iterations/s | blocks/s | peak KV / capacity |")
    lines.append("|---|---:|---:|---:|")
    caps = doc["settings"]["kv_capacity_tokens"]
    seconds = doc["settings"]["seconds"] * len(doc["settings"]["seeds"])
    for r in doc["rows"]:
        if r["mode"] == modes[0] and r["rate"] != "saturation" and r["load_fraction"] == 0.9:
            g, _, _, d = r["point"].split("/")
            peak = max(x["diagnostics"]["peak_resident_tokens"] for x in doc["rows"] if x["point"] == r["point"])
            lines.append(
                f"| {r['point']} | {r['diagnostics']['iterations'] / seconds:.0f} | "
                f"{r['diagnostics']['blocks'] / seconds:.0f} | {peak / caps[f'{g}/{d}']:.3f} |"
            )
    if probe:
        lines.append(
            "\nAISimulate's mixed iteration (probe_mixed_step.json): A decodes, B's prompt is prefilled beside"
            " it; growth of A's latency [ms]:\n"
        )
        lines.append("| GPU/dtype | B prompt | measured | lone prefill of B | additive model | one-forward model |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for c in probe["cases"]:
            for r in c["rows"]:
                if "measured_extra_s" in r:
                    lines.append(
                        f"| {c['gpu']}/{c['dtype']} | {r['case'].split('prompt ')[1].split()[0]} | "
                        f"{r['measured_extra_s'] * 1e3:.2f} | {r['lone_prefill_s'] * 1e3:.2f} | "
                        f"{r['predicted_extra_additive_s'] * 1e3:.2f} | "
                        f"{r['predicted_extra_one_forward_s'] * 1e3:.2f} |"
                    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
