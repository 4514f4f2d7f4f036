"""The roofline in NumPy (perf_model), for one precision tier per env.

A forward pass over n tokens that reads kv cached tokens is three kernels in a row:

    t = smoothmax_p(weight_read_bytes / mem_bw, GEMM FLOPs / FLOP rates)        the GEMMs
      + smoothmax_p(kv * kv_bytes_per_token / mem_bw, attention FLOPs / bf16_flops)  attention
      + n * elementwise_bytes_per_token / mem_bw + fixed_kernel_s               the small kernels
    smoothmax_p(a, b) = (a^p + b^p)^(1/p)

Every number comes from the `Profile` of the task's params; `select_profile` gives each env its
tier's profile, leaves (N,) (the tokens-per-step table (N, 5)).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from inferencegym_jax.testing.reference.constants import F32, MAX_TIER, PREFILL_REF_TOKENS, SPEC_TABLE_LENGTHS

Profile = Any  # perf_model.Profile holding NumPy leaves


def select_profile(profiles: Profile, tier: np.ndarray) -> Profile:
    """Each env's profile from the (3,)-stacked tiers (serving.types.select_profile); tier (N,)."""
    index = np.clip(np.asarray(tier).astype(np.int32), 0, MAX_TIER)
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[index], profiles)


def smooth_max(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """(a^p + b^p)^(1/p) for a, b >= 0 (perf_model._smooth_max)."""
    return (a**p + b**p) ** (F32(1.0) / p)


def forward_time(p: Profile, num_tokens: Any, kv_tokens_read: Any, attn_flops: Any, lm_head_tokens: Any) -> np.ndarray:
    """Kernel time [s] of one forward pass (perf_model.forward_time; module docstring)."""
    gemm_memory = p.weight_read_bytes / p.mem_bw
    gemm_compute = (2.0 * p.linear_params * num_tokens / p.linear_flops
                    + 2.0 * p.lm_head_params * lm_head_tokens / p.bf16_flops)
    attn_memory = kv_tokens_read * p.kv_bytes_per_token / p.mem_bw
    attn_compute = attn_flops / p.bf16_flops
    elementwise = num_tokens * p.elementwise_bytes_per_token / p.mem_bw + p.fixed_kernel_s
    k = p.knee_sharpness
    return smooth_max(gemm_memory, gemm_compute, k) + smooth_max(attn_memory, attn_compute, k) + elementwise


def tokens_per_step(p: Profile, spec_length: np.ndarray) -> np.ndarray:
    """Tokens emitted per sequence per engine step (perf_model.tokens_per_step): the profile's
    (N, 5) table interpolated linearly between the draft lengths SPEC_TABLE_LENGTHS, held flat
    outside them."""
    x, table = SPEC_TABLE_LENGTHS, p.spec_tokens_per_step
    k = np.clip(spec_length, x[0], x[-1])
    right = np.clip(np.searchsorted(x, k, side="right"), 1, len(x) - 1)  # the segment [x[right-1], x[right]]
    rows = np.arange(table.shape[0])
    f_left, f_right = table[rows, right - 1], table[rows, right]
    t = (k - x[right - 1]) / (x[right] - x[right - 1])
    return (f_left + t * (f_right - f_left)).astype(F32)


def draft_token_time(p: Profile, batch: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Time [s] to draft one speculative token for the batch (perf_model.draft_token_time); 0
    for a draft method without a draft model (n-gram)."""
    memory = (2.0 * p.draft_params + p.draft_layer_fraction * batch * context * p.kv_bytes_per_token) / p.mem_bw
    compute = 2.0 * p.draft_params * batch / p.bf16_flops
    return np.where(p.draft_params > 0, smooth_max(memory, compute, p.knee_sharpness), F32(0.0))


def decode_step_time(p: Profile, batch: np.ndarray, context: np.ndarray, spec_length: np.ndarray) -> np.ndarray:
    """One engine step [s] decoding `batch` sequences of `context` tokens (perf_model.decode_step_time):
    k draft tokens, then a verify pass over batch * (k + 1) tokens, plus the step overhead."""
    n = batch * (spec_length + 1.0)
    verify = forward_time(p, n, batch * context, p.attn_flops_per_token_context * context * n, n)
    return (verify + spec_length * draft_token_time(p, batch, context) + p.step_overhead_s).astype(F32)


def mixed_step_time(p: Profile, batch: Any, context: Any, spec_length: Any, chunk: Any) -> np.ndarray:
    """One engine iteration [s] decoding `batch` sequences of `context` tokens and prefilling a
    `chunk`-token prompt chunk in the same forward pass (perf_model.mixed_step_time): the verify
    tokens and the chunk share the GEMMs; the chunk's causal attention over itself is half of
    attn_flops_per_token_context per token pair; the drafts only when sequences decode."""
    verify = batch * (spec_length + 1.0)
    attention = p.attn_flops_per_token_context * (context * verify + 0.5 * chunk * chunk)
    lm_head = verify + np.where(chunk > 0, F32(1.0), F32(0.0))
    forward = forward_time(p, verify + chunk, batch * context + chunk, attention, lm_head)
    draft = np.where(batch > 0, spec_length * draft_token_time(p, batch, context), F32(0.0))
    return (forward + draft + p.step_overhead_s).astype(F32)


def prefill_time(p: Profile, num_tokens: Any, num_sequences: Any, sum_sq_tokens: Any) -> np.ndarray:
    """One prefill pass [s] over `num_tokens` prompt tokens of `num_sequences` prompts whose
    squared lengths sum to `sum_sq_tokens` (perf_model.prefill_time); 0 without tokens.
    Causal attention costs half of attn_flops_per_token_context per token pair."""
    attention = 0.5 * p.attn_flops_per_token_context * sum_sq_tokens
    t = forward_time(p, num_tokens, num_tokens, attention, num_sequences) + p.step_overhead_s
    return np.where(num_tokens > 0, t, F32(0.0)).astype(F32)


def prefill_throughput(p: Profile) -> np.ndarray:
    """Prompt tokens per second [tokens/s] of a PREFILL_REF_TOKENS-token single-prompt pass
    (perf_model.prefill_throughput)."""
    n = PREFILL_REF_TOKENS
    return (n / prefill_time(p, n, F32(1.0), n * n)).astype(F32)


def kv_capacity_tokens(p: Profile, kv_budget: np.ndarray) -> np.ndarray:
    """KV capacity [tokens]: kv_budget of the HBM left after weights and reserve
    (perf_model.kv_capacity_tokens)."""
    free_bytes = np.maximum(p.hbm_bytes - p.weight_bytes - p.reserve_bytes, F32(0.0))
    return (kv_budget * free_bytes / p.kv_bytes_per_token).astype(F32)
