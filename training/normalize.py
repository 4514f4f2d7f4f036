"""Running mean and variance (parallel Welford / Chan et al.), for observation and reward scaling.

The statistics live in the train state as a pytree, are updated inside jit from whole batches
and are frozen (simply not updated) at evaluation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

# Added to the variance before the square root; a constant feature normalises to ~0.
VAR_EPS = 1e-8
# Normalised observations are clipped to +-OBS_CLIP standard deviations.
OBS_CLIP = 10.0


@struct.dataclass
class RunningStats:
    """Mean and variance of a stream of vectors.

    Attributes:
      mean: float32 (D,) (or () for scalars).
      var: float32, same shape, population variance.
      count: float32 (), number of samples seen (starts at a tiny epsilon, not 0).
    """

    mean: Any
    var: Any
    count: Any

    @classmethod
    def create(cls, shape: tuple[int, ...] = ()) -> RunningStats:
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.float32(1e-4))

    @classmethod
    def of(cls, batch: jax.Array, shape: tuple[int, ...]) -> RunningStats:
        """The statistics of one batch whose leading axes are samples (trailing shape `shape`)."""
        x = batch.reshape(-1, *shape).astype(jnp.float32)
        return cls(jnp.mean(x, axis=0), jnp.var(x, axis=0), jnp.float32(x.shape[0]))

    def merge(self, other: RunningStats) -> RunningStats:
        """The statistics of both streams together (Chan et al.'s parallel update)."""
        total = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / total
        m2 = self.var * self.count + other.var * other.count + jnp.square(delta) * self.count * other.count / total
        return RunningStats(mean, m2 / total, total)

    def update(self, batch: jax.Array) -> RunningStats:
        """Fold in a batch whose leading axes are samples (trailing shape = mean's shape)."""
        return self.merge(RunningStats.of(batch, self.mean.shape))

    @property
    def std(self) -> jax.Array:
        return jnp.sqrt(self.var + VAR_EPS)

    def normalize(self, x: jax.Array, clip: float = OBS_CLIP) -> jax.Array:
        return jnp.clip((x - self.mean) / self.std, -clip, clip)
