"""Fit the performance model's efficiency constants to the shipped GPU profiles.

Writes `data/calibration.json`; rerunning it reproduces the file byte for byte (the fit is
deterministic: fixed start point, fixed data order, rounded output).

For each GPU, the per-layer time of the linear layers (QKV, O, gate/up, down) at N tokens is

    t_lin(N) = smoothmax_p( W / (eta_bw * BW),  2 * P * N / (eta_f * F) )
    smoothmax_p(a, b) = (a^p + b^p)^(1/p)

(W bytes of BF16 weights, P parameters, BW and F the datasheet peaks), so eta_bw, eta_f and the
knee sharpness p are fitted by least squares on log time over N = 1 .. 16384. The serving
engine's per-step overhead is what remains of the H100 vLLM TPOT anchor (6.48 ms at batch 1)
after the kernel model. The elementwise
ops (norms, RoPE, activation, residual add) are fitted as t_elem(N) = a + b * N per layer
(relative least squares, Vidur only): b
becomes bytes of activation traffic per token (at the fitted bandwidth) and a a fixed latency.

No efficiency-vs-tokens curve on top of the smooth max: the smooth max already bends across
the memory-to-compute knee, and a fourth parameter (eta_f rising as 1 - exp(-N / N0)) fits no
better; scripts/fidelity_report.py refits it and reports both in docs/FIDELITY.md.

Sources (MIT, see data/profiling/*/PROVENANCE.txt):
  A100: Vidur Llama-3-8B, tensor parallel 1.
  H100: Vidur Llama-2-7B (same hidden size 4096) and LLMServingSim Llama-3.1-8B, weighted equally.

Usage: python scripts/calibrate.py [--out data/calibration.json] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
try:
    import inferencegym_jax  # noqa: F401  (the installed package, as users have it)
except ImportError:  # a bare checkout: use the source tree
    sys.path.insert(0, str(ROOT))
from inferencegym_jax.profiles import GPUS, MODELS  # noqa: E402

PROFILES = ROOT / "data" / "profiling"
MAX_TOKENS = 16384
VIDUR_LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
VIDUR_ELEMENTWISE = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
LSS_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LSS_ELEMENTWISE = ("input_layernorm", "rope", "post_layernorm", "act_fn")


def load_vidur(filename: str, model: str) -> pd.DataFrame:
    """Per-layer medians [s] of linear and elementwise ops from a Vidur mlp.csv, TP=1."""
    frame = pd.read_csv(PROFILES / "vidur" / filename)
    frame = frame[(frame.num_tensor_parallel_workers == 1) & (frame.num_tokens <= MAX_TOKENS)]
    out = pd.DataFrame({"tokens": frame.num_tokens.to_numpy(dtype=float)})
    out["linear_s"] = sum(frame[f"time_stats.{op}.median"].to_numpy() for op in VIDUR_LINEAR) * 1e-3
    out["elementwise_s"] = (
        sum(frame[f"time_stats.{op}.median"].to_numpy() for op in VIDUR_ELEMENTWISE) * 1e-3
    )
    out["model"] = model
    out["source"] = f"vidur/{filename}"
    return out.groupby(["tokens", "model", "source"], as_index=False).median()


def load_llmservingsim() -> pd.DataFrame:
    """Per-layer latencies [s] from LLMServingSim's H100 Llama-3.1-8B layer table."""
    frame = pd.read_csv(PROFILES / "llmservingsim" / "H100_Llama-3.1-8B_tp1_layers.csv")
    table = frame.pivot_table(index="input", columns="layer_name", values="latency(ns)")
    table = table[table.index <= MAX_TOKENS]
    out = pd.DataFrame({"tokens": table.index.to_numpy(dtype=float)})
    out["linear_s"] = table[list(LSS_LINEAR)].sum(axis=1).to_numpy() * 1e-9
    out["elementwise_s"] = table[list(LSS_ELEMENTWISE)].sum(axis=1).to_numpy() * 1e-9
    out["model"] = "llama-3-8b"
    out["source"] = "llmservingsim/H100_Llama-3.1-8B_tp1_layers.csv"
    return out


def linear_layer_time(theta: np.ndarray, tokens: np.ndarray, params: np.ndarray, gpu) -> np.ndarray:
    """The roofline of the module docstring for one layer [s]; theta = (eta_bw, eta_f, p)."""
    eta_bw, eta_f, p = theta
    t_mem = 2.0 * params / (eta_bw * gpu.peak_hbm_bw)
    t_comp = 2.0 * params * tokens / (eta_f * gpu.peak_flops_bf16)
    top = np.maximum(t_mem, t_comp)
    return top * ((t_mem / top) ** p + (t_comp / top) ** p) ** (1.0 / p)


def fit_gpu(gpu_name: str, frames: list[pd.DataFrame]) -> dict:
    gpu = GPUS[gpu_name]
    tokens, params, measured, weights = [], [], [], []
    for frame in frames:
        per_layer = np.array([MODELS[m].params_linear_per_layer for m in frame.model])
        tokens.append(frame.tokens.to_numpy())
        params.append(per_layer)
        measured.append(frame.linear_s.to_numpy())
        weights.append(np.full(len(frame), 1.0 / np.sqrt(len(frame))))  # each source counts equally
    tokens, params = np.concatenate(tokens), np.concatenate(params)
    measured, weights = np.concatenate(measured), np.concatenate(weights)

    def residual(theta: np.ndarray) -> np.ndarray:
        return weights * np.log(linear_layer_time(theta, tokens, params, gpu) / measured)

    fit = least_squares(residual, x0=[0.75, 0.7, 4.0], bounds=([0.3, 0.3, 1.0], [1.0, 1.0, 50.0]))
    relative_error = linear_layer_time(fit.x, tokens, params, gpu) / measured - 1.0

    # Elementwise ops: ordinary least squares t = a + b * N on the Vidur points only.
    # LLMServingSim times eager HF PyTorch with profiler hooks (~17 us per layernorm at one
    # token), launch overhead that CUDA-graph serving engines do not pay.
    vidur = [f for f in frames if f.source.iloc[0].startswith("vidur/")]
    elem_tokens = np.concatenate([f.tokens.to_numpy() for f in vidur])
    elem_time = np.concatenate([f.elementwise_s.to_numpy() for f in vidur])
    # Relative least squares (rows scaled by 1 / measured) so small-N points count as much.
    design = np.stack([np.ones_like(elem_tokens), elem_tokens], axis=1) / elem_time[:, None]
    (fixed_s, per_token_s), *_ = np.linalg.lstsq(design, np.ones_like(elem_time), rcond=None)
    eta_bw = float(fit.x[0])
    return {
        "eta_bw": round(eta_bw, 4),
        "eta_flops": round(float(fit.x[1]), 4),
        "knee_sharpness": round(float(fit.x[2]), 3),
        "elementwise_bytes_per_token_per_layer": round(float(per_token_s * eta_bw * gpu.peak_hbm_bw), 1),
        "elementwise_fixed_s_per_layer": round(float(fixed_s), 9),
        "fit_points": int(len(tokens)),
        "fit_median_abs_error": round(float(np.median(np.abs(relative_error))), 4),
        "fit_max_abs_error": round(float(np.max(np.abs(relative_error))), 4),
        "sources": sorted({str(s) for f in frames for s in f.source.unique()}),
    }


def fit_step_overhead(gpus: dict) -> float:
    """Serving-engine overhead per step [s] that meets the H100 vLLM TPOT anchor.

    The kernel model alone is evaluated at batch 1 and the anchor's context; the remainder of
    the measured 6.48 ms is software (scheduler, sampler), shared by every GPU.
    """
    from inferencegym_jax import perf_model

    profile = perf_model.build_profile("h100-sxm", "llama-3-8b", "fp16", "eagle", {"gpus": gpus})
    kernels = float(perf_model.decode_step_time(profile, 1, perf_model.TPOT_ANCHOR_CONTEXT))
    return max(perf_model.TPOT_ANCHOR_S - kernels, 0.0)


def calibrate() -> dict:
    gpus = {
        "a100-80gb": fit_gpu("a100-80gb", [load_vidur("a100_Meta-Llama-3-8B_mlp.csv", "llama-3-8b")]),
        "h100-sxm": fit_gpu(
            "h100-sxm",
            [load_vidur("h100_Llama-2-7b-hf_mlp.csv", "llama-2-7b"), load_llmservingsim()],
        ),
    }
    return {
        "description": (
            "Fitted efficiency constants of the roofline in inferencegym_jax/perf_model.py. "
            "Generated by scripts/calibrate.py from data/profiling; do not edit by hand."
        ),
        "units": {
            "eta_bw": "achieved / peak HBM bandwidth",
            "eta_flops": "achieved / peak dense BF16 FLOP/s",
            "knee_sharpness": "exponent p of the smooth max between memory and compute time",
            "elementwise_bytes_per_token_per_layer": "B per token per layer, at the fitted bandwidth",
            "elementwise_fixed_s_per_layer": "s per layer per forward pass",
            "step_overhead_s": "s per engine step, fitted to the H100 vLLM TPOT anchor",
        },
        "max_tokens": MAX_TOKENS,
        "gpus": gpus,
        "step_overhead_s": round(fit_step_overhead(gpus), 6),
    }


def render(result: dict) -> str:
    return json.dumps(result, indent=2, sort_keys=True) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "calibration.json")
    parser.add_argument("--check", action="store_true", help="fail if the file on disk is stale")
    args = parser.parse_args()
    text = render(calibrate())
    if args.check:
        if args.out.read_text() != text:
            sys.exit(f"{args.out} is stale: rerun scripts/calibrate.py")
        print(f"{args.out} is up to date")
        return
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
