"""The one episode loop (`evaluate.play_episode`) plays policies and stateful controllers
(`protocols.Controller`) with the same keys; the MPC's settings are one frozen, hashable config."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate
from inferencegym_jax.control import mpc, switch_rule
from inferencegym_jax.protocols import Seen, StepOutput

TASK = "InferenceGym-Task2-v1"
STEPS = 6


@pytest.fixture(scope="module")
def task():
    return ig.make(TASK, max_steps=STEPS)


@struct.dataclass
class Tally:
    """A controller that plays `action` and remembers (its init key's data, the policy keys it was
    given, the rewards and intervals it was told of)."""

    action: jax.Array

    def init(self, key: jax.Array, seen: Seen, params) -> dict:
        return {"key": jax.random.key_data(key), "keys": jnp.zeros((STEPS, 2), jnp.uint32),
                "reward": jnp.float32(0.0), "t": jnp.int32(-1), "seen_t": seen.t}

    def act(self, memory: dict, key: jax.Array, seen: Seen, params):
        keys = memory["keys"].at[seen.t].set(jax.random.key_data(key))
        return self.action, {**memory, "keys": keys}

    def update(self, memory: dict, step: StepOutput, params) -> dict:
        return {**memory, "reward": memory["reward"] + step.reward, "t": step.t}


def test_a_controller_is_played_with_the_keys_every_policy_gets(task):
    env, params = task
    best = jnp.asarray(mpc.candidate_actions(env, params, TASK)[0])
    key = evaluate.episode_keys(evaluate.evaluation_key(1), 0, 1)[0]

    def memory(seen, memory, step):
        return memory

    last, memories, _ = evaluate.play_episode(env, params, Tally(best), key, STEPS, memory)
    traj = evaluate.run_episode(env, params, baselines.fixed_policy(best), key, STEPS)
    played = evaluate.run_episode(env, params, Tally(best), key, STEPS)
    jax.tree_util.tree_map(np.testing.assert_array_equal, played, traj)  # the same program but for the memory
    _, _, k_policy = evaluate.stream_episode_keys(evaluate.evaluation_key(1), 0)
    want = jax.random.key_data(jax.vmap(lambda t: jax.random.fold_in(k_policy, t))(jnp.arange(STEPS)))
    np.testing.assert_array_equal(np.asarray(memories["keys"][-1]), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(memories["key"][0]), np.asarray(jax.random.key_data(key)))
    # update saw every step before the next act; the memory after the last act has t-1's update
    np.testing.assert_array_equal(np.asarray(memories["t"]), np.arange(-1, STEPS - 1))
    np.testing.assert_allclose(float(memories["reward"][-1] + traj.reward[-1]), float(jnp.sum(traj.reward)),
                               rtol=1e-6)
    assert int(last.t) == STEPS and int(memories["seen_t"][0]) == 0


def test_a_stateless_policy_becomes_a_controller_with_no_memory(task):
    env, params = task
    policy = baselines.best_static_policy(TASK)
    ctrl = evaluate.as_controller(policy)
    assert evaluate.is_controller(ctrl) and not evaluate.is_controller(policy)
    assert evaluate.as_controller(ctrl) is ctrl
    rule = switch_rule.make_rule(np.zeros(5), np.ones(5), 1.0, 0.5, 3)
    assert evaluate.is_controller(rule) and evaluate.as_controller(rule) is rule
    assert evaluate.is_controller(mpc.controller(env, params, TASK, mpc.MPCConfig(horizon=2, samples=1)))


def test_the_mpc_config_is_frozen_hashable_and_checked():
    a, b = mpc.MPCConfig(horizon=3, samples=2), mpc.MPCConfig(horizon=3, samples=2, margin=0)
    assert a == b and hash(a) == hash(b) and isinstance(b.margin, float)
    assert mpc.MPCConfig(clairvoyant=True, samples=5).futures == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.horizon = 4  # type: ignore[misc]
    for field, value in (("horizon", 0), ("samples", 0), ("replan_every", 0), ("objective", "score"),
                         ("traffic_state", "exact"), ("trace_forecast", "weather"), ("analog_window", 0),
                         ("margin", -1.0), ("margin", float("nan")), ("margin", float("inf"))):
        with pytest.raises(ValueError, match=f"{field}={value!r}" if isinstance(value, str) else f"{field}={value}"):
            mpc.MPCConfig(**{field: value})
