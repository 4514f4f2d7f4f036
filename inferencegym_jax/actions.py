"""The five serving knobs: the structured action, the discrete grid policies use, and checks.

A policy acts with a factored discrete (MultiDiscrete) action: an int32 vector of five grid
indices, one per knob, in the order of `KNOBS`. The grid:

| index | knob           | values                                                  | unit      |
|-------|----------------|---------------------------------------------------------|-----------|
| 0     | kv_budget      | 0.1, 0.2, ..., 1.0 (10)                                 | fraction  |
| 1     | spec_length    | 0, 1, 2, 4, 8 (5)                                       | tokens    |
| 2     | batch_size     | 1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512 (13) | sequences |
| 3     | prefill_disagg | off, on (2)                                             | bool      |
| 4     | quant_tier     | FP16, INT8, INT4 (3)                                    | tier      |

A `ServingAction` gives the same knobs in physical units; `env.step` accepts either. Knobs a
task does not use are masked: replaced by the task's default before the step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import Array

from inferencegym_jax.profiles import QUANT_TIERS, SPEC_LENGTHS

KNOBS: tuple[str, ...] = ("kv_budget", "spec_length", "batch_size", "prefill_disagg", "quant_tier")
KV_BUDGETS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 11))
BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512)
DISAGG: tuple[int, ...] = (0, 1)
TIERS: tuple[int, ...] = tuple(range(len(QUANT_TIERS)))
GRID: tuple[tuple[float, ...], ...] = (KV_BUDGETS, SPEC_LENGTHS, BATCH_SIZES, DISAGG, TIERS)
GRID_SIZES: tuple[int, ...] = tuple(len(g) for g in GRID)
# Allowed physical range of each knob (for clipping and error messages).
KNOB_RANGES: tuple[tuple[float, float], ...] = ((0.1, 1.0), (0, 8), (1, 512), (0, 1), (0, 2))


@struct.dataclass
class ServingAction:
    """The five knobs in physical units; float32 scalars (or batched arrays).

    Attributes:
      kv_budget: fraction of the HBM left after weights and reserve given to the KV cache, [0.1, 1].
      spec_length: speculative draft tokens per step, snapped to {0, 1, 2, 4, 8}.
      batch_size: max concurrent sequences, [1, 512], rounded to an integer.
      prefill_disagg: 1 to run prefill on a second GPU, 0 otherwise.
      quant_tier: 0 FP16, 1 INT8 (FP8 on H100), 2 INT4.
    """

    kv_budget: Array
    spec_length: Array
    batch_size: Array
    prefill_disagg: Array
    quant_tier: Array

    def as_vector(self) -> jax.Array:
        """The knobs stacked in `KNOBS` order, float32 (5,)."""
        return jnp.stack([jnp.asarray(getattr(self, k), jnp.float32) for k in KNOBS], axis=-1)


def action_from_indices(indices: Array) -> ServingAction:
    """The grid values of an index vector (5,); indices must already be in range."""
    indices = jnp.asarray(indices, jnp.int32)
    values = [jnp.asarray(g, jnp.float32)[indices[..., i]] for i, g in enumerate(GRID)]
    return ServingAction(*values)


def indices_from_action(action: ServingAction) -> jax.Array:
    """The nearest grid index of each knob, int32 (5,)."""
    vector = action.as_vector()
    out = [jnp.argmin(jnp.abs(vector[..., i, None] - jnp.asarray(g, jnp.float32)), axis=-1)
           for i, g in enumerate(GRID)]
    return jnp.stack(out, axis=-1).astype(jnp.int32)


def clip_action(action: Any, default: ServingAction, active: tuple[bool, ...]) -> tuple[ServingAction, jax.Array]:
    """Clip, snap and mask an action inside jit.

    Returns the physical action actually applied and a bool (5,) vector that is True where a
    knob was changed: out of range, NaN, off-grid, or set on a knob the task masks (an index
    other than 0, or a value other than the task default).
    """
    mask = jnp.asarray(active)
    if isinstance(action, ServingAction):
        raw = action.as_vector()
        finite = jnp.isfinite(raw)
        lows = jnp.asarray([r[0] for r in KNOB_RANGES], jnp.float32)
        highs = jnp.asarray([r[1] for r in KNOB_RANGES], jnp.float32)
        values = jnp.clip(jnp.where(finite, raw, default.as_vector()), lows, highs)
        snapped = action_from_indices(indices_from_action(ServingAction(*values))).as_vector()
        # kv_budget stays continuous; the others are snapped to their grid.
        applied = values.at[1:].set(snapped[1:])
        changed = ~finite | jnp.where(mask, jnp.abs(applied - raw) > 1e-6, jnp.abs(raw - default.as_vector()) > 1e-6)
    else:
        raw = jnp.asarray(action, jnp.int32)
        idx = jnp.clip(raw, 0, jnp.asarray(GRID_SIZES, jnp.int32) - 1)
        applied = action_from_indices(idx).as_vector()
        changed = jnp.where(mask, idx != raw, raw != 0)
    applied = jnp.where(mask, applied, default.as_vector())
    return ServingAction(*[applied[i] for i in range(len(KNOBS))]), changed
