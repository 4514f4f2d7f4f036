"""Random draws with fixed shapes and no loops: uniforms, normals and Poisson counts.

Everything here is a pure function of a key or of uniforms, so that one env step makes all of
its draws from a single PRNG call and everything after it is deterministic given them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.special import ndtri

from inferencegym_jax import xla_ops

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# Largest seed: jax.random.key keeps 32 bits of a seed (with 64-bit types off), so larger
# seeds would collide. (cli.common has its own copy: `inferencegym --help` must not import JAX.)
MAX_SEED = 2**32 - 1


def _threefry2x32(k0: Array, k1: Array, x0: Array, x1: Array) -> tuple[Array, Array]:
    """The Threefry-2x32 block cipher (20 rounds; Salmon et al., SC 2011), uint32, unrolled."""
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << jnp.uint32(r)) | (x1 >> jnp.uint32(32 - r))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x0, x1


def check_seed(seed: Any, name: str = "seed") -> int:
    """`seed` as an int; ValueError naming `name` unless an integer in [0, MAX_SEED]."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"{name}={seed!r}: must be an integer in [0, {MAX_SEED}] (jax.random.key keeps 32 bits)")
    return int(seed)


def as_key(key: Any) -> jax.Array:
    """A typed PRNG key from a `jax.random.key(seed)` or a legacy `jax.random.PRNGKey(seed)`.

    A legacy key (uint32 (2,)) becomes the typed threefry key with the same bits, so the two
    spellings of a seed give the same draws. Shapes and dtypes are static, so this runs at
    trace time too: under `vmap` each key is checked unbatched.

    Raises:
      ValueError: anything else (an int, None, a float or int32 array, a uint32 array of
        another shape, or a batch of keys passed without `vmap`).
    """
    accepted = "a jax.random.key(seed) or a legacy jax.random.PRNGKey(seed) (uint32, shape (2,)), unbatched"
    dtype = getattr(key, "dtype", None)
    shape = getattr(key, "shape", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise ValueError(f"key must be {accepted}; got a batch of keys of shape {shape}: vmap over them")
        return key
    if dtype == jnp.uint32 and shape == (2,):
        return jax.random.wrap_key_data(key)
    if dtype == jnp.uint32 and shape is not None and len(shape) > 1 and shape[-1] == 2:
        raise ValueError(f"key must be {accepted}; got a batch of legacy keys of shape {shape}: vmap over them")
    what = f"{dtype} array of shape {shape}" if dtype is not None else repr(key)
    raise ValueError(f"key must be {accepted}; got {what}")


def uniforms(key: jax.Array, n: int) -> Array:
    """`n` uniforms in [0, 1), float32 (n,), from one key (see `as_key`), with no loop.

    For a threefry key these are bit for bit `jax.random.uniform(key, (n,))` under JAX's
    original counter layout (jax_threefry_partitionable=False): n/2 Threefry blocks whose two
    output words are both used. JAX lowers Threefry on CPU to a 5-iteration while loop, one
    per 32-bit word in the partitionable layout; here the 20 rounds are unrolled, so XLA fuses
    them with their consumers. Other key types go through `jax.random.uniform`.
    """
    key = as_key(key)
    if "threefry" not in str(jax.random.key_impl(key)):
        return jax.random.uniform(key, (n,))
    k = jax.random.key_data(key)
    half = (n + 1) // 2
    counts = jnp.concatenate([jnp.arange(n, dtype=jnp.uint32), jnp.zeros(2 * half - n, jnp.uint32)])
    y0, y1 = _threefry2x32(k[0], k[1], counts[:half], counts[half:])
    bits = jnp.concatenate([y0, y1])[:n]
    one = jnp.uint32(0x3F800000)  # exponent bits of 1.0f: (bits >> 9) | one is in [1, 2)
    return jax.lax.bitcast_convert_type((bits >> jnp.uint32(9)) | one, jnp.float32) - 1.0


def normals(u: Array) -> Array:
    """Standard normals from uniforms in [0, 1), as `jax.random.normal` makes them:
    sqrt(2) erfinv(2u - 1), with 2u - 1 kept above -1."""
    v = jnp.maximum(2.0 * u - 1.0, jnp.nextafter(jnp.float32(-1.0), jnp.float32(0.0)))
    return jnp.sqrt(jnp.float32(2.0)) * jax.lax.erf_inv(v)


# Poisson draws are exact (inversion of the CDF) up to this mean [requests per class and
# interval]; every shipped task stays below it (the largest, task 2's burst, is 20).
POISSON_EXACT_MAX = 32.0
# Terms of the inverted CDF: P(X >= 72) < 1e-9 at the largest exact mean, 32.
POISSON_TERMS = 72


def poisson_cdf(lam: Array) -> Array:
    """F(k) = P(X <= k) of Poisson(lam) for k = 0 .. POISSON_TERMS - 1; shape lam.shape + (POISSON_TERMS,).

    From the pmf recursion p_k = p_(k-1) * lam / k; a mean above POISSON_EXACT_MAX is replaced
    by 0 (`poisson_quantile` does not use the table there).
    """
    lam = jnp.asarray(lam, jnp.float32)
    lam = jnp.where(lam <= POISSON_EXACT_MAX, jnp.maximum(lam, 0.0), 0.0)
    p0 = jnp.exp(-lam)

    def next_term(carry: tuple[Array, Array], inverse_k: Array) -> tuple[tuple[Array, Array], Array]:
        p, cdf = carry
        p = p * (lam * inverse_k)
        return (p, cdf + p), cdf + p

    # Performance: a scan, not a Python loop. XLA fuses an unrolled recursion into every column
    # of the table, recomputing the prefix products per column (K^2 / 2 multiplies): 3x the
    # compiled size of an env step and ~30 % of its run time at 8,192 envs.
    inverse_k = jnp.asarray([1.0 / k for k in range(1, POISSON_TERMS)], jnp.float32)
    _, rest = jax.lax.scan(next_term, (p0, p0), inverse_k)
    return jnp.concatenate([p0[..., None], jnp.moveaxis(rest, 0, -1)], axis=-1)


def poisson_quantile(u: Array, lam: Array, cdf: Array) -> Array:
    """A Poisson(lam) count [float32, integer-valued] from a uniform u in [0, 1), elementwise.

    `cdf` is `poisson_cdf(lam)` (or a broadcastable table of it). Fixed cost, no loop: for
    lam <= POISSON_EXACT_MAX the count is the exact inverse CDF, the number of k with
    F(k) < u * F(K - 1) (u scaled by the summed mass, so that float32 rounding cannot push u past
    the last term). Above it, the Cornish-Fisher expansion of the quantile to third order,
    floor(lam + sqrt(lam) z + (z^2 - 1) / 6 + (z^3 - 7 z) / (72 sqrt(lam)) + 1/2), z = ndtri(u):
    at lam = 32 it differs from the exact quantile for 0.65 % of u (an upper bound on the total
    variation distance), its mean is off by < 1e-5 and its variance by < 0.1 %; both shrink as
    lam grows (tests/test_reference.py checks both regimes against the exact pmf).
    """
    lam = jnp.maximum(jnp.asarray(lam, jnp.float32), 0.0)
    target = u * cdf[..., -1]
    count = xla_ops.count_below(cdf, target)
    z = ndtri(jnp.clip(u, 1e-12, 1.0 - 1e-7))
    root = jnp.sqrt(jnp.maximum(lam, 1.0))
    approx = jnp.floor(lam + root * z + (z * z - 1.0) / 6.0 + (z * z * z - 7.0 * z) / (72.0 * root) + 0.5)
    return jnp.where(lam <= POISSON_EXACT_MAX, count.astype(jnp.float32), jnp.maximum(approx, 0.0))


def poisson_from_uniform(u: Array, lam: Array) -> Array:
    """A Poisson(lam) count from one uniform u in [0, 1): `poisson_quantile` with its own table."""
    return poisson_quantile(u, lam, poisson_cdf(lam))
