"""The mixed engine's iterations: decode tokens and prefill chunks in one forward pass.

vLLM V1 (and the mixed engine, `serving.mixed`) runs iterations back to back. Each carries one
decode step of every running sequence and, under the token budget `max_batched_tokens`, up to
`chunk = max_batched_tokens - decode tokens` prompt tokens of the waiting requests, in ONE forward
(`perf_model.mixed_step_time`), so the weights are read once for both. An iteration carrying k
prompt tokens takes

    D + g(k) [s]

with D a decode-only step of the pool and g(k) what the k tokens add to it: little while the
GEMMs stay memory-bound (a few hundred tokens beside the decodes), then about c = g(chunk) / chunk
per token, below a lone prefill pass's time per token. A prompt of p tokens needs
n = ceil(p / chunk) iterations; its own service, alone beside the pool, is

    S(p) = n D + (n - 1) g(chunk) + g(p - (n - 1) chunk) + (attention of its later chunks over
           its earlier ones)

and an interval of `serving_s` seconds whose prompts ride in N iterations leaves
(serving_s - N g(P / N)) / D decode steps (`prefill_cost_s`). With a prefill GPU (disaggregation)
the decode GPU runs D-steps only and prompts are served by prefill-only passes: D is then the
scheduler's step overhead and g a lone prefill pass.

The pool is a real-valued expected count B: D is interpolated linearly between an empty engine
(B = 0: D = 0) and one sequence, and taken at B above it; g(k) is `perf_model.mixed_step_time` at
the real-valued B minus D (a lone prefill pass at B = 0).

Performance (XLA:CPU, kept apart from the physics): the chunk table is interpolated with an
unrolled sum over its segments, not a reduction, and the mixed engine's sums over length nodes go
through `xla_ops.sums`: XLA:CPU re-derives a reduction's producers (the nodes' exponentials and
chunk times) in every reduction that reads them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

from inferencegym_jax import perf_model
from inferencegym_jax.numerics import safe_div

# Where g(k) is evaluated, as fractions of the chunk (`chunk_time_s`): dense below ~1/4 of a chunk,
# where g bends (memory- to compute-bound GEMMs), sparse above, where it is nearly linear.
KNOT_FRACTIONS = (1.0 / 32.0, 1.0 / 8.0, 1.0 / 4.0, 1.0 / 2.0, 1.0)


class Iterations(NamedTuple):
    """The iteration-time model of one interval; float32 scalars.

    Attributes:
      step_s: [s] a decode-only step of max(B, 1) sequences (`perf_model.decode_step_time`).
      decode_s: [s] D, a decode-only iteration of the pool (0 on an empty engine).
      token_s: [s/token] c, the marginal time of one prompt token in an iteration.
      chunk_tokens: [tokens] prompt tokens one iteration may carry (>= 1).
      pair_s: [s] attention time of one (query, key) pair of a prompt with itself, compute-bound.
      prefill_share: fraction of engine time that full iterations give to prompts,
        chunk c / (D + chunk c), in (0, 1].
      pool: [sequences] the decoding pool B (real-valued, >= 0).
      context: [tokens] its mean context.
      spec_length: speculative tokens per decode step.
      disaggregated: bool, prompts are served by a prefill GPU.
      chunk_knots_s: float32 (1 + len(KNOT_FRACTIONS),) [s] g(k) at k = 1 token and at
        KNOT_FRACTIONS x chunk_tokens (`chunk_s`), the table `chunk_time_s` interpolates.
    """

    step_s: Array
    decode_s: Array
    token_s: Array
    chunk_tokens: Array
    pair_s: Array
    prefill_share: Array
    pool: Array
    context: Array
    spec_length: Array
    disaggregated: Array
    chunk_knots_s: Array

    @property
    def prefill_rate(self) -> Array:
        """[tokens/s] prompt tokens per second of engine time with every iteration full."""
        return self.prefill_share / self.token_s


def iterations(
    profile: perf_model.Profile, pool: Array, context: Array, spec_length: Array, max_batched_tokens: Array,
    disaggregated: Array,
) -> Iterations:
    """The iteration model for a decoding pool of `pool` sequences [sequences, real] of mean
    context `context` [tokens] at speculative length `spec_length` (module docstring)."""
    present = jnp.clip(pool, 0.0, 1.0)
    b = jnp.maximum(pool, 1.0)
    alone_chunk = jnp.maximum(max_batched_tokens, 1.0)
    mixed_chunk = jnp.maximum(max_batched_tokens - b * (spec_length + 1.0), 1.0)
    chunk = jnp.where(disaggregated, alone_chunk, present * mixed_chunk + (1.0 - present) * alone_chunk)
    step = perf_model.decode_step_time(profile, b, context, spec_length)
    decode_s = jnp.where(disaggregated, profile.step_overhead_s, present * step)
    pair_s = profile.attn_flops_per_token_context / profile.bf16_flops
    zero = jnp.zeros((), jnp.float32)
    it = Iterations(step, decode_s, zero, chunk, pair_s, zero, pool, context, spec_length, disaggregated,
                    jnp.zeros(1 + len(KNOT_FRACTIONS), jnp.float32))
    knots = chunk_s(profile, it, jnp.concatenate([jnp.ones(1, jnp.float32),
                                                  chunk * jnp.asarray(KNOT_FRACTIONS, jnp.float32)]))
    token_s = knots[-1] / chunk  # a full chunk's time per token
    share = safe_div(chunk * token_s, decode_s + chunk * token_s)
    return it._replace(token_s=token_s, prefill_share=share, chunk_knots_s=knots)


def chunks(it: Iterations, prompt: Array) -> Array:
    """Iterations a prompt of `prompt` tokens needs (ceil(prompt / chunk), >= 1); any shape."""
    return jnp.maximum(jnp.ceil(prompt / it.chunk_tokens), 1.0)


def later_chunk_pairs(it: Iterations, prompt: Array, prompt_sq: Array) -> Array:
    """Attention pairs of prompts beyond what their chunks' own causal attention counts [pairs]:
    0.5 (sum p^2 - chunk sum p) for prompts longer than a chunk (exact for a multiple of the chunk,
    0 for prompts within one), from the summed prompt tokens and squares; any shape."""
    return 0.5 * jnp.maximum(prompt_sq - it.chunk_tokens * prompt, 0.0)


def chunk_s(profile: perf_model.Profile, it: Iterations, tokens: Array) -> Array:
    """g(k) [s]: the engine time a chunk of `tokens` prompt tokens adds to an iteration of the pool
    (`perf_model.mixed_step_time` at the pool minus its decode-only step D; at an empty pool a lone
    prefill pass, as mixed_step_time is at batch 0; a lone pass on a prefill GPU); any shape, 0 for
    no tokens. Below a full chunk g is not linear: a few hundred tokens beside a memory-bound decode
    step cost little more than the step."""
    b = jnp.where(it.disaggregated, 0.0, it.pool)
    added = perf_model.mixed_step_time(profile, b, it.context, it.spec_length, tokens) - jnp.where(
        it.disaggregated, 0.0, it.decode_s)
    return jnp.where(tokens > 0, added, 0.0)


def chunk_time_s(it: Iterations, tokens: Array) -> Array:
    """g(k) [s] for any shape of `tokens` >= 0: 0 at no tokens, else piecewise linear through the
    knots, from g(1 token) (a jump on an idle engine: a lone pass reads the weights) to the full
    chunk, extended at the last segment's slope beyond it.

    Performance: a forward time costs ~8 transcendental functions (two smooth maxima); the
    mixed engine needs g at 15 length nodes and at the mean chunk every interval, so it reads them
    off 6 knots instead (dense where g bends, a few hundred tokens beside the decodes turning the
    GEMMs from memory- to compute-bound; tests/test_mixed_engine.py bounds the interpolation's
    error against `chunk_s`)."""
    knots_k: list[Array] = [jnp.zeros(()), *(f * it.chunk_tokens for f in KNOT_FRACTIONS)]
    g = it.chunk_knots_s[0] + jnp.zeros_like(tokens)
    slope = jnp.zeros(())
    for i in range(len(KNOT_FRACTIONS)):  # unrolled: elementwise work, no reduction (module docstring)
        width = knots_k[i + 1] - knots_k[i]
        slope = (it.chunk_knots_s[i + 1] - it.chunk_knots_s[i]) / jnp.maximum(width, 1e-6)
        g = g + slope * jnp.clip(tokens - knots_k[i], 0.0, width)
    g = g + slope * jnp.maximum(tokens - knots_k[-1], 0.0)  # past the full chunk: the last segment's slope
    return jnp.where(tokens > 0, g, 0.0)


def prompt_service_s(it: Iterations, prompt: Array) -> Array:
    """S(p) [s]: the engine time from a prompt's first chunk to its first token when it is the only
    prompt in the engine: ceil(p / chunk) iterations, all but the last full (module docstring),
    plus its later chunks' attention over its earlier ones; any shape."""
    n = chunks(it, prompt)
    last = prompt - (n - 1.0) * it.chunk_tokens
    full = it.chunk_knots_s[-1]
    return n * it.decode_s + (n - 1.0) * full + chunk_time_s(it, last) + it.pair_s * later_chunk_pairs(
        it, prompt, prompt * prompt)


def prefill_cost_s(it: Iterations, tokens: Array, sum_sq: Array, carrying: Array) -> Array:
    """[s] engine time that prefilling `tokens` prompt tokens (squares summing to `sum_sq`) in
    `carrying` iterations adds to the interval: their chunks at the mean size (at most a full
    chunk), plus the later chunks' attention."""
    n = jnp.maximum(carrying, tokens / it.chunk_tokens)
    return n * chunk_time_s(it, safe_div(tokens, n)) + it.pair_s * later_chunk_pairs(it, tokens, sum_sq)
