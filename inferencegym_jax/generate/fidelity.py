"""Compare the performance model with every published calibration point and the shipped kernel
profiles; `render()` is the text of docs/FIDELITY.md (written by scripts/fidelity_report.py).

Each anchor is a published number (docs/DESIGN.md's calibration points, the GPU profiles of
data/profiling), the value `inferencegym_jax.perf_model` simulates for the same quantity, the
relative error and a tolerance: about 10-15 % against kernel profiles, 15-20 % against
end-to-end serving numbers. Rows whose published value is an input of the model (the
speculative acceptance table, prices) or the target of a fit (the H100 TPOT) are labelled so:
they check the wiring, they do not validate anything. An anchor outside its tolerance carries
the explanation of the mismatch, with its source, and a bound that tests/test_fidelity.py
still enforces.

The profile tables are read by `inferencegym_jax.generate.calibration` (pandas); the knee-model
comparison refits them with scipy, imported only there (a dev dependency).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import perf_model
from inferencegym_jax.generate import calibration
from inferencegym_jax.profiles import DRAFTS, GPUS, MODELS, PRECISIONS, SPEC_LENGTHS, GpuSpec, PrecisionSpec

if TYPE_CHECKING:
    import pandas as pd

# Tolerances, |relative error|: docs/DESIGN.md's kernel anchors, one table point or a derived kernel
# quantity, end-to-end serving numbers, and inputs or fits (met exactly, to float32 rounding).
KERNEL_TOL, KERNEL_POINT_TOL, E2E_TOL, EXACT_TOL = 0.10, 0.15, 0.20, 1e-3
# Token counts at which the model is compared with each profile table (those it has) [tokens].
TABLE_TOKENS = (1, 16, 64, 256, 1024, 4096, 16384)
WINDOW = 0.10  # a table's value at N is its median over N * (1 -+ WINDOW) tokens
MARLIN = "Marlin W4A16 kernels (Frantar et al. 2024), via docs/DESIGN.md"
DESIGN_GROUP = "docs/DESIGN.md calibration points"
FITTED_GROUP = "Fitted constants against docs/DESIGN.md"
TABLE_GROUP = "Kernel profiles at several token counts"
# Vidur tables (file, model) the calibration fits, per GPU; H100 adds LLMServingSim's table.
A100_VIDUR = ("a100_Meta-Llama-3-8B_mlp.csv", "llama-3-8b")
H100_VIDUR = ("h100_Llama-2-7b-hf_mlp.csv", "llama-2-7b")

# Jitted once per argument shape: the report evaluates hundreds of passes.
_decode = jax.jit(perf_model.decode_step_time)
_prefill = jax.jit(perf_model.prefill_time)


@dataclass(frozen=True)
class Anchor:
    """One published number against its simulated counterpart.

    Attributes:
      group: section of the report.
      name: the quantity compared.
      source: where the published number comes from.
      published: the published value, or a (low, high) range, in SI units of `unit` ([s] for
        "ms", [B] for "MB").
      simulated: the model's value, in the same units.
      unit: display unit: "ms", "tokens", "x", "MB", "$/h", "fraction", "tokens/step".
      kind: "kernel", "end-to-end", "arithmetic", "input" or "fit".
      tolerance: largest accepted |relative error|.
      note: what the row means, or the explanation of a miss.
      bound: for an explained miss, the largest |relative error| the tests still accept.
    """

    group: str
    name: str
    source: str
    published: float | tuple[float, float]
    simulated: float
    unit: str
    kind: str
    tolerance: float
    note: str = ""
    bound: float | None = None

    @property
    def error(self) -> float:
        """Relative error; for a published range, the distance to its nearer end (0 inside)."""
        if isinstance(self.published, tuple):
            low, high = self.published
            if low <= self.simulated <= high:
                return 0.0
            ref = low if self.simulated < low else high
            return self.simulated / ref - 1.0
        return self.simulated / self.published - 1.0

    @property
    def status(self) -> str:
        """ "ok", "input", "fit", "explained" (a miss within `bound`, with a note) or "MISS"."""
        within = abs(self.error) <= self.tolerance
        if within:
            return self.kind if self.kind in ("input", "fit") else "ok"
        if self.note and self.bound is not None and abs(self.error) <= self.bound:
            return "explained"
        return "MISS"


def kernels_only(profile: perf_model.Profile, norms: bool = True) -> perf_model.Profile:
    """`profile` cut down to what the kernel profiles time: the 32 layers' linear ops (and,
    with `norms`, their elementwise ops). No LM head, attention, KV cache or engine overhead."""
    zero = jnp.zeros((), jnp.float32)
    cut = profile.replace(
        weight_read_bytes=profile.weight_read_bytes - 2.0 * profile.lm_head_params,
        lm_head_params=zero,
        kv_bytes_per_token=zero,
        attn_flops_per_token_context=zero,
        step_overhead_s=zero,
        draft_params=zero,
    )
    if not norms:
        cut = cut.replace(elementwise_bytes_per_token=zero, fixed_kernel_s=zero)
    return cut


def forward_s(profile: perf_model.Profile, tokens: float) -> float:
    """One forward pass over `tokens` tokens [s]: a decode step of that batch at context 0
    (decode-sized passes) or a prefill of that many tokens; the same kernels either way."""
    n = jnp.float32(tokens)
    if tokens <= 256:
        return float(_decode(profile, n, jnp.float32(0.0)))
    return float(_prefill(profile, n))


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


# ----------------------------------------------------------------- kernel profile tables


def _table_sources() -> list[tuple[str, pd.DataFrame, perf_model.Profile, bool]]:
    """(label, profile table, the model's profile for its GPU and model, whether the table's
    elementwise ops are compared too) for each shipped table."""
    cal = perf_model.load_calibration()
    return [
        ("A100, Vidur Llama-3-8B, linear + elementwise", calibration.load_vidur(*A100_VIDUR),
         perf_model.build_profile("a100-80gb", "llama-3-8b", "fp16", "eagle", cal), True),
        ("H100, Vidur Llama-2-7B, linear + elementwise", calibration.load_vidur(*H100_VIDUR),
         perf_model.build_profile("h100-sxm", "llama-2-7b", "fp16", "eagle", cal), True),
        ("H100, LLMServingSim Llama-3.1-8B, linear", calibration.load_llmservingsim(),
         perf_model.build_profile("h100-sxm", "llama-3-8b", "fp16", "eagle", cal), False),
    ]


def table_anchors() -> list[Anchor]:
    """The kernel profiles themselves at several token counts (TABLE_TOKENS, those each has)."""
    rows = []
    for label, frame, profile, norms in _table_sources():
        table = frame.set_index("tokens")
        measured = table.linear_s + (table.elementwise_s if norms else 0.0)
        layers = MODELS[frame.model.iloc[0]].n_layers
        for n in TABLE_TOKENS:
            if float(n) not in measured.index:
                continue
            note, bound = "", None
            if label.startswith("A100") and n == 256:
                note, bound = _a100_knee_note(table.linear_s, profile), 2 * KERNEL_POINT_TOL
            rows.append(Anchor(TABLE_GROUP, f"{label}, {n:,} token{'s' * (n > 1)}",
                               frame.source.iloc[0], profile_value(measured, n) * layers,
                               forward_s(kernels_only(profile, norms), n), "ms", "kernel", KERNEL_POINT_TOL,
                               note=note, bound=bound))
    return rows


def _a100_knee_note(linear_s: pd.Series, profile: perf_model.Profile) -> str:
    """Why the A100 table at 256 tokens is faster than the model: the shape of the knee.

    `linear_s` is the table's per-layer linear time [s] indexed by token count."""
    m = MODELS["llama-3-8b"]
    p = float(profile.knee_sharpness)

    def ratios(n: int) -> tuple[float, float]:
        t_comp = 2.0 * m.params_linear * n / float(profile.linear_flops)
        t_mem = 2.0 * m.params_linear / float(profile.mem_bw)
        model = (t_mem**p + t_comp**p) ** (1.0 / p)
        return profile_value(linear_s, n) * m.n_layers / t_comp, model / t_comp

    (meas64, model64), (meas256, model256) = ratios(64), ratios(256)
    knee = float(profile.linear_flops / profile.mem_bw)
    return (f"Just above the A100 knee ({knee:.0f} tokens) the measured GEMMs already run close to their full "
            f"compute rate: at 256 tokens the table's linear time is {meas256:.2f}x the compute-only time at the "
            f"fitted eta_f, where the smooth max with one exponent (p = {p:.2f}, fitted over 1-16,384 tokens) gives "
            f"{model256:.2f}x; below the knee the bend is slow (at 64 tokens: {meas64:.2f}x of compute-only time "
            f"measured, {model64:.2f}x modelled). One exponent cannot follow both sides; the fit weights the many "
            "large-N points most. So the model overestimates A100 passes of about 200-300 tokens (decode batches "
            "of 192-256) and slightly under-rates those batch sizes. Of the variants under Knee model, the "
            "efficiency ramp narrows the miss only by driving eta_bw to the unphysical bound of 1, and "
            "weighting every octave of token counts equally narrows it a little.")


def profile_value(measured: pd.Series, tokens: int) -> float:
    """A profile table's time [s] at `tokens`: the median over the token counts within
    +-WINDOW of it, so that one GEMM-friendly or unfriendly shape does not stand for its
    neighbours (tile and wave quantisation scatter single points by up to ~20 %).

    `measured` is a time [s] indexed by token count (float)."""
    near = measured[(measured.index >= tokens * (1 - WINDOW)) & (measured.index <= tokens * (1 + WINDOW))]
    return float(np.median(near.to_numpy()))


def scatter_example() -> tuple[float, int]:
    """Largest relative deviation of one token count's time from its window median, and that
    token count, in the densest table (LLMServingSim H100, every count 1-2,048; linear layers)."""
    measured = calibration.load_llmservingsim().set_index("tokens").linear_s
    deviation = np.array([measured[n] / profile_value(measured, int(n)) - 1.0 for n in measured.index])
    worst = int(np.argmax(np.abs(deviation)))
    return float(deviation[worst]), int(measured.index[worst])


@functools.cache
def all_anchors() -> list[Anchor]:
    """Every anchor of the report, in its order (computed once per process)."""
    return design_anchors() + fitted_constant_anchors() + table_anchors()


# ----------------------------------------------------------------- knee-model variants


def _variant_layer_time(theta: np.ndarray, tokens: np.ndarray, params: np.ndarray, gpu: GpuSpec) -> np.ndarray:
    """Linear-layer time [s] of the smooth max (theta = eta_bw, eta_f, p) or, with a fourth
    parameter N0 [tokens], with the efficiency ramp eta_f(N) = eta_f * (1 - exp(-N / N0))."""
    eta_f = theta[1] * (1.0 - np.exp(-tokens / theta[3])) if len(theta) > 3 else theta[1]
    t_mem = 2.0 * params / (theta[0] * gpu.peak_hbm_bw)
    t_comp = 2.0 * params * tokens / (eta_f * gpu.peak_flops_bf16)
    top = np.maximum(t_mem, t_comp)
    return top * ((t_mem / top) ** theta[2] + (t_comp / top) ** theta[2]) ** (1.0 / theta[2])


def _octave_weights(tokens: np.ndarray) -> np.ndarray:
    """Least-squares weights, float64 like `tokens`: every octave of token counts counts equally
    and the weights of one table have unit norm."""
    octave = np.floor(np.log2(tokens))
    _, index, counts = np.unique(octave, return_inverse=True, return_counts=True)
    w = 1.0 / np.sqrt(counts[index])
    return w / np.sqrt(np.sum(w * w))


# (start point, lower bounds, upper bounds) of the 3-parameter smooth max and the 4-parameter ramp.
_THREE = ([0.75, 0.7, 4.0], [0.3, 0.3, 1.0], [1.0, 1.0, 50.0])
_FOUR = ([0.75, 0.7, 4.0, 64.0], [0.3, 0.3, 1.0, 1.0], [1.0, 1.0, 50.0, 4096.0])


def _variant_rows(gpu_name: str, frames: list[pd.DataFrame]) -> list[tuple[str, str, float, float, float, float]]:
    """The three variants' fits on one GPU's tables; rows as in `knee_model_comparison`."""
    from scipy.optimize import least_squares

    gpu = GPUS[gpu_name]
    tokens = np.concatenate([f.tokens.to_numpy() for f in frames])
    params = np.concatenate([[MODELS[m].params_linear_per_layer for m in f.model] for f in frames])
    measured = np.concatenate([f.linear_s.to_numpy() for f in frames])
    per_source = np.concatenate([np.full(len(f), 1.0 / np.sqrt(len(f))) for f in frames])
    per_octave = np.concatenate([_octave_weights(f.tokens.to_numpy()) for f in frames])
    near_256 = np.abs(tokens / 256.0 - 1.0) <= WINDOW
    rows = []
    for label, (x0, low, high), weights in (
        ("smooth max (shipped)", _THREE, per_source),
        ("smooth max + efficiency ramp", _FOUR, per_source),
        ("smooth max, octaves weighted equally", _THREE, per_octave),
    ):

        def residual(theta: np.ndarray, weights: np.ndarray = weights) -> np.ndarray:
            return weights * np.log(_variant_layer_time(theta, tokens, params, gpu) / measured)

        fit = least_squares(residual, x0=x0, bounds=(low, high))
        err = _variant_layer_time(fit.x, tokens, params, gpu) / measured - 1.0
        rows.append((gpu_name, label, float(fit.x[0]), float(np.median(np.abs(err))), float(np.max(np.abs(err))),
                     float(np.median(err[near_256]))))
    return rows


@functools.cache
def knee_model_comparison() -> list[tuple[str, str, float, float, float, float]]:
    """Fit quality of the shipped smooth max (eta_bw, eta_f, p; each source weighted equally)
    against two variants: a 4-parameter efficiency-vs-tokens ramp eta_f(N) = eta_f * (1 -
    exp(-N / N0)), and the smooth max with every octave of token counts weighted equally.

    Rows: (gpu, variant, eta_bw [fraction of peak], median |error|, max |error|, median error at
    256 +-10 % tokens), errors relative (model / measured - 1) on the linear layers."""
    frames = {
        "a100-80gb": [calibration.load_vidur(*A100_VIDUR)],
        "h100-sxm": [calibration.load_vidur(*H100_VIDUR), calibration.load_llmservingsim()],
    }
    return [row for gpu_name, fs in frames.items() for row in _variant_rows(gpu_name, fs)]


# ----------------------------------------------------------------- physical floors


def _floor_ratios(gpu: str, g: GpuSpec, q_name: str, q: PrecisionSpec) -> list[np.ndarray]:
    """Simulated time / peak-roofline floor of one GPU and precision: decode passes of every
    draft (batch x context x draft length, flattened) and then prefill passes, float32."""
    batch = jnp.asarray([1, 4, 16, 64, 256, 512], jnp.float32)[:, None, None]
    ctx = jnp.asarray([128, 1024, 8192], jnp.float32)[None, :, None]
    spec = jnp.asarray(SPEC_LENGTHS, jnp.float32)[None, None, :]
    tokens = jnp.asarray([1, 64, 512, 2048, 8192, 16384], jnp.float32)
    m = MODELS["llama-3-8b"]
    peak = g.peak_flops_8bit if (q.uses_8bit_compute and g.peak_flops_8bit > 0) else g.peak_flops_bf16
    weights = q.bytes_per_weight * m.params_linear + 2.0 * m.params_lm_head
    ratios = []
    for draft in DRAFTS:
        p = perf_model.get_profile(gpu, quant=q_name, draft=draft)
        t = _decode(p, batch, ctx, spec)
        n = batch * (spec + 1.0)
        floor = jnp.maximum((weights + batch * ctx * m.kv_bytes_per_token) / g.peak_hbm_bw,
                            2.0 * (m.params_linear + m.params_lm_head) * n / peak)
        ratios.append(np.asarray(t / floor).ravel())
    t = _prefill(p, tokens)  # the last draft's profile: prefill does not draft
    floor = jnp.maximum(2.0 * m.params_linear * tokens / peak, weights / g.peak_hbm_bw)
    ratios.append(np.asarray(t / floor))
    return ratios


@functools.cache
def floor_ratio() -> tuple[float, int]:
    """Smallest simulated time / peak-roofline floor over a grid of decode and prefill passes
    (every GPU, precision, draft, batch 1-512, context 128-8192, draft length 0-8), and the
    number of passes."""
    ratios = [r for gpu, g in GPUS.items() for quant, q in PRECISIONS.items() for r in _floor_ratios(gpu, g, quant, q)]
    ratios = np.concatenate(ratios)
    return float(ratios.min()), int(ratios.size)


# ----------------------------------------------------------------- the document


def _fmt(value: float, unit: str) -> str:
    """`value` (SI units) as displayed in `unit`."""
    scale = {"ms": 1e3, "MB": 1e-6}.get(unit, 1.0)
    v = value * scale
    if unit == "tokens":
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    if unit == "$/h":
        return f"{v:.2f}"
    return f"{v:.4g}"


def _published(a: Anchor) -> str:
    """The published value or range of `a`, as displayed."""
    if isinstance(a.published, tuple):
        return "-".join(_fmt(x, a.unit) for x in a.published)
    return _fmt(a.published, a.unit)


def _intro_lines() -> list[str]:
    """Title and the explanation of kinds, tolerances and table values."""
    deviation, tokens = scatter_example()
    return [
        "# Simulator fidelity",
        "",
        "Generated by `python scripts/fidelity_report.py` from the installed package and",
        "`data/profiling`; do not edit by hand (`tests/test_fidelity.py` fails when this file is stale).",
        "",
        "Each row compares a published number with what `inferencegym_jax.perf_model` simulates for",
        "the same quantity. Tolerances: 10 % for docs/DESIGN.md's kernel-profile anchors, 15 % for a",
        "profile table at one token count and for derived kernel quantities, 20 % for end-to-end serving",
        "numbers. Kinds: *kernel* (kernel profile), *end-to-end* (serving measurement), *arithmetic*",
        "(a published formula), *input* (the published number is a model input: the row checks wiring,",
        "not fidelity) and *fit* (the model is fitted to it: not a validation). Status *explained*: outside",
        "the tolerance, with the reason below the table; the tests bound how far it may drift.",
        "",
        "Kernel rows compare the 32 layers' linear (and elementwise) kernels only: the profiles time",
        "those, so the model is cut to the same kernels (no LM head, attention or engine overhead).",
        f"A profile table's value at N tokens is its median over the token counts within {WINDOW:.0%} of N:",
        "single shapes scatter around their neighbours (tile and wave quantisation: in the LLMServingSim",
        f"table, which has every count from 1 to 2,048, {tokens:,} tokens is {deviation:+.0%} off that median).",
        "",
    ]


_ANCHOR_TABLE_HEAD = ("| anchor | source | unit | published | simulated | error | tolerance | kind | status |",
                      "|---|---|---|---:|---:|---:|---:|---|---|")


def _anchor_table_lines(anchors: list[Anchor]) -> tuple[list[str], list[tuple[Anchor, int]]]:
    """One markdown table per group of anchors, and the (anchor, number) of each note."""
    lines: list[str] = []
    notes: list[tuple[Anchor, int]] = []
    group = None
    for i, a in enumerate(anchors):
        if a.group != group:
            group = a.group
            lines += [f"## {group}", "", *_ANCHOR_TABLE_HEAD]
        status = a.status
        if a.note:
            notes.append((a, len(notes) + 1))
            status += f" [{len(notes)}]"
        lines.append(f"| {a.name} | {a.source} | {a.unit} | {_published(a)} | {_fmt(a.simulated, a.unit)} | "
                     f"{a.error:+.1%} | {a.tolerance:.{0 if a.tolerance >= 0.01 else 1}%} | {a.kind} | {status} |")
        if i + 1 == len(anchors) or anchors[i + 1].group != group:
            lines.append("")
    return lines, notes


def _knee_model_lines() -> list[str]:
    """The knee-model section: the variants' fit quality."""
    lines = ["", "## Knee model", "",
             "The linear layers' time is a smooth max of memory and compute time, fitted per GPU",
             "(`scripts/calibrate.py`). Two variants, fitted the same way (weighted log least squares),",
             "do not earn a change of the dynamics: a fourth parameter, an efficiency-vs-tokens ramp",
             "eta_f(N) = eta_f * (1 - exp(-N / N0)), drives eta_bw to its bound of 1 (the full datasheet",
             "bandwidth: unphysical) and fits worse at the median; weighting every octave of token counts",
             "equally, rather than every source, changes little and lowers A100's eta_bw. Errors of the",
             "linear layers alone, model / measured - 1:", "",
             "| GPU | variant | eta_bw | median abs. error | max abs. error | median error at 256 tokens |",
             "|---|---|---:|---:|---:|---:|"]
    for gpu, label, eta_bw, med, mx, at_256 in knee_model_comparison():
        lines.append(f"| {gpu} | {label} | {eta_bw:.4f} | {med:.1%} | {mx:.1%} | {at_256:+.1%} |")
    return lines


def _floor_and_summary_lines(anchors: list[Anchor]) -> list[str]:
    """The physical-floor section and the count of anchors per status."""
    low, count = floor_ratio()
    lines = ["", "## Physical floors", "",
             f"Over {count:,} decode and prefill passes (both GPUs, every precision and draft, batch 1-512,",
             "context 128-8,192, draft length 0-8, prefills of 1-16,384 tokens) no simulated time is",
             "below the peak-bandwidth or peak-FLOP floor: the smallest ratio of simulated time to floor",
             f"is {low:.3f}. `tests/test_fidelity.py` checks the same.", ""]
    summary: dict[str, int] = {}
    for a in anchors:
        summary[a.status] = summary.get(a.status, 0) + 1
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(summary.items()))
    return lines + ["## Summary", "", counts + f" ({len(anchors)} anchors).", ""]


def render() -> str:
    """The text of docs/FIDELITY.md."""
    anchors = all_anchors()
    lines = _intro_lines()
    table, notes = _anchor_table_lines(anchors)
    lines += table + ["## Notes", ""]
    lines += [f"{i}. **{a.name}**: {a.note}" for a, i in notes]
    lines += _knee_model_lines() + _floor_and_summary_lines(anchors)
    return "\n".join(lines)
