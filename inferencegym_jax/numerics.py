"""Guarded arithmetic shared by the simulator's modules.

The fluid model carries expected counts: a queue bin, a pool of sequences or a prefill pass can
be empty or hold a vanishing amount. Ratios of such quantities are defined as 0 below `EPS`.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

# Smallest amount treated as present, in the quantity's own unit (requests, sequences, tokens,
# seconds): 1e-6 of a request is far below anything that changes a metric, and far above the
# float32 rounding of the counts involved (< 1e-3 requests at 1e4 requests).
EPS = 1e-6


def safe_div(a: Array, b: Array) -> Array:
    """a / b where b > EPS, else 0 (no NaN or inf for an empty denominator)."""
    return jnp.where(b > EPS, a / jnp.where(b > EPS, b, 1.0), 0.0)
