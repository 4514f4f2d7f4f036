"""The reference side of the end-to-end cross-check (issue 41): NVIDIA AISimulate and AIConfigurator.

AISimulate replays requests through a per-iteration discrete-event model of one vLLM worker (its
scheduler mixes decode tokens and prefill chunks under `max_num_batched_tokens` in every iteration);
each iteration's duration comes from AIConfigurator's measured vLLM kernel tables. It is a simulator
over measured kernels, not a GPU. This script runs it at fixed operating points and writes what the
project side (`inferencegym loadtest`) must match, plus AIConfigurator's static step times:

    .venv-crosscheck/bin/python experiments/crosscheck/reference.py    # the full run: ~7 min CPU, ~12 min wall
    .venv-crosscheck/bin/python experiments/crosscheck/reference.py --quick --out /tmp/ref.json
    .venv-crosscheck/bin/python experiments/crosscheck/reference.py --gpu a100-sxm-80gb --batch-cap 64 \\
        --lengths fixed-512-128 --dtype fp16 --out /tmp/one.json

It needs the two pinned tools (the `crosscheck` extra of pyproject.toml) in a venv of their own, because
they pin jax 0.4.38 (experiments/crosscheck/README.md):

    python3.11 -m venv .venv-crosscheck
    .venv-crosscheck/bin/pip install aiconfigurator==0.12.0 aisimulate==0.13.0.dev202610270000000085

Per operating point (GPU x batch cap x lengths x dtype):

1. Saturation. First a closed loop that keeps `2 x batch cap` requests in the system (the batch always
   full, a queue as long as the batch always waiting), `saturation_requests` requests per seed: the
   completions between the 20 % mark and the moment the last request is issued (after which the backlog
   drains), divided by that window (`closed_loop`). Then Poisson arrivals offered at 1.1 x that rate for
   `seconds` per seed: their completions per second once the queue only grows are the saturation
   (`requests_per_s`, `output_tokens_per_s`; TPOT there is the batch-full TPOT). Why not the closed loop
   itself: with fixed lengths identical requests phase-lock into admission waves, and the closed loop's
   wave pattern can serve up to ~5 % more (or less) than a Poisson stream does (measure_saturation).
   `overload_1_25x`: the same at 1.25 x.
2. Poisson arrivals at 25/50/75/90 % of that saturation rate, `seconds` of arrivals per seed, the
   requests arriving in the first `warmup` seconds dropped. Percentiles pool every measured request of
   every seed; `per_seed` keeps each seed's own values for the spread.

Per request (vLLM's definitions): TTFT = first token - arrival, TPOT = (e2e - TTFT) / (output - 1)
over requests with more than one output token. Arrivals and lengths are drawn here (NumPy, seeded) and
handed to AISimulate as a Mooncake trace with unique block hashes, so no prefix is ever shared (and
prefix caching is off as well).
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import importlib.metadata as _md
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "reference.json"
MODEL = "meta-llama/Meta-Llama-3.1-8B"  # bundled config; the same architecture as Llama-3-8B
MAX_BATCHED_TOKENS = 2048  # vLLM V1 online default; the project's task configs use the same
TRACE_BLOCK_SIZE = 512  # Mooncake hash-block size (only sizes the unique synthetic token ids)
LOAD_FRACTIONS = (0.25, 0.50, 0.75, 0.90)
Log = Callable[[str], None]  # where progress lines go (stderr)

# label -> (AISimulate/AIConfigurator system, vLLM table version pinned, the project's gpu id)
GPUS: dict[str, tuple[str, str, str]] = {
    "a100-sxm-80gb": ("a100_sxm", "0.14.0", "a100-80gb"),
    "h100-sxm": ("h100_sxm", "0.24.0", "h100-sxm"),
}
# label -> (GEMM, KV-cache, attention quant modes; the project's quant_tier of the same arithmetic).
# vLLM's 16-bit tables are BF16 (the same speed as FP16). The only 8-bit vLLM GEMM tables are FP8 W8A8
# on H100 (CutlassFP8ScaledMMLinearKernel), which is what the project's "int8" tier models on H100
# (8-bit tensor cores); there is no INT8 and no A100 8-bit table for vLLM in either package.
DTYPES: dict[str, tuple[str, str, str, str]] = {
    "fp16": ("bfloat16", "bfloat16", "bfloat16", "fp16"),
    "fp8": ("fp8", "bfloat16", "bfloat16", "int8"),
}
DTYPE_GPUS: dict[str, tuple[str, ...]] = {"fp16": ("a100-sxm-80gb", "h100-sxm"), "fp8": ("h100-sxm",)}


@dataclass(frozen=True)
class LengthDist:
    """A request-length distribution: `fixed` (low == high) or a clamped lognormal.

    Attributes:
      kind: "fixed" or "lognormal".
      median: lognormal median [tokens] (exp of the log-mean); for fixed, the length.
      sigma: lognormal sigma of the log; 0 for fixed.
      low: clamp floor [tokens].
      high: clamp ceiling [tokens].
    """

    kind: str
    median: float
    sigma: float
    low: int
    high: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n integer lengths: round(clip(exp(N(log median, sigma)), low, high)), or the fixed length."""
        if self.kind == "fixed":
            return np.full(n, int(self.median), dtype=np.int64)
        x = np.exp(rng.normal(math.log(self.median), self.sigma, size=n))
        return np.rint(np.clip(x, self.low, self.high)).astype(np.int64)

    def project_table(self) -> dict[str, Any]:
        """The same distribution as a project task file's length table (configs/tasks/*.toml)."""
        if self.kind == "fixed":
            return {"kind": "uniform", "low": self.low, "high": self.high}
        return {"kind": "lognormal", "median1": self.median, "sigma1": self.sigma, "low": self.low, "high": self.high}


# label -> (prompt, output). Lognormal: task 2's ShareGPT-like lengths (configs/tasks/task2.toml).
LENGTHS: dict[str, tuple[LengthDist, LengthDist]] = {
    "fixed-512-128": (LengthDist("fixed", 512, 0.0, 512, 512), LengthDist("fixed", 128, 0.0, 128, 128)),
    "lognormal-sharegpt": (
        LengthDist("lognormal", 250.0, 1.0, 8, 4096),
        LengthDist("lognormal", 200.0, 0.9, 8, 2048),
    ),
}


@dataclass(frozen=True)
class OperatingPoint:
    """One reference configuration: GPU label, vLLM `max_num_seqs`, length label and dtype label."""

    gpu: str
    batch_cap: int
    lengths: str
    dtype: str

    def validate(self) -> None:
        """Raise ValueError naming the field when a label is unknown or the tables lack the dtype."""
        if self.gpu not in GPUS:
            raise ValueError(f"gpu {self.gpu!r}: expected one of {sorted(GPUS)}")
        if self.lengths not in LENGTHS:
            raise ValueError(f"lengths {self.lengths!r}: expected one of {sorted(LENGTHS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: expected one of {sorted(DTYPES)}")
        if self.gpu not in DTYPE_GPUS[self.dtype]:
            raise ValueError(f"dtype {self.dtype!r} has no vLLM kernel table on {self.gpu!r}")
        if self.batch_cap < 1:
            raise ValueError(f"batch_cap {self.batch_cap}: expected >= 1")


def default_points() -> list[OperatingPoint]:
    """Both GPUs x batch caps 64 and 256 x both length sets, FP16; plus FP8 on H100."""
    points = []
    for dtype, gpus in DTYPE_GPUS.items():
        for gpu in gpus:
            for cap in (64, 256):
                for lengths in LENGTHS:
                    points.append(OperatingPoint(gpu, cap, lengths, dtype))
    return points


@dataclass(frozen=True)
class RunSettings:
    """How long and how often each point is simulated.

    Attributes:
      seconds: Poisson arrivals per seed [s of simulated time].
      warmup: arrivals in the first `warmup` seconds are not measured [s].
      seeds: arrival/length seeds; each (point, rate) runs once per seed.
      saturation_requests: requests per seed in the closed saturation loop.
      saturation_seeds: seeds of the saturation loop.
    """

    seconds: float = 600.0
    warmup: float = 60.0
    seeds: tuple[int, ...] = (0, 1, 2)
    saturation_requests: int = 20000
    saturation_seeds: tuple[int, ...] = (0, 1, 2)


# --------------------------------------------------------------------------------------------------
# AISimulate


class Simulator:
    """AISimulate's `predict` (offline engine stack) called in-process, one operating point at a time."""

    def __init__(self) -> None:
        from aisimulate.config.cli import CorePredictionConfig
        from aisimulate.predict import run_prediction
        from aisimulate.stack import resolve_runner_factory
        from aisimulate.sweeper.replay import ReplayOutputRequirements

        self._config_cls = CorePredictionConfig
        self._run = run_prediction
        self._factory = resolve_runner_factory("engine")
        self._requirements = ReplayOutputRequirements(
            include_raw_report=True, capture_per_request=True, capture_memory_diagnostics=True
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="crosscheck-trace-")

    @staticmethod
    def engine_config(point: OperatingPoint) -> dict[str, Any]:
        """The `engine:` section of an AISimulate prediction for one point (the settings stored in the JSON)."""
        system, version, _ = GPUS[point.gpu]
        gemm, kv, fmha, _ = DTYPES[point.dtype]
        return {
            "mode": "aggregated",
            "model": MODEL,
            "hardware": system,
            "backend": "vllm",
            "backend_version": version,
            "gemm_quant_mode": gemm,
            "kvcache_quant_mode": kv,
            "fmha_quant_mode": fmha,
            "workers": {
                "aggregated": {
                    "parallelism": {"tensor": 1, "pipeline": 1, "replicas": 1},
                    "scheduler": {"max_batched_tokens": MAX_BATCHED_TOKENS, "max_sequences": point.batch_cap},
                    "kv_cache": {"prefix_caching": False},
                }
            },
        }

    def _write_trace(self, arrivals_ms: np.ndarray, prompts: np.ndarray, outputs: np.ndarray) -> str:
        """A Mooncake JSONL trace; every request gets its own block hashes (nothing shared)."""
        path = os.path.join(self._tmp.name, "trace.jsonl")
        next_hash = 1
        with open(path, "w", encoding="utf-8") as f:
            for t, p, o in zip(arrivals_ms, prompts, outputs):
                blocks = -(-int(p) // TRACE_BLOCK_SIZE)
                hashes = list(range(next_hash, next_hash + blocks))
                next_hash += blocks
                row = {"timestamp": float(t), "input_length": int(p), "output_length": int(o), "hash_ids": hashes}
                f.write(json.dumps(row) + "\n")
        return path

    def run(
        self,
        point: OperatingPoint,
        arrivals_ms: np.ndarray,
        prompts: np.ndarray,
        outputs: np.ndarray,
        concurrency: int | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Replay the requests (open loop at their timestamps, or a closed loop of `concurrency`).

        Returns the per-request records (arrival_time_ms, ttft_ms, e2e_latency_ms, terminal_time_ms,
        input_length, output_length, terminal_status, ...) and the run's summary/memory metadata.
        """
        trace = self._write_trace(arrivals_ms, prompts, outputs)
        load: dict[str, Any] = (
            {"type": "concurrency", "concurrency": int(concurrency)}
            if concurrency is not None
            else {"type": "trace_timestamps", "speedup": 1.0}
        )
        raw = {
            "traffic": {
                "source": {"type": "trace", "paths": [trace], "format": "mooncake", "block_size": TRACE_BLOCK_SIZE},
                "load": load,
            },
            "engine": self.engine_config(point),
        }
        config = self._config_cls.model_validate(copy.deepcopy(raw))
        result = self._run(config, stack="engine", runner_factory=self._factory, output_requirements=self._requirements)
        records = result.native.get("per_request")
        if not isinstance(records, list) or len(records) != len(prompts):
            raise RuntimeError(f"{point}: AISimulate returned {len(records or [])} records for {len(prompts)} requests")
        memory = (result.native.get("memory_diagnostics") or {}).get("aggregated", {})
        meta = {
            "kv_capacity_tokens": memory.get("total_kv_size_tokens"),
            "kv_blocks": memory.get("estimated_num_gpu_blocks"),
            "kv_block_size_tokens": memory.get("scheduler_block_size_tokens"),
            "weights_bytes": (memory.get("memory_breakdown") or {}).get("weights_bytes"),
            "kv_cache_precision": result.summary.get("kv_cache_precision"),
            "prediction_provenance": result.summary.get("prediction_provenance"),
        }
        return records, meta


# --------------------------------------------------------------------------------------------------
# Workload and statistics


def draw_requests(
    point: OperatingPoint, rate: float | None, n: int | None, seconds: float | None, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times [ms] (Poisson at `rate` over `seconds`, or all zero for a closed loop of `n`) and lengths."""
    rng = np.random.default_rng(seed)
    if rate is not None:
        assert seconds is not None
        # Enough gaps to cover the window with overwhelming probability, then truncate.
        m = int(rate * seconds + 10 * math.sqrt(rate * seconds) + 10)
        t = np.cumsum(rng.exponential(1.0 / rate, size=m))
        arrivals = t[t < seconds] * 1000.0
    else:
        assert n is not None
        arrivals = np.zeros(n)
    prompt, output = LENGTHS[point.lengths]
    prompts = prompt.sample(rng, len(arrivals))
    outputs = output.sample(rng, len(arrivals))
    return arrivals, prompts, outputs


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def latency_stats(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """TTFT p50/p90/p99/mean and TPOT mean/p99 [s] of completed requests (vLLM's per-request TPOT)."""
    done = [r for r in records if r.get("terminal_status") == "completed"]
    ttft = np.array([r["ttft_ms"] for r in done], dtype=float) / 1000.0
    tpot = (
        np.array(
            [(r["e2e_latency_ms"] - r["ttft_ms"]) / (r["output_length"] - 1) for r in done if r["output_length"] > 1],
            dtype=float,
        )
        / 1000.0
    )
    return request_summary(ttft, tpot)


def request_summary(ttft: np.ndarray, tpot: np.ndarray) -> dict[str, float]:
    """TTFT p50/p90/p99/mean and TPOT mean/p99 [s] of per-request TTFT and TPOT [s] (NaN where
    there are none); iteration_sim.py's rows use it too."""
    return {
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "ttft_mean_s": float(ttft.mean()) if len(ttft) else float("nan"),
        "tpot_mean_s": float(tpot.mean()) if len(tpot) else float("nan"),
        "tpot_p99_s": _pct(tpot, 99),
    }


def _completion_s(r: dict[str, Any]) -> float:
    return float(r["terminal_time_ms"]) / 1000.0


def _closed_loop(
    sim: Simulator, point: OperatingPoint, settings: RunSettings, log: Log
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The closed-loop service rate: the batch cap always full and a queue always waiting."""
    concurrency = 2 * point.batch_cap
    n = max(settings.saturation_requests, 8 * concurrency)
    per_seed = []
    measured: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for seed in settings.saturation_seeds:
        arrivals, prompts, outputs = draw_requests(point, None, n, None, 10_000 + seed)
        t0 = time.process_time()
        records, meta = sim.run(point, arrivals, prompts, outputs, concurrency=concurrency)
        done = sorted((r for r in records if r.get("terminal_status") == "completed"), key=_completion_s)
        if len(done) != n:
            raise RuntimeError(f"{point}: {n - len(done)} of {n} saturation requests did not complete")
        first = int(0.2 * n)  # the 20 % mark: the start-up burst has cleared
        last = n - concurrency  # the last request is issued at this completion; the drain follows
        window = done[first:last]
        span = _completion_s(done[last - 1]) - _completion_s(done[first - 1])
        rps = len(window) / span
        tps = sum(int(r["output_length"]) for r in window) / span
        per_seed.append(
            {
                "seed": 10_000 + seed,
                "requests_per_s": rps,
                "output_tokens_per_s": tps,
                "window_s": span,
                "requests_measured": len(window),
                "tpot_mean_s": latency_stats(window)["tpot_mean_s"],
            }
        )
        measured.extend(window)
        log(f"  closed loop seed {seed}: {rps:.3f} req/s, {tps:.0f} tok/s ({time.process_time() - t0:.1f} s CPU)")
    stats = latency_stats(measured)
    row = {
        "method": (
            f"closed loop of {concurrency} requests (2 x batch cap), {n} requests per seed; completions from the "
            "20 % mark to the last issue, divided by that window; mean over seeds"
        ),
        "concurrency": concurrency,
        "requests_per_seed": n,
        "requests_per_s": float(np.mean([s["requests_per_s"] for s in per_seed])),
        "output_tokens_per_s": float(np.mean([s["output_tokens_per_s"] for s in per_seed])),
        "tpot_mean_s": stats["tpot_mean_s"],
        "tpot_p99_s": stats["tpot_p99_s"],
        "per_seed": per_seed,
    }
    return row, meta


def _overload(
    sim: Simulator, point: OperatingPoint, rate: float, seeds: Sequence[int], settings: RunSettings, log: Log
) -> dict[str, Any]:
    """Completions per second of an open-loop Poisson stream offered above capacity (the queue only grows)."""
    span = settings.seconds - settings.warmup
    per_seed = []
    measured: list[dict[str, Any]] = []
    for seed in seeds:
        arrivals, prompts, outputs = draw_requests(point, rate, None, settings.seconds, 20_000 + seed)
        records, _ = sim.run(point, arrivals, prompts, outputs)
        done = [r for r in records if settings.warmup <= _completion_s(r) < settings.seconds]
        per_seed.append(
            {
                "seed": 20_000 + seed,
                "requests_per_s": len(done) / span,
                "output_tokens_per_s": sum(int(r["output_length"]) for r in done) / span,
                "tpot_mean_s": latency_stats(done)["tpot_mean_s"],
            }
        )
        measured.extend(done)
        log(f"  overload {rate:.3f} req/s seed {seed}: {len(done) / span:.3f} req/s completed")
    stats = latency_stats(measured)
    return {
        "rate": rate,
        "requests_per_s": float(np.mean([s["requests_per_s"] for s in per_seed])),
        "output_tokens_per_s": float(np.mean([s["output_tokens_per_s"] for s in per_seed])),
        "tpot_mean_s": stats["tpot_mean_s"],
        "tpot_p99_s": stats["tpot_p99_s"],
        "per_seed": per_seed,
    }


def measure_saturation(
    sim: Simulator, point: OperatingPoint, settings: RunSettings, log: Log
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference's saturation throughput (module docstring): what a Poisson stream just past the knee gets.

    The closed loop (batch always full) is not what a Poisson stream gets with fixed lengths: identical
    requests phase-lock into admission waves whose pattern depends on how the queue was fed (A100, cap 64,
    512/128: 16.2 req/s in the closed loop, a Poisson stream stable only up to about 15.4, and 15.4-16.2
    completed under 1.1-3 x overload). So the saturation is the completion rate of Poisson arrivals
    offered at 1.1 x the closed-loop rate (`seeds` of `seconds` each), just past the knee; the closed
    loop and a 1.25 x overload are stored beside it.
    """
    closed, meta = _closed_loop(sim, point, settings, log)
    primary = _overload(sim, point, 1.1 * closed["requests_per_s"], settings.seeds, settings, log)
    check = _overload(sim, point, 1.25 * closed["requests_per_s"], settings.seeds[:1], settings, log)
    row = {
        "method": (
            f"Poisson arrivals offered at 1.1 x the closed-loop rate for {settings.seconds:g} s per seed (seeds "
            f"20000+s); completions in [{settings.warmup:g}, {settings.seconds:g}) s per second, mean over seeds"
        ),
        **primary,
        "closed_loop": closed,
        "overload_1_25x": check,
    }
    return row, meta


def measure_rate(
    sim: Simulator, point: OperatingPoint, rate: float, load_fraction: float, settings: RunSettings, log: Log
) -> dict[str, Any]:
    """Poisson arrivals at `rate` for `settings.seconds` per seed; steady-state latency and throughput."""
    per_seed = []
    measured: list[dict[str, Any]] = []
    completions = 0
    tokens = 0
    window = settings.seconds - settings.warmup
    for seed in settings.seeds:
        arrivals, prompts, outputs = draw_requests(point, rate, None, settings.seconds, seed)
        t0 = time.process_time()
        records, _ = sim.run(point, arrivals, prompts, outputs)
        lost = sum(r.get("terminal_status") != "completed" for r in records)
        if lost:
            raise RuntimeError(f"{point} at {rate} req/s: {lost} requests did not complete")
        steady = [r for r in records if float(r["arrival_time_ms"]) >= settings.warmup * 1000.0]
        in_window = [r for r in records if settings.warmup <= _completion_s(r) < settings.seconds]
        seed_tokens = sum(int(r["output_length"]) for r in in_window)
        stats = latency_stats(steady)
        per_seed.append(
            {
                "seed": seed,
                "requests_arrived": len(records),
                "requests_measured": len(steady),
                "requests_per_s": len(in_window) / window,
                "output_tokens_per_s": seed_tokens / window,
                **stats,
            }
        )
        measured.extend(steady)
        completions += len(in_window)
        tokens += seed_tokens
        log(
            f"  {load_fraction:.0%} = {rate:.3f} req/s seed {seed}: TTFT p99 {stats['ttft_p99_s'] * 1e3:.0f} ms, "
            f"TPOT {stats['tpot_mean_s'] * 1e3:.1f} ms ({len(records)} requests, {time.process_time() - t0:.1f} s CPU)"
        )
    return {
        "load_fraction": load_fraction,
        "rate": rate,
        "requests_per_s": completions / (window * len(settings.seeds)),
        "output_tokens_per_s": tokens / (window * len(settings.seeds)),
        **latency_stats(measured),
        "requests_measured": len(measured),
        "per_seed": per_seed,
    }


# --------------------------------------------------------------------------------------------------
# AIConfigurator static step times

PREFILL_ISL = (128, 256, 512, 1024, 2048, 4096, 8192)
PREFILL_BATCH = (1, 2, 4, 8)
DECODE_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_CONTEXT = (128, 512, 1024, 2048, 4096)


def static_tables(log: Log, quick: bool = False) -> dict[str, Any]:
    """AIConfigurator's static estimates: one prefill pass and one decode step, both GPUs and dtypes.

    Prefill: `cli_estimate(mode="static_ctx", isl=N, batch_size=b)`, one forward over b prompts of N
    tokens (b*N tokens, attention within each prompt). Decode: `mode="static_gen", isl=L, osl=2`, one
    decode step of b sequences with L tokens already in the KV cache (its TPOT). CUDA-graph and
    per-request overheads are whatever the measured kernels include; no scheduler is involved.
    """
    from aiconfigurator.cli.api import cli_estimate

    prefill_isl = PREFILL_ISL[:3] if quick else PREFILL_ISL
    decode_batch = DECODE_BATCH[:4] if quick else DECODE_BATCH
    prefill, decode = [], []
    for dtype, gpus in DTYPE_GPUS.items():
        for gpu in gpus:
            system, version, project_gpu = GPUS[gpu]
            gemm, kv, fmha, tier = DTYPES[dtype]
            common = {
                "backend_name": "vllm",
                "backend_version": version,
                "gemm_quant_mode": gemm,
                "kvcache_quant_mode": kv,
                "fmha_quant_mode": fmha,
            }
            ident = {"gpu": gpu, "project_gpu": project_gpu, "dtype": dtype, "project_quant_tier": tier}
            for isl in prefill_isl:
                for b in PREFILL_BATCH:
                    r = cli_estimate(MODEL, system, mode="static_ctx", isl=isl, osl=2, batch_size=b, **common)
                    prefill.append(
                        {
                            **ident,
                            "prompt_tokens": isl,
                            "batch": b,
                            "tokens": isl * b,
                            "time_s": r.ttft / 1000.0,
                            "oom": r.summary.check_oom(),
                        }
                    )
            for b in decode_batch:
                for ctx in DECODE_CONTEXT:
                    r = cli_estimate(MODEL, system, mode="static_gen", isl=ctx, osl=2, batch_size=b, **common)
                    decode.append(
                        {**ident, "batch": b, "context": ctx, "time_s": r.tpot / 1000.0, "oom": r.summary.check_oom()}
                    )
            log(f"static {gpu} {dtype}: {len(prefill)} prefill, {len(decode)} decode rows so far")
    return {
        "source": "aiconfigurator 0.12.0 cli_estimate (aiconfigurator_core 0.12.0 tables), SILICON database mode",
        "prefill_method": "mode=static_ctx, isl=prompt_tokens, batch_size=batch: one forward over batch prompts",
        "decode_method": "mode=static_gen, isl=context, osl=2, batch_size=batch: one decode step at that context",
        "prefill": prefill,
        "decode": decode,
    }


# --------------------------------------------------------------------------------------------------
# Provenance


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def table_provenance() -> list[dict[str, Any]]:
    """The vLLM kernel tables behind every number: package, path inside it, version, SHA-256, rows."""
    import importlib.util

    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for package, dist in (("aisimulate_core", "aisimulate"), ("aiconfigurator_core", "aiconfigurator-core")):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{package} is not installed (the crosscheck extra)")
        root = Path(spec.origin).resolve().parent
        for gpu in GPUS.values():
            system, version, _ = gpu
            for op in ("gemm", "attention"):
                folder = root / "systems" / "data" / system / op / "vllm" / version
                for f in sorted(folder.glob("*")):
                    if f.suffix not in (".parquet", ".yaml"):
                        continue
                    entry: dict[str, Any] = {
                        "package": dist,
                        "package_version": _md.version(dist),
                        "path": f"{package}/{f.relative_to(root)}",
                        "sha256": _sha256(f),
                    }
                    if f.suffix == ".parquet":
                        entry["rows"] = pq.ParquetFile(f).metadata.num_rows
                    rows.append(entry)
    return rows


def tool_versions() -> dict[str, Any]:
    """Versions and licences of the reference tools, read from their installed metadata."""
    out: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__}
    for dist in ("aisimulate", "aiconfigurator", "aiconfigurator-core"):
        meta = _md.metadata(dist)
        out[dist] = {"version": meta["Version"], "license": meta["License-Expression"] or meta["License"]}
    return out


# --------------------------------------------------------------------------------------------------
# Driver


def run(points: Iterable[OperatingPoint], settings: RunSettings, quick: bool, log: Log) -> dict[str, Any]:
    """Run every point and the static grid; return the JSON document (see experiments/crosscheck/README.md)."""
    wall0, cpu0 = time.time(), time.process_time()
    sim = Simulator()
    out_points = []
    for point in points:
        point.validate()
        log(f"{point}")
        p0 = time.process_time()
        saturation, meta = measure_saturation(sim, point, settings, log)
        rates = []
        for frac in LOAD_FRACTIONS:
            rate = float(f"{frac * saturation['requests_per_s']:.4g}")
            rates.append(measure_rate(sim, point, rate, frac, settings, log))
        system, version, project_gpu = GPUS[point.gpu]
        gemm, kv, fmha, tier = DTYPES[point.dtype]
        prompt, output = LENGTHS[point.lengths]
        out_points.append(
            {
                **asdict(point),
                "reference_system": system,
                "vllm_table_version": version,
                "quant_modes": {"gemm": gemm, "kvcache": kv, "fmha": fmha},
                "project": {
                    "gpu": project_gpu,
                    "quant_tier": tier,
                    "batch_size": point.batch_cap,
                    "max_batched_tokens": MAX_BATCHED_TOKENS,
                    "prompt": prompt.project_table(),
                    "output": output.project_table(),
                },
                "engine_config": Simulator.engine_config(point),
                **meta,
                "saturation": saturation,
                "rates": rates,
                "cpu_s": time.process_time() - p0,
            }
        )
    static = static_tables(log, quick=quick)
    return {
        "schema": "inferencegym-crosscheck-reference/1",
        "generated_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.executable, HERE.parents[1]), *sys.argv]),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "tools": tool_versions(),
        "data_tables": table_provenance(),
        "settings": {
            "model": MODEL,
            "parallelism": "1 GPU (TP 1, PP 1, 1 replica), aggregated vLLM worker, AISimulate offline engine stack",
            "max_batched_tokens": MAX_BATCHED_TOKENS,
            "chunked_prefill": "on (vLLM V1 default: the scheduler's token budget chunks prompts)",
            "prefix_caching": False,
            "kv_capacity": "AISimulate default for the vLLM version (gpu_memory_utilization); see kv_capacity_tokens",
            "tokenization_or_frontend_overhead": "none configured (AISimulate models none unless asked)",
            "arrivals": "Poisson (NumPy default_rng(seed)); saturation: closed loop, seed 10000+s",
            "lengths": {k: [asdict(v[0]), asdict(v[1])] for k, v in LENGTHS.items()},
            "load_fractions": list(LOAD_FRACTIONS),
            "run": asdict(settings),
            "ttft": "first token time - arrival time, per request",
            "tpot": "(e2e - TTFT) / (output_tokens - 1), per request with output_tokens > 1",
            "percentiles": "numpy.percentile (linear) over every measured request of every seed, pooled",
        },
        "points": out_points,
        "static": static,
        "wall_s": time.time() - wall0,
        "cpu_s": time.process_time() - cpu0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON to write (default: beside this script)")
    ap.add_argument("--gpu", action="append", choices=sorted(GPUS), help="restrict to these GPUs")
    ap.add_argument("--batch-cap", action="append", type=int, help="restrict to these batch caps")
    ap.add_argument("--lengths", action="append", choices=sorted(LENGTHS), help="restrict to these length sets")
    ap.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="restrict to these dtypes")
    ap.add_argument("--seconds", type=float, default=RunSettings.seconds, help="Poisson arrivals per seed [s]")
    ap.add_argument("--warmup", type=float, default=RunSettings.warmup, help="unmeasured arrivals [s]")
    ap.add_argument("--seeds", type=int, default=len(RunSettings.seeds), help="seeds per rate")
    ap.add_argument("--saturation-requests", type=int, default=RunSettings.saturation_requests)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 point, 120 s, 1 seed, a small static grid")
    args = ap.parse_args(argv)

    points = [
        p
        for p in default_points()
        if (not args.gpu or p.gpu in args.gpu)
        and (not args.batch_cap or p.batch_cap in args.batch_cap)
        and (not args.lengths or p.lengths in args.lengths)
        and (not args.dtype or p.dtype in args.dtype)
    ]
    if args.batch_cap:
        extra = set(args.batch_cap) - {p.batch_cap for p in default_points()}
        points += [
            OperatingPoint(g, cap, ln, d)
            for cap in sorted(extra)
            for d, gs in DTYPE_GPUS.items()
            for g in gs
            for ln in LENGTHS
            if (not args.gpu or g in args.gpu)
            and (not args.lengths or ln in args.lengths)
            and (not args.dtype or d in args.dtype)
        ]
    settings = RunSettings(args.seconds, args.warmup, tuple(range(args.seeds)), args.saturation_requests)
    if args.quick:
        points = points[:1]
        settings = RunSettings(120.0, 20.0, (0,), 2000, (0,))
    if not points:
        raise SystemExit("no operating point matches the filters")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    doc = run(points, settings, args.quick, log)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    tmp.replace(args.out)
    log(f"wrote {args.out} ({doc['wall_s']:.0f} s wall, {doc['cpu_s']:.0f} s CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
