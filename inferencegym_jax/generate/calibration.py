"""Fit the performance model's efficiency constants to the shipped GPU profiles.

`render(calibrate())` is the text of `data/calibration.json` (written by scripts/calibrate.py);
the fit is deterministic (fixed start point, fixed data order, rounded output), so a rerun
reproduces the file byte for byte.

For each GPU, the per-layer time of the linear layers (QKV, O, gate/up, down) at N tokens is

    t_lin(N) = smoothmax_p( W / (eta_bw * BW),  2 * P * N / (eta_f * F) )
    smoothmax_p(a, b) = (a^p + b^p)^(1/p)

(W bytes of BF16 weights, P parameters, BW and F the datasheet peaks), so eta_bw, eta_f and the
knee sharpness p are fitted by least squares on log time over N = 1 .. 16384. The serving
engine's per-step overhead is what remains of the H100 vLLM TPOT anchor (6.48 ms at batch 1)
after the kernel model. The elementwise ops (norms, RoPE, activation, residual add) are fitted
as t_elem(N) = a + b * N per layer (relative least squares, Vidur only): b becomes bytes of
activation traffic per token (at the fitted bandwidth) and a a fixed latency.

No efficiency-vs-tokens curve on top of the smooth max: the smooth max already bends across
the memory-to-compute knee, and a fourth parameter (eta_f rising as 1 - exp(-N / N0)) fits no
better; `inferencegym_jax.generate.fidelity` refits it and reports both in docs/FIDELITY.md.

Sources (MIT, see data/profiling/*/PROVENANCE.txt), read from the installed package data:
  A100: Vidur Llama-3-8B, tensor parallel 1.
  H100: Vidur Llama-2-7B (same hidden size 4096) and LLMServingSim Llama-3.1-8B, weighted equally.

pandas reads the tables and scipy fits them; both are imported only by the functions that need
them (scipy is a dev dependency).
"""

from __future__ import annotations

import json
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

import numpy as np

from inferencegym_jax import perf_model
from inferencegym_jax.files import shipped
from inferencegym_jax.profiles import GPUS, MODELS, GpuSpec

if TYPE_CHECKING:
    import pandas as pd

# Largest token count of the profile rows that are fitted [tokens].
MAX_TOKENS = 16384
# Columns (per-layer ops) of a Vidur mlp.csv and of LLMServingSim's layer table.
VIDUR_LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
VIDUR_ELEMENTWISE = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
LSS_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LSS_ELEMENTWISE = ("input_layernorm", "rope", "post_layernorm", "act_fn")
LSS_TABLE = "H100_Llama-3.1-8B_tp1_layers.csv"
# Least-squares start point and bounds of theta = (eta_bw, eta_f, p).
THETA_START = (0.75, 0.7, 4.0)
THETA_LOW, THETA_HIGH = (0.3, 0.3, 1.0), (1.0, 1.0, 50.0)


def profile_table(source: str, filename: str) -> Traversable:
    """The shipped profile table data/profiling/<source>/<filename> (installed or checkout)."""
    return shipped("data").joinpath("profiling", source, filename)


def load_vidur(filename: str, model: str) -> pd.DataFrame:
    """Per-layer medians of a Vidur mlp.csv (data/profiling/vidur), tensor parallel 1.

    Returns one row per token count N <= MAX_TOKENS, columns: tokens (float64 [tokens]),
    linear_s and elementwise_s (float64 [s] per layer), model (str, a key of MODELS) and
    source (str, "vidur/<filename>").
    """
    import pandas as pd

    with profile_table("vidur", filename).open("rb") as handle:
        frame = pd.read_csv(handle)
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
    """Per-layer latencies of LLMServingSim's H100 Llama-3.1-8B layer table.

    Same columns as `load_vidur` (tokens [tokens], linear_s and elementwise_s [s] per layer,
    model "llama-3-8b", source "llmservingsim/<table>"), one row per token count <= MAX_TOKENS.
    """
    import pandas as pd

    with profile_table("llmservingsim", LSS_TABLE).open("rb") as handle:
        frame = pd.read_csv(handle)
    table = frame.pivot_table(index="input", columns="layer_name", values="latency(ns)")
    table = table[table.index <= MAX_TOKENS]
    out = pd.DataFrame({"tokens": table.index.to_numpy(dtype=float)})
    out["linear_s"] = table[list(LSS_LINEAR)].sum(axis=1).to_numpy() * 1e-9
    out["elementwise_s"] = table[list(LSS_ELEMENTWISE)].sum(axis=1).to_numpy() * 1e-9
    out["model"] = "llama-3-8b"
    out["source"] = f"llmservingsim/{LSS_TABLE}"
    return out


def linear_layer_time(theta: np.ndarray, tokens: np.ndarray, params: np.ndarray, gpu: GpuSpec) -> np.ndarray:
    """The roofline of the module docstring for one layer [s].

    theta = (eta_bw, eta_f, p) (fractions of peak, and the knee exponent); tokens [tokens] and
    params (parameters per layer) are float arrays of one shape, which the result has.
    """
    eta_bw, eta_f, p = theta
    t_mem = 2.0 * params / (eta_bw * gpu.peak_hbm_bw)
    t_comp = 2.0 * params * tokens / (eta_f * gpu.peak_flops_bf16)
    top = np.maximum(t_mem, t_comp)
    return top * ((t_mem / top) ** p + (t_comp / top) ** p) ** (1.0 / p)


def linear_fit_points(frames: list[pd.DataFrame]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The linear-layer points of `frames`, concatenated in order: (tokens [tokens], params per
    layer, measured [s], weights), float64 (M,); the weights make each source count equally."""
    tokens, params, measured, weights = [], [], [], []
    for frame in frames:
        per_layer = np.array([MODELS[m].params_linear_per_layer for m in frame.model])
        tokens.append(frame.tokens.to_numpy())
        params.append(per_layer)
        measured.append(frame.linear_s.to_numpy())
        weights.append(np.full(len(frame), 1.0 / np.sqrt(len(frame))))
    return np.concatenate(tokens), np.concatenate(params), np.concatenate(measured), np.concatenate(weights)


def fit_linear(gpu: GpuSpec, frames: list[pd.DataFrame]) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares on log time of the linear layers.

    Returns theta = (eta_bw, eta_f, p), float64 (3,), and the relative error model / measured - 1
    of every point, float64 (M,).
    """
    from scipy.optimize import least_squares

    tokens, params, measured, weights = linear_fit_points(frames)

    def residual(theta: np.ndarray) -> np.ndarray:
        return weights * np.log(linear_layer_time(theta, tokens, params, gpu) / measured)

    fit = least_squares(residual, x0=list(THETA_START), bounds=(list(THETA_LOW), list(THETA_HIGH)))
    return fit.x, linear_layer_time(fit.x, tokens, params, gpu) / measured - 1.0


def fit_elementwise(frames: list[pd.DataFrame]) -> tuple[float, float]:
    """Elementwise ops: t = a + b * N on the Vidur points only; returns (a [s], b [s/token]).

    LLMServingSim times eager HF PyTorch with profiler hooks (~17 us per layernorm at one token),
    launch overhead that CUDA-graph serving engines do not pay. Relative least squares (rows
    scaled by 1 / measured) so that small-N points count as much.
    """
    vidur = [f for f in frames if f.source.iloc[0].startswith("vidur/")]
    elem_tokens = np.concatenate([f.tokens.to_numpy() for f in vidur])
    elem_time = np.concatenate([f.elementwise_s.to_numpy() for f in vidur])
    design = np.stack([np.ones_like(elem_tokens), elem_tokens], axis=1) / elem_time[:, None]
    (fixed_s, per_token_s), *_ = np.linalg.lstsq(design, np.ones_like(elem_time), rcond=None)
    return fixed_s, per_token_s


def fit_gpu(gpu_name: str, frames: list[pd.DataFrame]) -> dict[str, Any]:
    """The calibration entry of one GPU (units in `calibrate()`'s "units"), fitted on `frames`."""
    gpu = GPUS[gpu_name]
    theta, relative_error = fit_linear(gpu, frames)
    fixed_s, per_token_s = fit_elementwise(frames)
    eta_bw = float(theta[0])
    return {
        "eta_bw": round(eta_bw, 4),
        "eta_flops": round(float(theta[1]), 4),
        "knee_sharpness": round(float(theta[2]), 3),
        "elementwise_bytes_per_token_per_layer": round(float(per_token_s * eta_bw * gpu.peak_hbm_bw), 1),
        "elementwise_fixed_s_per_layer": round(float(fixed_s), 9),
        "fit_points": int(len(relative_error)),
        "fit_median_abs_error": round(float(np.median(np.abs(relative_error))), 4),
        "fit_max_abs_error": round(float(np.max(np.abs(relative_error))), 4),
        "sources": sorted({str(s) for f in frames for s in f.source.unique()}),
    }


def fit_step_overhead(gpus: dict[str, dict[str, Any]]) -> float:
    """Serving-engine overhead per step [s] that meets the H100 vLLM TPOT anchor.

    The kernel model alone (with the fitted `gpus` entries) is evaluated at batch 1 and the
    anchor's context; the remainder of the measured 6.48 ms is software (scheduler, sampler),
    shared by every GPU.
    """
    profile = perf_model.build_profile("h100-sxm", "llama-3-8b", "fp16", "eagle", {"gpus": gpus})
    kernels = float(perf_model.decode_step_time(profile, 1, perf_model.TPOT_ANCHOR_CONTEXT))
    return max(perf_model.TPOT_ANCHOR_S - kernels, 0.0)


def calibrate() -> dict[str, Any]:
    """The content of data/calibration.json: per-GPU fitted constants and the step overhead."""
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


def render(result: dict[str, Any]) -> str:
    """The text of data/calibration.json for `result` (sorted keys, trailing newline)."""
    return json.dumps(result, indent=2, sort_keys=True) + "\n"
