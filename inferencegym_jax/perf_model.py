"""Analytic roofline of one LLM-serving GPU, calibrated on measured kernel profiles.

Every function is pure, jittable and vmappable over its numeric arguments and over the
`Profile` pytree itself (so hardware and precision can be swept); results are float32 seconds.

One forward pass over `n` tokens that reads `kv` cached tokens runs three kinds of kernels one
after another, so their times add:

    t_gemm = smoothmax_p(weight_read_bytes / mem_bw,
                         2 * linear_params * n / linear_flops + 2 * lm_head_params * n_out / bf16_flops)
    t_attn = smoothmax_p(kv * kv_bytes_per_token / mem_bw, attn_flops / bf16_flops)
    t_elem = n * elementwise_bytes_per_token / mem_bw + fixed_kernel_s
    smoothmax_p(a, b) = (a^p + b^p)^(1/p)

with mem_bw = eta_bw * peak bandwidth and the FLOP rates = eta_f * peak, where eta_bw, eta_f and
the knee sharpness p are fitted by `scripts/calibrate.py` on measured GEMM times
(data/calibration.json). docs/DESIGN.md's single max over the whole pass is the special case of one
kernel; separate kernels cannot overlap memory-bound attention with compute-bound GEMMs.
Because eta <= 1 and smoothmax >= max, no simulated time is below the peak-roofline floor.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
from flax import struct
from jax import Array
from jax.typing import ArrayLike  # a jax or numpy array, or a Python scalar

from inferencegym_jax import xla_ops
from inferencegym_jax.files import shipped
from inferencegym_jax.profiles import DRAFTS, GPUS, MODELS, PRECISIONS, SPEC_LENGTHS

# Memory held outside weights and KV: CUDA context, activations, CUDA graphs, allocator slack
# [B]. docs/DESIGN.md: ~3 GB, which with 80e9 B of HBM gives 465 k KV tokens at kv_budget 1.0.
RESERVE_BYTES = 3e9
# Per-request serving overhead on TTFT [s]: tokenisation, scheduling, detokenisation and the
# HTTP path; docs/DESIGN.md gives 10-40 ms, we take the geometric middle.
REQUEST_OVERHEAD_S = 0.020
# Decode-time anchor for the per-step overhead: vLLM at concurrency 1 on H100 SXM, Llama-3-8B,
# 6.48 ms TPOT (docs/DESIGN.md). scripts/calibrate.py sets step_overhead_s so that the model meets
# it at a 1,024-token context, then uses the same software overhead on every GPU.
TPOT_ANCHOR_S = 6.48e-3
TPOT_ANCHOR_CONTEXT = 1024
# Models the calibrated profiles serve (profiles.MODELS also holds Llama-2-7B, whose only use is
# reading the H100 kernel profile in the calibration fit).
SERVED_MODELS: tuple[str, ...] = ("llama-3-8b",)


@struct.dataclass
class Profile:
    """Everything the roofline needs for one (GPU, model, precision, draft); float32 scalars.

    Attributes:
      hbm_bytes: HBM capacity [B].
      weight_bytes: resident weights at this precision, embedding and LM head in BF16 [B].
      weight_read_bytes: weights read per forward pass: linear layers at this precision plus
        the BF16 LM head (the embedding is a gather of a few rows) [B].
      kv_bytes_per_token: KV cache per token, BF16 [B/token].
      reserve_bytes: memory held outside weights and KV [B].
      linear_params: parameters in the per-layer linear layers.
      lm_head_params: parameters in the LM head.
      attn_flops_per_token_context: attention FLOPs per query token per cached token,
        4 * n_layers * d_model (QK^T and AV) [FLOP].
      mem_bw: achieved HBM bandwidth [B/s].
      linear_flops: achieved FLOP rate of the linear layers at this precision [FLOP/s].
      bf16_flops: achieved BF16 FLOP rate, for the LM head and attention [FLOP/s].
      knee_sharpness: exponent p of the smooth max between memory and compute time.
      elementwise_bytes_per_token: activation traffic of norms, RoPE, activation and residual
        adds over all layers [B/token].
      fixed_kernel_s: fixed latency of the small kernels of one forward pass [s].
      step_overhead_s: serving-engine overhead per engine step (scheduler, sampler) [s].
      request_overhead_s: per-request overhead added to TTFT [s].
      price_per_hour: price of one GPU [$/h].
      kv_link_bw: GPU-to-GPU bandwidth for prefill->decode KV transfer [B/s].
      weight_load_bw: host-to-GPU bandwidth for loading a new weight copy [B/s].
      draft_params: parameters read per speculative draft token (0 for n-gram drafts).
      draft_layer_fraction: fraction of the KV cache the draft reads per draft token (one
        layer of n_layers for EAGLE).
      spec_tokens_per_step: mean tokens per verify step at draft length 0, 1, 2, 4, 8; shape (5,).
      quality_loss: relative model quality lost at this precision, a fraction in [0, 1).
    """

    hbm_bytes: Array
    weight_bytes: Array
    weight_read_bytes: Array
    kv_bytes_per_token: Array
    reserve_bytes: Array
    linear_params: Array
    lm_head_params: Array
    attn_flops_per_token_context: Array
    mem_bw: Array
    linear_flops: Array
    bf16_flops: Array
    knee_sharpness: Array
    elementwise_bytes_per_token: Array
    fixed_kernel_s: Array
    step_overhead_s: Array
    request_overhead_s: Array
    price_per_hour: Array
    kv_link_bw: Array
    weight_load_bw: Array
    draft_params: Array
    draft_layer_fraction: Array
    spec_tokens_per_step: Array
    quality_loss: Array


def _valid(field: str, value: str, allowed: Mapping[str, object]) -> None:
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not one of {sorted(allowed)}")


@functools.cache
def load_calibration() -> dict:
    """The fitted constants of data/calibration.json (installed as package data)."""
    text = shipped("data").joinpath("calibration.json").read_text()
    return json.loads(text)


def build_profile(
    gpu: str, model: str, quant: str, draft: str, calibration: Mapping[str, Any]
) -> Profile:
    """Assemble a `Profile` from the constants of `profiles.py` and a calibration mapping."""
    _valid("gpu", gpu, GPUS)
    _valid("model", model, MODELS)
    _valid("quant", quant, PRECISIONS)
    _valid("draft", draft, DRAFTS)
    g, m, q, d = GPUS[gpu], MODELS[model], PRECISIONS[quant], DRAFTS[draft]
    cal = calibration["gpus"][gpu]
    bf16_flops = cal["eta_flops"] * g.peak_flops_bf16
    if q.uses_8bit_compute and g.peak_flops_8bit > 0:
        linear_flops = cal["eta_flops"] * q.compute_efficiency * g.peak_flops_8bit
    elif q.uses_8bit_compute:  # no 8-bit tensor cores (A100 FP8): weight-only, BF16 GEMMs
        linear_flops = bf16_flops
    else:
        linear_flops = bf16_flops * q.compute_efficiency
    linear_bytes = q.bytes_per_weight * m.params_linear
    def f32(x: float | tuple[float, ...]) -> Array:
        return jnp.asarray(x, jnp.float32)

    return Profile(
        hbm_bytes=f32(g.hbm_bytes),
        weight_bytes=f32(linear_bytes + 2.0 * (m.params_embedding + m.params_lm_head)),
        weight_read_bytes=f32(linear_bytes + 2.0 * m.params_lm_head),
        kv_bytes_per_token=f32(m.kv_bytes_per_token),
        reserve_bytes=f32(RESERVE_BYTES),
        linear_params=f32(m.params_linear),
        lm_head_params=f32(m.params_lm_head),
        attn_flops_per_token_context=f32(4.0 * m.n_layers * m.d_model),
        mem_bw=f32(cal["eta_bw"] * g.peak_hbm_bw),
        linear_flops=f32(linear_flops),
        bf16_flops=f32(bf16_flops),
        knee_sharpness=f32(cal["knee_sharpness"]),
        elementwise_bytes_per_token=f32(cal["elementwise_bytes_per_token_per_layer"] * m.n_layers),
        fixed_kernel_s=f32(cal["elementwise_fixed_s_per_layer"] * m.n_layers),
        step_overhead_s=f32(calibration.get("step_overhead_s", 0.0)),
        request_overhead_s=f32(REQUEST_OVERHEAD_S),
        price_per_hour=f32(g.price_per_hour),
        kv_link_bw=f32(g.kv_link_bw),
        weight_load_bw=f32(g.weight_load_bw),
        draft_params=f32(d.draft_params),
        draft_layer_fraction=f32(1.0 / m.n_layers if d.draft_params > 0 else 0.0),
        spec_tokens_per_step=f32(d.tokens_per_step),
        quality_loss=f32(q.quality_loss),
    )


def get_profile(
    gpu: str = "a100-80gb", model: str = "llama-3-8b", quant: str = "fp16", draft: str = "eagle"
) -> Profile:
    """The calibrated profile of one GPU, model, precision tier and draft method.

    Args:
      gpu: "a100-80gb" or "h100-sxm".
      model: "llama-3-8b".
      quant: "fp16", "int8" (FP8 W8A8 on H100, weight-only INT8 on A100) or "int4" (W4A16).
      draft: speculative draft method, "eagle" or "ngram".

    Raises:
      ValueError: an unknown name; the message lists the valid ones.
    """
    if model not in SERVED_MODELS:
        raise ValueError(f"model={model!r} is not one of {list(SERVED_MODELS)}")
    return build_profile(gpu, model, quant, draft, load_calibration())


def _smooth_max(a: Array, b: Array, p: Array) -> Array:
    """(a^p + b^p)^(1/p) for a, b >= 0, as max * (1 + r^p)^(1/p) with r = min / max in [0, 1]
    (the powers by `xla_ops.power`)."""
    top = jnp.maximum(a, b)
    r = jnp.minimum(a, b) / jnp.maximum(top, 1e-30)
    return top * jnp.exp(jnp.log1p(xla_ops.power(r, p)) / p)


def forward_time(
    profile: Profile,
    num_tokens: ArrayLike,
    kv_tokens_read: Array,
    attn_flops: Array,
    lm_head_tokens: ArrayLike,
) -> Array:
    """Kernel time of one forward pass [s], no serving overhead (see the module docstring).

    The GEMMs (linear layers and LM head), the attention kernels and the elementwise kernels
    run one after another, so their times add; each is a smooth roofline of its own.

    Args:
      num_tokens: tokens processed by the linear layers.
      kv_tokens_read: cached tokens whose K and V are read (decode) or written (prefill).
      attn_flops: attention FLOPs of the pass.
      lm_head_tokens: positions that go through the LM head.
    """
    n = jnp.asarray(num_tokens, jnp.float32)
    p = profile.knee_sharpness
    gemm_mem = profile.weight_read_bytes / profile.mem_bw
    gemm_comp = 2.0 * profile.linear_params * n / profile.linear_flops + (
        2.0 * profile.lm_head_params * lm_head_tokens / profile.bf16_flops
    )
    attn_mem = kv_tokens_read * profile.kv_bytes_per_token / profile.mem_bw
    attn_comp = attn_flops / profile.bf16_flops
    elementwise = n * profile.elementwise_bytes_per_token / profile.mem_bw + profile.fixed_kernel_s
    return _smooth_max(gemm_mem, gemm_comp, p) + _smooth_max(attn_mem, attn_comp, p) + elementwise


def tokens_per_step(profile: Profile, spec_length: ArrayLike) -> Array:
    """Expected tokens emitted per sequence per engine step; 1.0 at spec_length 0.

    Linear interpolation in the measured table at k = 0, 1, 2, 4, 8.
    """
    k = jnp.asarray(spec_length, jnp.float32)
    return jnp.interp(k, jnp.asarray(SPEC_LENGTHS, jnp.float32), profile.spec_tokens_per_step)


def draft_token_time(profile: Profile, batch_size: ArrayLike, context_len: ArrayLike) -> Array:
    """Time to draft one speculative token for `batch_size` sequences [s]; 0 for n-gram drafts."""
    b = jnp.asarray(batch_size, jnp.float32)
    t_mem = (
        2.0 * profile.draft_params
        + profile.draft_layer_fraction * b * context_len * profile.kv_bytes_per_token
    ) / profile.mem_bw
    t_comp = 2.0 * profile.draft_params * b / profile.bf16_flops
    return jnp.where(profile.draft_params > 0, _smooth_max(t_mem, t_comp, profile.knee_sharpness), 0.0)


def decode_step_time(
    profile: Profile, batch_size: ArrayLike, context_len: ArrayLike, spec_length: ArrayLike = 0
) -> Array:
    """Seconds for one engine step decoding `batch_size` sequences of `context_len` tokens each.

    With spec_length k > 0 the step drafts k tokens and verifies B * (k + 1) tokens in one
    forward pass, which reads the KV cache once; the engine's per-step overhead is included.
    """
    b = jnp.asarray(batch_size, jnp.float32)
    c = jnp.asarray(context_len, jnp.float32)
    k = jnp.asarray(spec_length, jnp.float32)
    n = b * (k + 1.0)
    verify = forward_time(profile, n, b * c, profile.attn_flops_per_token_context * c * n, n)
    return (verify + k * draft_token_time(profile, b, c) + profile.step_overhead_s).astype(jnp.float32)


def mixed_step_time(
    profile: Profile, batch_size: ArrayLike, context_len: ArrayLike, spec_length: ArrayLike, chunk_tokens: ArrayLike
) -> Array:
    """Seconds for one engine step that decodes `batch_size` sequences of `context_len` tokens and
    prefills a `chunk_tokens`-token prompt chunk (from the prompt's start) in the same forward pass.

    vLLM V1 schedules the running decodes and up to max_num_batched_tokens of prefill chunks in one
    iteration: ONE forward over all the tokens, so the weights are read once for both (measured on
    a real vLLM 0.11 server: a prompt's iteration beside 1-2 decodes took -0.8 +- 0.1 ms and
    0.0 +- 0.4 ms longer than alone, where a prefill pass plus a decode step would add 6.7 ms;
    experiments/crosscheck/README.md, "How real vLLM times a mixed iteration"). With spec_length
    k > 0 the decodes are drafted first and verified with k + 1 tokens each. At chunk_tokens 0 this
    is `decode_step_time`; at batch_size 0, `prefill_time` of the chunk.
    """
    b = jnp.asarray(batch_size, jnp.float32)
    c = jnp.asarray(context_len, jnp.float32)
    k = jnp.asarray(spec_length, jnp.float32)
    chunk = jnp.asarray(chunk_tokens, jnp.float32)
    verify = b * (k + 1.0)
    attn = profile.attn_flops_per_token_context * (c * verify + 0.5 * chunk * chunk)  # causal chunk: half
    lm_head = verify + jnp.where(chunk > 0, 1.0, 0.0)
    forward = forward_time(profile, verify + chunk, b * c + chunk, attn, lm_head)
    draft = jnp.where(b > 0, k * draft_token_time(profile, b, c), 0.0)
    return (forward + draft + profile.step_overhead_s).astype(jnp.float32)


def prefill_time(
    profile: Profile,
    num_tokens: ArrayLike,
    num_sequences: ArrayLike = 1,
    sum_sq_tokens: ArrayLike | None = None,
) -> Array:
    """Seconds for one prefill pass over `num_tokens` prompt tokens; 0 when there are none.

    Args:
      num_tokens: prompt tokens in the pass.
      num_sequences: prompts in the pass (one LM-head position each).
      sum_sq_tokens: sum of squared prompt lengths, for causal attention's 2 * L * d * n^2
        FLOPs; defaults to num_tokens^2 (a single prompt).
    """
    n = jnp.asarray(num_tokens, jnp.float32)
    sq = n * n if sum_sq_tokens is None else jnp.asarray(sum_sq_tokens, jnp.float32)
    attn = 0.5 * profile.attn_flops_per_token_context * sq  # causal: half of 4*L*d*n^2
    t = forward_time(profile, n, n, attn, num_sequences) + profile.step_overhead_s
    return jnp.where(n > 0, t, 0.0).astype(jnp.float32)


# Prefill chunk at which the engine's prefill throughput is estimated for admission [tokens]:
# vLLM V1's default max_num_batched_tokens for the online server.
PREFILL_REF_TOKENS = 2048.0


def prefill_throughput(profile: Profile) -> Array:
    """Prompt tokens per second [tokens/s] of a PREFILL_REF_TOKENS-token prefill pass."""
    return PREFILL_REF_TOKENS / prefill_time(profile, PREFILL_REF_TOKENS)


def kv_capacity_tokens(profile: Profile, kv_budget: ArrayLike) -> Array:
    """KV-cache capacity [tokens]: kv_budget of the HBM left after weights and the reserve."""
    free = jnp.maximum(profile.hbm_bytes - profile.weight_bytes - profile.reserve_bytes, 0.0)
    return (jnp.asarray(kv_budget, jnp.float32) * free / profile.kv_bytes_per_token).astype(jnp.float32)


def kv_transfer_time(profile: Profile, num_tokens: ArrayLike) -> Array:
    """Seconds to move the KV cache of `num_tokens` prompt tokens from the prefill GPU to the
    decode GPU over the node's link (disaggregated serving): tokens * kv_bytes_per_token /
    kv_link_bw. docs/DESIGN.md: a 1 k-token prompt is 131 MB, about 0.4 ms over NVLink."""
    n = jnp.asarray(num_tokens, jnp.float32)
    return (n * profile.kv_bytes_per_token / profile.kv_link_bw).astype(jnp.float32)
