"""Actor and critic MLPs (flax linen) and the factored categorical policy over a MultiDiscrete action.

The action is a vector of K grid indices, knob k taking nvec[k] values. A masked knob (nvec 1)
has one choice: probability 1 on index 0, log-probability 0, entropy 0, so it would contribute
nothing to the loss; the network leaves it out altogether (`ActionLayout.active`), which makes
acting and the update ~2-4x cheaper on tasks with masked knobs, and `ActionLayout.to_env`
puts index 0 back. The actor outputs one row of logits per active knob, padded to the largest
active nvec; padding entries are set to a large negative constant, so they have probability 0
(exactly, in float32) and receive no gradient. The policy is `distrax.Independent` over the
knob axis, so `log_prob` and `entropy` sum over knobs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# Logit of impossible grid entries: exp(-1e9 - max) is exactly 0 in float32, and unlike -inf it
# keeps log_softmax and entropy finite.
MASKED_LOGIT = -1e9


@dataclasses.dataclass(frozen=True)
class ActionLayout:
    """Which knobs of a MultiDiscrete action the policy chooses.

    Attributes:
      nvec: choices per knob, all K knobs.
      active: indices of the knobs with more than one choice (K_a of them).
      width: logits per active knob, max nvec over active knobs.
    """

    nvec: tuple[int, ...]

    def __post_init__(self) -> None:
        if not any(n > 1 for n in self.nvec):
            raise ValueError(f"action space nvec={self.nvec} has no knob with more than one choice")

    @property
    def active(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.nvec) if n > 1)

    @property
    def width(self) -> int:
        return max(self.nvec)

    def valid(self) -> np.ndarray:
        """bool (K_a, width): True where a grid entry exists."""
        sizes = np.asarray([self.nvec[i] for i in self.active])
        return np.arange(self.width)[None, :] < sizes[:, None]

    def initial_logits(self, default: np.ndarray, logit: float) -> tuple[float, ...] | None:
        """Flat (K_a * width,) output bias that puts `logit` on each active knob's default index."""
        if logit == 0.0:
            return None
        bias = np.zeros((len(self.active), self.width), np.float32)
        bias[np.arange(len(self.active)), np.asarray(default)[list(self.active)]] = logit
        return tuple(float(b) for b in bias.ravel())

    def to_env(self, action: jax.Array) -> jax.Array:
        """int32 (..., K_a) choices of the active knobs -> int32 (..., K), index 0 elsewhere."""
        full = jnp.zeros((*action.shape[:-1], len(self.nvec)), jnp.int32)
        return full.at[..., np.asarray(self.active)].set(action.astype(jnp.int32))


def _orthonormal_columns(a: jax.Array) -> jax.Array:
    """Q of a = QR with diag(R) >= 0, for a float (m, n) with m >= n; float (m, n).

    Householder reflections in plain XLA ops. jaxlib's LAPACK QR (what `jnp.linalg.qr` and flax's
    `orthogonal` call on CPU) splits a batch of matrices over XLA:CPU's intra-op thread pool from
    inside a pool thread and blocks until the pieces finish; under `jax.vmap`, a few such QRs
    scheduled at once occupy every pool thread and the program never finishes (jaxlib 0.10.2,
    2 cores: `scripts/lapack_qr_deadlock.py` reproduces it). A vmapped `train` (sweeps, seeds)
    initialises its networks this way, so the initialiser must not call LAPACK.
    """
    m, n = a.shape
    rows = jnp.arange(m)

    def reflect(j: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        r, reflectors = carry
        x = jnp.where(rows >= j, r[:, j], 0.0)
        # v = x + sign(x_j) |x| e_j: the reflection H = I - 2 v v^T / |v|^2 maps x onto the j-th
        # axis, and adding (not subtracting) the norm avoids cancellation.
        v = x.at[j].add(jnp.where(x[j] >= 0.0, 1.0, -1.0) * jnp.sqrt(jnp.sum(x * x)))
        v = v / jnp.maximum(jnp.sqrt(jnp.sum(v * v)), jnp.finfo(a.dtype).tiny)  # x = 0: H = I
        return r - 2.0 * jnp.outer(v, v @ r), reflectors.at[j].set(v)

    r, reflectors = jax.lax.fori_loop(0, n, reflect, (a, jnp.zeros((n, m), a.dtype)))

    def apply_reflector(i: jax.Array, q: jax.Array) -> jax.Array:  # Q = H_0 H_1 ... H_{n-1} I[:, :n]
        v = reflectors[n - 1 - i]
        return q - 2.0 * jnp.outer(v, v @ q)

    q = jax.lax.fori_loop(0, n, apply_reflector, jnp.eye(m, n, dtype=a.dtype))
    return q * jnp.where(jnp.diagonal(r) >= 0.0, 1.0, -1.0)  # the QR whose R has a positive diagonal


def orthogonal(scale: float) -> Callable[..., jax.Array]:
    """Orthogonal kernel initialiser: flax's `nn.initializers.orthogonal(scale)` for 2-D kernels,
    the same matrix up to float rounding (same normal draw, same sign convention), without LAPACK
    (see `_orthonormal_columns`). Returns init(key, (fan_in, fan_out), dtype) -> (fan_in, fan_out).
    """

    def init(key: jax.Array, shape: Sequence[int], dtype: jnp.dtype = jnp.float32) -> jax.Array:
        if len(shape) != 2:
            raise ValueError(f"orthogonal: kernel shape must be 2-D (fan_in, fan_out), got {tuple(shape)}")
        fan_in, fan_out = shape
        a = jax.random.normal(key, (max(fan_in, fan_out), min(fan_in, fan_out)), dtype)
        q = _orthonormal_columns(a)
        return scale * (q.T if fan_in < fan_out else q)

    return init


class MLP(nn.Module):
    """tanh MLP with orthogonal init (gain sqrt 2) and zero biases; a linear output layer."""

    widths: Sequence[int]
    out: int
    out_gain: float
    out_bias: tuple[float, ...] | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.widths:
            x = nn.Dense(width, kernel_init=orthogonal(np.sqrt(2.0)),
                         bias_init=nn.initializers.zeros)(x)
            x = nn.tanh(x)
        bias = self.out_bias
        bias_init = nn.initializers.zeros if bias is None else (lambda *_: jnp.asarray(bias, jnp.float32))
        return nn.Dense(self.out, kernel_init=orthogonal(self.out_gain), bias_init=bias_init)(x)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs.

    Attributes:
      layout: ActionLayout of the action space.
      actor_widths, critic_widths: hidden widths.
      initial_logits: optional float tuple (K_a * width,), the actor's initial output bias (row
        per active knob); None starts every knob near uniform.

    `__call__(obs)` takes float32 (..., obs_dim) and returns (logits float32 (..., K_a, width)
    of the active knobs with padding masked, value float32 (...)).
    """

    layout: ActionLayout
    actor_widths: Sequence[int]
    critic_widths: Sequence[int]
    initial_logits: tuple[float, ...] | None = None

    def setup(self) -> None:
        k, n = len(self.layout.active), self.layout.width
        # Small output gain: the initial policy is near uniform over each knob's grid (or near
        # softmax(initial_logits)) whatever the observation.
        self.actor = MLP(tuple(self.actor_widths), k * n, out_gain=0.01, out_bias=self.initial_logits)
        self.critic = MLP(tuple(self.critic_widths), 1, out_gain=1.0)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.logits(obs), self.value(obs)

    def logits(self, obs: jax.Array) -> jax.Array:
        raw = self.actor(obs).reshape(*obs.shape[:-1], len(self.layout.active), self.layout.width)
        return jnp.where(self.layout.valid(), raw, MASKED_LOGIT)

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)[..., 0]


def policy_distribution(logits: jax.Array) -> distrax.Distribution:
    """The factored categorical of logits (..., K_a, n): event shape (K_a,), int32 samples."""
    return distrax.Independent(distrax.Categorical(logits=logits, dtype=jnp.int32), reinterpreted_batch_ndims=1)


def sample_actions(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One draw of the factored categorical of logits (..., K, n): int32 (..., K).

    Inverse-CDF sampling with one uniform per knob. It draws the same distribution as
    `policy_distribution(logits).sample`, which uses Gumbel noise, one uniform per grid entry:
    n times the random bits, and random bits dominate the cost of acting on CPU.
    """
    probs = jax.nn.softmax(logits, axis=-1)
    cdf = jnp.cumsum(probs, axis=-1)
    u = jax.random.uniform(key, logits.shape[:-1], jnp.float32) * cdf[..., -1]
    index = jnp.sum((cdf <= u[..., None]).astype(jnp.int32), axis=-1)
    # Masked entries (the tail of each row) have probability exactly 0, so the cdf is flat past
    # the last valid entry and `index` reaches the tail only if u rounds up to the total; the
    # clip to (entries with probability > 0) - 1 rules that out.
    return jnp.minimum(index, jnp.sum((probs > 0).astype(jnp.int32), axis=-1) - 1)
