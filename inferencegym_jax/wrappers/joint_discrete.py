"""JointDiscreteActionWrapper: every combination of the active knobs' choices as one `Discrete(n)`.

    env = JointDiscreteActionWrapper(ig.make("InferenceGym-Task1-v0")[0])
    env.action_space(params).n                   # 130: kv_budget (10) x batch_size (13)
    obs, state, reward, terminated, truncated, info = env.step(key, state, jnp.int32(57), params)

For algorithms that support only a single categorical action (DQN, PureJaxRL's `ppo.py`).
The wrapped env has a `MultiDiscrete(nvec)` action space (the serving env, or a knob-action
wrapper); action a in [0, prod(nvec)) is the mixed-radix number of that env's action vector in
C order, the last knob varying fastest (`np.ravel_multi_index` / `np.unravel_index`). Masked
knobs have nvec 1, so they add no factor and always get 0. Outside jit an action that is not an
integer scalar in range raises ValueError; inside jit it is clipped to [0, n - 1] and
`info["clipped"]` flags every active knob of a clipped action.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import spaces, validation
from inferencegym_jax.wrappers.base import StepResult, Wrapper, flag_clipped


class JointDiscreteActionWrapper(Wrapper):
    """Actions are int32 scalars in [0, n), n the product of the wrapped env's action nvec."""

    def _nvec(self, params: Any) -> tuple[int, ...]:
        return self.env.action_space(params).nvec

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(np.prod(self._nvec(params))))

    def grid_indices(self, action: Any, params: Any = None) -> jax.Array:
        """int32 (..., len(nvec)): the wrapped env's action vector of joint action(s) (...,), clipped
        to the space first."""
        nvec = self._nvec(params)
        rest = jnp.clip(jnp.asarray(action, jnp.int32), 0, int(np.prod(nvec)) - 1)
        digits = []
        for n in reversed(nvec):
            digits.append(rest % n)
            rest = rest // n
        return jnp.stack(digits[::-1], axis=-1).astype(jnp.int32)

    def joint_index(self, indices: Any, params: Any = None) -> jax.Array:
        """int32 (...,): the joint action of the wrapped env's action vector(s) (..., len(nvec))."""
        strides = np.cumprod((1, *self._nvec(params)[:0:-1]))[::-1]
        return jnp.sum(jnp.asarray(indices, jnp.int32) * jnp.asarray(strides, jnp.int32), axis=-1)

    def _base(self, action: Any, params: Any) -> tuple[jax.Array, jax.Array]:
        n = self.action_space(params).n
        _check_joint_action(action, n)
        raw = jnp.asarray(action, jnp.int32)
        active = np.asarray(self._nvec(params)) > 1
        return self.grid_indices(raw, params), (raw != jnp.clip(raw, 0, n - 1)) & active

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        base, clipped = self._base(action, params)
        return flag_clipped(self.env.step(key, state, base, params), clipped)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepResult:
        base, clipped = self._base(action, params)
        return flag_clipped(self.env.step_env(key, state, base, params), clipped)

    def inner_policy(self, policy: Any) -> Any:
        """`policy` of joint actions as a policy of the wrapped env's action vectors."""

        def act(key: jax.Array, obs: Any, params: Any) -> jax.Array:
            return self.grid_indices(policy(key, obs, params), params)

        return act


def _check_joint_action(action: Any, n: int) -> None:
    """Host-side check: an integer scalar always, in [0, n - 1] when concrete."""
    shape = jnp.shape(action)
    dtype = jnp.result_type(action) if hasattr(action, "dtype") else np.asarray(action).dtype
    if shape != () or not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(f"joint discrete action must be an integer scalar in [0, {n - 1}], got shape {shape} "
                         f"dtype {dtype}")
    if validation.is_concrete(action) and not 0 <= int(action) < n:
        raise ValueError(f"joint discrete action = {int(action)} is outside its range [0, {n - 1}]")
