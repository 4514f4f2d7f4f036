"""Hardware, model, precision and speculative-draft constants, each with its unit and source.

These are the raw published numbers. `perf_model.get_profile` combines one GPU, one model, one
precision tier and one draft method with the fitted efficiency constants of
`data/calibration.json` into a `Profile` pytree.

All sizes are in bytes (B) and all rates per second; "GB" below means 1e9 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    """Peak numbers of one accelerator (host-side constants, not a pytree).

    Attributes:
      name: registry key.
      hbm_bytes: HBM capacity [B]. 80e9 for both 80 GB parts: with 16.06 GB of BF16 weights
        and a 3 GB reserve this gives docs/DESIGN.md's anchor of ~465 k KV tokens at kv_budget 1.0.
      peak_hbm_bw: peak HBM bandwidth [B/s].
      peak_flops_bf16: dense BF16 tensor-core peak [FLOP/s].
      peak_flops_8bit: dense FP8 peak [FLOP/s], 0 where the GPU has no FP8 tensor cores and
        8-bit weights run weight-only (W8A16) at the BF16 rate.
      price_per_hour: on-demand cloud price of one GPU [$/h].
      kv_link_bw: bandwidth available for prefill->decode KV transfer between two GPUs of the
        same node [B/s] (NVLink).
      weight_load_bw: host->device bandwidth used when a new weight copy is loaded on a
        precision change [B/s] (PCIe).
    """

    name: str
    hbm_bytes: float
    peak_hbm_bw: float
    peak_flops_bf16: float
    peak_flops_8bit: float
    price_per_hour: float
    kv_link_bw: float
    weight_load_bw: float


# Sources: NVIDIA A100 datasheet (2.039 TB/s HBM2e, 312 TFLOP/s dense BF16, no FP8; NVLink3
# 600 GB/s bidirectional -> 300 GB/s each way; PCIe Gen4 x16 32 GB/s, ~25 GB/s achieved).
# NVIDIA H100 SXM datasheet (3.35 TB/s HBM3, 989 TFLOP/s dense BF16, 1,979 TFLOP/s dense FP8;
# NVLink4 900 GB/s bidirectional -> 450 GB/s each way; PCIe Gen5 x16 64 GB/s, ~50 GB/s achieved).
# Prices: docs/DESIGN.md (A100 ~2.74 $/h, H100 ~3.24 $/h on-demand cloud).
GPUS: dict[str, GpuSpec] = {
    "a100-80gb": GpuSpec(
        name="a100-80gb",
        hbm_bytes=80e9,
        peak_hbm_bw=2.039e12,
        peak_flops_bf16=312e12,
        peak_flops_8bit=0.0,
        price_per_hour=2.74,
        kv_link_bw=300e9,
        weight_load_bw=25e9,
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        hbm_bytes=80e9,
        peak_hbm_bw=3.35e12,
        peak_flops_bf16=989e12,
        peak_flops_8bit=1979e12,
        price_per_hour=3.24,
        kv_link_bw=450e9,
        weight_load_bw=50e9,
    ),
}


@dataclass(frozen=True)
class ModelSpec:
    """Architecture constants of one decoder-only model.

    Attributes:
      name: registry key.
      params_linear: parameters in the per-layer linear layers (QKV, O, gate/up, down).
      params_embedding: parameters of the token embedding (a gather: read B rows per step).
      params_lm_head: parameters of the output projection.
      n_layers: decoder layers.
      d_model: hidden size; n_heads * head_dim.
      n_kv_heads: key/value heads (grouped-query attention).
      head_dim: dimension of one head.
      d_ffn: MLP intermediate size.
    """

    name: str
    params_linear: float
    params_embedding: float
    params_lm_head: float
    n_layers: int
    d_model: int
    n_kv_heads: int
    head_dim: int
    d_ffn: int

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache per token [B]: K and V, every layer, BF16 (2 B)."""
        return 2.0 * self.n_layers * self.n_kv_heads * self.head_dim * 2.0

    @property
    def params_linear_per_layer(self) -> float:
        """Linear parameters of one layer: QKV, O, gate+up, down."""
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        return d * (d + 2 * kv) + d * d + 3 * d * self.d_ffn


# Llama-3-8B: config.json of meta-llama/Meta-Llama-3-8B (32 layers, hidden 4096, 32 heads,
# 8 KV heads, head dim 128, intermediate 14336, vocab 128256, untied embeddings). Parameter
# split from docs/DESIGN.md: 6.979 B linear, 0.525 B embedding, 0.525 B LM head (8.03 B in all);
# 6.979e9 = 32 * params_linear_per_layer to 4 digits. KV: 2*32*8*128*2 B = 131,072 B/token.
# Llama-2-7B (used only to read the H100 Vidur profile): 32 layers, hidden 4096, 32 KV heads,
# intermediate 11008, vocab 32000.
MODELS: dict[str, ModelSpec] = {
    "llama-3-8b": ModelSpec(
        name="llama-3-8b",
        params_linear=6.979e9,
        params_embedding=0.525e9,
        params_lm_head=0.525e9,
        n_layers=32,
        d_model=4096,
        n_kv_heads=8,
        head_dim=128,
        d_ffn=14336,
    ),
    "llama-2-7b": ModelSpec(
        name="llama-2-7b",
        params_linear=32 * (4 * 4096 * 4096 + 3 * 4096 * 11008),
        params_embedding=32000 * 4096,
        params_lm_head=32000 * 4096,
        n_layers=32,
        d_model=4096,
        n_kv_heads=32,
        head_dim=128,
        d_ffn=11008,
    ),
}


@dataclass(frozen=True)
class PrecisionSpec:
    """One weight-precision tier (the `quant_tier` knob).

    Attributes:
      name: registry key.
      bytes_per_weight: storage per linear-layer weight [B], group scales included. Embedding
        and LM head stay BF16 in every tier (as in AWQ, GPTQ and vLLM's FP8 checkpoints).
      uses_8bit_compute: True when GEMMs run on 8-bit tensor cores where the GPU has them
        (FP8 W8A8 on H100); otherwise weights are dequantised and GEMMs run at the BF16 rate.
      compute_efficiency: achieved compute relative to the BF16 fit. FP8: 0.8, so that the
        compute-bound gain is the published "up to 1.6x" (NVIDIA/vLLM FP8 notes) rather than
        the 2x peak ratio. INT4: 0.9, the dequantisation penalty of W4A16 kernels (Marlin,
        Frantar et al. 2024: near 4x at batch 1-16, at or slightly below FP16 once
        compute-bound).
      quality_loss: relative quality lost against BF16, a fraction. FP8/INT8 0.005 (vLLM FP8
        and LLM.int8() report >= 99.5 % recovery on Llama-3-8B); INT4 0.04 (AWQ/GPTQ 4-bit
        Llama-3-8B loses ~2.5-3 MMLU points of 66.6: Huang et al. 2024, "How good are
        low-bit quantized LLaMA3 models?").
    """

    name: str
    bytes_per_weight: float
    uses_8bit_compute: bool
    compute_efficiency: float
    quality_loss: float


# INT4: 4 bits + one FP16 scale and one 4-bit zero point per group of 128 weights:
# 0.5 + (2 + 0.5) / 128 = 0.5195 B ("about 0.52" in docs/DESIGN.md).
PRECISIONS: dict[str, PrecisionSpec] = {
    "fp16": PrecisionSpec("fp16", 2.0, False, 1.0, 0.0),
    "int8": PrecisionSpec("int8", 1.0, True, 0.8, 0.005),
    "int4": PrecisionSpec("int4", 0.5 + 2.5 / 128, False, 0.9, 0.04),
}
QUANT_TIERS: tuple[str, ...] = ("fp16", "int8", "int4")


@dataclass(frozen=True)
class DraftSpec:
    """One speculative-decoding draft method.

    Attributes:
      name: registry key.
      tokens_per_step: mean tokens emitted per sequence per verify step at draft length
        k = 0, 1, 2, 4, 8 (k = 0: plain decoding, 1 token).
      draft_params: parameters read per draft token (0 for n-gram lookup, which runs on the
        CPU and costs no GPU time).
    """

    name: str
    tokens_per_step: tuple[float, float, float, float, float]
    draft_params: float


# docs/DESIGN.md calibration points: EAGLE-style drafts on chat data 1.66 / 2.04 / 2.39 / 2.61 and
# n-gram (prompt lookup) drafts 1.24 / 1.34 / 1.43 / 1.49 tokens per verify step at k=1/2/4/8.
# Acceptance depends on the workload, so each task picks its draft (`draft` in its TOML): EAGLE
# where the traffic is chat (its acceptance was measured on chat data); n-gram lookup (vLLM's
# "ngram" speculator, after Saxena's prompt-lookup decoding, 2023) copies spans of the prompt
# and pays off where outputs repeat their context (code edits, retrieval, summaries).
# EAGLE's draft head is one decoder layer plus the shared LM head (Li et al., ICML 2024):
# 218 M linear parameters for Llama-3-8B (= params_linear / 32) plus the 525 M LM head.
SPEC_LENGTHS: tuple[int, ...] = (0, 1, 2, 4, 8)
DRAFTS: dict[str, DraftSpec] = {
    "eagle": DraftSpec("eagle", (1.0, 1.66, 2.04, 2.39, 2.61), 6.979e9 / 32 + 0.525e9),
    "ngram": DraftSpec("ngram", (1.0, 1.24, 1.34, 1.43, 1.49), 0.0),
}
