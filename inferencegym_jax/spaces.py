"""Observation and action spaces (the gymnax space API, without depending on gymnax)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class Space:
    """A set of values with `sample(key)` and `contains(x)`."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: jax.Array) -> Any:
        raise NotImplementedError

    def contains(self, x: Any) -> bool:
        raise NotImplementedError


class Discrete(Space):
    """Integers 0 .. n-1."""

    def __init__(self, n: int):
        self.n = int(n)
        self.shape = ()
        self.dtype = jnp.int32

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (), 0, self.n, dtype=jnp.int32)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return x.shape == () and np.issubdtype(x.dtype, np.integer) and 0 <= int(x) < self.n


class MultiDiscrete(Space):
    """A vector of integers, entry i in 0 .. nvec[i]-1 (a factored discrete action)."""

    def __init__(self, nvec: tuple[int, ...], names: tuple[str, ...] | None = None):
        self.nvec = tuple(int(n) for n in nvec)
        self.names = names or tuple(str(i) for i in range(len(nvec)))
        self.shape = (len(self.nvec),)
        self.dtype = jnp.int32

    def sample(self, key: jax.Array) -> jax.Array:
        u = jax.random.uniform(key, self.shape)
        return jnp.floor(u * jnp.asarray(self.nvec, jnp.float32)).astype(jnp.int32)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return (
            x.shape == self.shape
            and np.issubdtype(x.dtype, np.integer)
            and bool(np.all((x >= 0) & (x < np.asarray(self.nvec))))
        )


class Box(Space):
    """Real vectors with elementwise bounds."""

    def __init__(self, low: Any, high: Any, shape: tuple[int, ...], dtype: Any = jnp.float32):
        self.low = np.broadcast_to(np.asarray(low, np.float32), shape)
        self.high = np.broadcast_to(np.asarray(high, np.float32), shape)
        self.shape = tuple(shape)
        self.dtype = dtype

    def sample(self, key: jax.Array) -> jax.Array:
        low = jnp.asarray(np.where(np.isfinite(self.low), self.low, -1.0))
        high = jnp.asarray(np.where(np.isfinite(self.high), self.high, 1.0))
        return jax.random.uniform(key, self.shape, self.dtype, low, high)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all((x >= self.low) & (x <= self.high)))


class Dict(Space):
    """A mapping of named spaces (for structured observations)."""

    def __init__(self, spaces: Mapping[str, Space]):
        self.spaces = dict(spaces)
        self.shape = ()
        self.dtype = None

    def sample(self, key: jax.Array) -> dict[str, Any]:
        keys = jax.random.split(key, len(self.spaces))
        return {name: space.sample(k) for (name, space), k in zip(self.spaces.items(), keys)}

    def contains(self, x: Any) -> bool:
        return all(space.contains(x[name]) for name, space in self.spaces.items())
