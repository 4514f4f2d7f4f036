"""The anchors of docs/DESIGN.md: its published calibration points (kernel passes, TPOT, KV
capacity and transfer, speculation, FP8 and INT4 gains, prices), and the fitted constants of
data/calibration.json against its reading of the same profiles and its serving overheads."""

from __future__ import annotations

import jax.numpy as jnp

from inferencegym_jax import perf_model
from inferencegym_jax.generate import calibration
from inferencegym_jax.generate.fidelity.anchor import (
    A100_VIDUR,
    E2E_TOL,
    EXACT_TOL,
    KERNEL_POINT_TOL,
    KERNEL_TOL,
    Anchor,
    forward_s,
    kernels_only,
)
from inferencegym_jax.profiles import DRAFTS, GPUS, SPEC_LENGTHS

MARLIN = "Marlin W4A16 kernels (Frantar et al. 2024), via docs/DESIGN.md"
DESIGN_GROUP = "docs/DESIGN.md calibration points"
FITTED_GROUP = "Fitted constants against docs/DESIGN.md"


# ----------------------------------------------------------------- docs/DESIGN.md calibration points


def _design_kernel_anchors(a100: perf_model.Profile, h100: perf_model.Profile) -> list[Anchor]:
    """The kernel-profile passes, the fitted H100 TPOT and the A100 KV capacities."""
    g = DESIGN_GROUP
    return [
        Anchor(g, "A100 single-sequence decode: linear + elementwise ops of 32 layers",
               "Vidur A100 Llama-3-8B profile (docs/DESIGN.md: 9.7 ms)", 9.7e-3,
               forward_s(kernels_only(a100), 1), "ms", "kernel", KERNEL_TOL),
        Anchor(g, "A100 1,024-token prefill: linear + norm ops of 32 layers",
               "Vidur A100 Llama-3-8B profile (docs/DESIGN.md: 75 ms)", 75e-3,
               forward_s(kernels_only(a100), 1024), "ms", "kernel", KERNEL_TOL),
        Anchor(g, "H100 1,024-token prefill: linear + norm ops of 32 layers",
               "LLMServingSim H100 Llama-3.1-8B, linear + layernorms (docs/DESIGN.md: ~22.7 ms)", 22.7e-3,
               forward_s(kernels_only(h100), 1024), "ms", "kernel", KERNEL_TOL,
               note="The model's elementwise cost is fitted on Vidur (CUDA-event kernel times); "
                    "LLMServingSim times eager PyTorch layers."),
        Anchor(g, "H100 TPOT, batch 1, 1,024-token context (vLLM)",
               "vLLM at concurrency 1 (docs/DESIGN.md: 6.48 ms)", perf_model.TPOT_ANCHOR_S,
               float(perf_model.decode_step_time(h100, 1, perf_model.TPOT_ANCHOR_CONTEXT)), "ms", "fit",
               EXACT_TOL, note="A fit, not a validation: the per-step overhead is set so that this anchor is met."),
        Anchor(g, "KV capacity, A100 BF16, kv_budget 0.1", "docs/DESIGN.md: about 46 k tokens", 46e3,
               float(perf_model.kv_capacity_tokens(a100, 0.1)), "tokens", "arithmetic", 0.02),
        Anchor(g, "KV capacity, A100 BF16, kv_budget 1.0", "docs/DESIGN.md: 465 k tokens", 465e3,
               float(perf_model.kv_capacity_tokens(a100, 1.0)), "tokens", "arithmetic", 0.02),
    ]


def _speculation_anchors() -> list[Anchor]:
    """Tokens per verify step of each draft method and draft length k > 0 (model inputs)."""
    rows = []
    for draft, label in (("eagle", "EAGLE-style draft, chat data"), ("ngram", "n-gram draft")):
        profile = perf_model.get_profile("a100-80gb", draft=draft)
        for k, published in zip(SPEC_LENGTHS[1:], DRAFTS[draft].tokens_per_step[1:]):
            rows.append(Anchor(DESIGN_GROUP, f"tokens per verify step, {label}, k = {k}", "docs/DESIGN.md", published,
                               float(perf_model.tokens_per_step(profile, k)), "tokens/step", "input", EXACT_TOL))
    return rows


def _fp8_anchor(h100: perf_model.Profile) -> Anchor:
    """FP8 on H100: the throughput gain of decode, largest over serving batches."""
    fp8 = perf_model.get_profile("h100-sxm", quant="int8")
    batches = jnp.asarray([1, 2, 4, 8, 16, 32, 64, 128, 256], jnp.float32)
    gain = perf_model.decode_step_time(h100, batches, 1024.0) / perf_model.decode_step_time(fp8, batches, 1024.0)
    return Anchor(DESIGN_GROUP, "H100 FP8 decode throughput gain, largest over batch 1-256",
                  "NVIDIA / vLLM FP8 notes (docs/DESIGN.md: up to 1.6x)", 1.6, float(jnp.max(gain)), "x",
                  "end-to-end", E2E_TOL,
                  note=f"The gain falls with batch: {float(gain[0]):.2f}x at batch 1, "
                       f"{float(gain[6]):.2f}x at 64, {float(gain[-1]):.2f}x at 256.")


def _int4_knee_note(a100_knee: float, speedup: float) -> str:
    """Why the A100 INT4 GEMM speedup at 16 tokens falls short of Marlin's near-4x."""
    return (f"INT4 GEMMs take the BF16 knee shape fitted on cuBLAS (p = {a100_knee:.2f} on A100), "
            "so memory and compute time blend: the 3.85x cut in weight bytes gives "
            f"{speedup:.2f}x at 16 tokens. Marlin pipelines dequantisation under the weight "
            "loads and stays near 4x up to batch 16-32; no W4A16 profile is shipped to fit "
            "a sharper INT4 knee. The model errs conservative: INT4 gains less than Marlin "
            "at batch 8-32 on A100, and matches it at batch 1 and once compute-bound.")


def _int4_anchors() -> list[Anchor]:
    """INT4 W4A16: GEMM-only speedups (what the Marlin numbers measure), and the decode step."""
    int4 = {gpu: perf_model.get_profile(gpu, quant="int4") for gpu in GPUS}
    fp16 = {gpu: perf_model.get_profile(gpu) for gpu in GPUS}
    a100_knee = float(fp16["a100-80gb"].knee_sharpness)
    rows = []
    for gpu, label in (("a100-80gb", "A100"), ("h100-sxm", "H100")):
        for n in (1, 16):
            speedup = forward_s(kernels_only(fp16[gpu], False), n) / forward_s(kernels_only(int4[gpu], False), n)
            note, bound = "", None
            if gpu == "a100-80gb" and n == 16:
                note, bound = _int4_knee_note(a100_knee, speedup), 2 * KERNEL_POINT_TOL
            rows.append(Anchor(DESIGN_GROUP, f"{label} INT4 (W4A16) linear-layer speedup over FP16, {n} token(s)",
                               MARLIN + ": near 4x at batch 1-16", 4.0, speedup, "x", "kernel",
                               KERNEL_POINT_TOL, note=note, bound=bound))
    big = float(perf_model.decode_step_time(fp16["a100-80gb"], 512, 1024)
                / perf_model.decode_step_time(int4["a100-80gb"], 512, 1024))
    rows.append(Anchor(DESIGN_GROUP, "A100 INT4 decode-step speedup at batch 512 (compute-bound)",
                       MARLIN + ": little gain once compute-bound", 1.0, big, "x", "end-to-end", E2E_TOL))
    return rows


def _kv_transfer_and_price_anchors(a100: perf_model.Profile, h100: perf_model.Profile) -> list[Anchor]:
    """KV bytes and NVLink transfer time of a 1 k-token prompt, and the GPU prices (inputs)."""
    g, tokens_1k = DESIGN_GROUP, 1000.0
    h100_link = float(perf_model.kv_transfer_time(h100, tokens_1k))
    rows = [
        Anchor(g, "KV of a 1 k-token prompt", "docs/DESIGN.md: 131 MB", 131e6,
               tokens_1k * float(a100.kv_bytes_per_token), "MB", "arithmetic", 0.01),
        Anchor(g, "KV transfer of a 1 k-token prompt, A100 NVLink", "docs/DESIGN.md: about 0.4 ms", 0.4e-3,
               float(perf_model.kv_transfer_time(a100, tokens_1k)), "ms", "end-to-end", E2E_TOL,
               note=f"Per-direction NVLink3 bandwidth (300 GB/s); H100's NVLink4 (450 GB/s) takes "
                    f"{h100_link * 1e3:.2f} ms. Both disaggregated GPUs sit in one node, so the "
                    "InfiniBand figure (about 5 ms at 200 Gb/s) is not simulated."),
    ]
    for gpu, label, price in (("a100-80gb", "A100", 2.74), ("h100-sxm", "H100", 3.24)):
        rows.append(Anchor(g, f"{label} price", "docs/DESIGN.md (on-demand cloud)", price,
                           float(perf_model.get_profile(gpu).price_per_hour), "$/h", "input", EXACT_TOL))
    return rows


def design_anchors() -> list[Anchor]:
    """docs/DESIGN.md's published calibration points, in the report's order."""
    a100, h100 = perf_model.get_profile("a100-80gb"), perf_model.get_profile("h100-sxm")
    return (_design_kernel_anchors(a100, h100) + _speculation_anchors() + [_fp8_anchor(h100)]
            + _int4_anchors() + _kv_transfer_and_price_anchors(a100, h100))


# ----------------------------------------------------------------- fitted constants


def _efficiency_anchors(cal: dict) -> list[Anchor]:
    """Fitted eta_bw and eta_f of each GPU against docs/DESIGN.md's reading of the profiles."""
    rows = []
    for gpu, label in (("a100-80gb", "A100"), ("h100-sxm", "H100")):
        c = cal["gpus"][gpu]
        rows.append(Anchor(FITTED_GROUP, f"{label} achieved bandwidth fraction eta_bw", "docs/DESIGN.md: 0.77-0.78",
                           (0.77, 0.78), c["eta_bw"], "fraction", "kernel", KERNEL_TOL))
        rows.append(Anchor(FITTED_GROUP, f"{label} achieved FLOP fraction eta_f", "docs/DESIGN.md: 0.69-0.77",
                           (0.69, 0.77), c["eta_flops"], "fraction", "kernel", KERNEL_TOL))
    return rows


def _h100_knee_note() -> str:
    """Why H100's knee sits above docs/DESIGN.md's 128-256 tokens: its FLOP-to-byte ratio."""
    a100_tab = calibration.load_vidur(*A100_VIDUR).set_index("tokens").linear_s
    lss_tab = calibration.load_llmservingsim().set_index("tokens").linear_s
    ridge = {k: GPUS[k].peak_flops_bf16 / GPUS[k].peak_hbm_bw for k in GPUS}
    return (f"H100's peak FLOP-to-byte ratio ({ridge['h100-sxm']:.0f} FLOP/B) is "
            f"{ridge['h100-sxm'] / ridge['a100-80gb']:.1f}x A100's ({ridge['a100-80gb']:.0f}), so its knee "
            "sits higher; docs/DESIGN.md's 128-256 tokens is the A100 value. The H100 table agrees: "
            f"its linear time at 256 tokens is {lss_tab[256.0] / lss_tab[1.0]:.2f}x that at one token "
            f"(LLMServingSim), against {a100_tab[256.0] / a100_tab[1.0]:.2f}x on A100 (Vidur).")


def _knee_anchors(cal: dict) -> list[Anchor]:
    """Knee [tokens]: where the linear layers' memory and compute times are equal (W = 2 P bytes)."""
    rows = []
    for gpu, label in (("a100-80gb", "A100"), ("h100-sxm", "H100")):
        c, spec = cal["gpus"][gpu], GPUS[gpu]
        knee = c["eta_flops"] * spec.peak_flops_bf16 / (c["eta_bw"] * spec.peak_hbm_bw)
        note, bound = "", None
        if gpu == "h100-sxm":
            note, bound = _h100_knee_note(), 2 * KERNEL_POINT_TOL
        rows.append(Anchor(FITTED_GROUP, f"{label} memory-to-compute knee of the linear layers",
                           "docs/DESIGN.md: 128-256 tokens", (128.0, 256.0), knee, "tokens", "kernel", KERNEL_POINT_TOL,
                           note=note, bound=bound))
    return rows


def _step_overhead_note(cal: dict, h100: perf_model.Profile) -> str:
    """Where the 6.48 ms H100 TPOT goes, and why the fitted overhead is below docs/DESIGN.md's range."""
    kernels = float(perf_model.decode_step_time(h100, 1, perf_model.TPOT_ANCHOR_CONTEXT)) - float(h100.step_overhead_s)
    weights_s = float(h100.weight_read_bytes / h100.mem_bw)
    other_s = kernels - weights_s
    eta_needed = float(h100.weight_read_bytes) / (
        GPUS["h100-sxm"].peak_hbm_bw * (perf_model.TPOT_ANCHOR_S - 1.25e-3 - other_s))
    overhead_s = float(h100.step_overhead_s)
    return (f"The kernel model spends {kernels * 1e3:.2f} ms of the 6.48 ms vLLM TPOT (weights at the fitted "
            f"eta_bw {cal['gpus']['h100-sxm']['eta_bw']:.3f}: {weights_s * 1e3:.2f} ms; KV, LM head and elementwise "
            f"ops: {other_s * 1e3:.2f} ms), which leaves {overhead_s * 1e3:.3f} ms. A 1.25 ms overhead "
            f"would need the weights read at {eta_needed:.2f} of peak bandwidth, above what the H100 profiles show, "
            "so at batch 1 vLLM's CUDA-graph decode pays far less than 1 ms per step; docs/DESIGN.md's 1-1.5 ms is "
            "typical of large batches, where scheduling and sampling grow with the batch, which the model does "
            "not represent. We keep the fit to the one measured TPOT; simulated small-batch decode has almost no "
            "software floor.")


def _overhead_anchors(cal: dict) -> list[Anchor]:
    """The serving overheads: per engine step (fitted) and per request (chosen)."""
    h100 = perf_model.get_profile("h100-sxm")
    return [
        Anchor(FITTED_GROUP, "per-step serving overhead (fitted to the H100 TPOT)",
               "docs/DESIGN.md: about 1-1.5 ms per engine step", (1e-3, 1.5e-3), float(h100.step_overhead_s), "ms",
               "end-to-end", E2E_TOL, note=_step_overhead_note(cal, h100), bound=1.0),
        Anchor(FITTED_GROUP, "per-request overhead on TTFT", "docs/DESIGN.md: 10-40 ms", (10e-3, 40e-3),
               float(h100.request_overhead_s), "ms", "input", EXACT_TOL,
               note="A chosen value (the geometric middle of the range), not fitted."),
    ]


def fitted_constant_anchors() -> list[Anchor]:
    """The fitted constants against docs/DESIGN.md's reading of the same profiles and its overheads."""
    cal = perf_model.load_calibration()
    return _efficiency_anchors(cal) + _knee_anchors(cal) + _overhead_anchors(cal)
