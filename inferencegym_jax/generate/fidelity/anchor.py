"""The record of one fidelity anchor (a published number against the model's value), the
tolerances, the profile tables the calibration fits, and the kernel-only forward pass that the
kernel-profile anchors time."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from inferencegym_jax import perf_model

# Tolerances, |relative error|: docs/DESIGN.md's kernel anchors, one table point or a derived kernel
# quantity, end-to-end serving numbers, and inputs or fits (met exactly, to float32 rounding).
KERNEL_TOL, KERNEL_POINT_TOL, E2E_TOL, EXACT_TOL = 0.10, 0.15, 0.20, 1e-3
# Vidur tables (file, model) the calibration fits, per GPU; H100 adds LLMServingSim's table.
A100_VIDUR = ("a100_Meta-Llama-3-8B_mlp.csv", "llama-3-8b")
H100_VIDUR = ("h100_Llama-2-7b-hf_mlp.csv", "llama-2-7b")

# Jitted once per argument shape: the report evaluates hundreds of passes.
jit_decode_step_time = jax.jit(perf_model.decode_step_time)
jit_prefill_time = jax.jit(perf_model.prefill_time)


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
    cut = dataclasses.replace(
        profile,
        weight_read_bytes=profile.weight_read_bytes - 2.0 * profile.lm_head_params,
        lm_head_params=zero,
        kv_bytes_per_token=zero,
        attn_flops_per_token_context=zero,
        step_overhead_s=zero,
        draft_params=zero,
    )
    if not norms:
        cut = dataclasses.replace(cut, elementwise_bytes_per_token=zero, fixed_kernel_s=zero)
    return cut


def forward_s(profile: perf_model.Profile, tokens: float) -> float:
    """One forward pass over `tokens` tokens [s]: a decode step of that batch at context 0
    (decode-sized passes) or a prefill of that many tokens; the same kernels either way."""
    n = jnp.float32(tokens)
    if tokens <= 256:
        return float(jit_decode_step_time(profile, n, jnp.float32(0.0)))
    return float(jit_prefill_time(profile, n))
