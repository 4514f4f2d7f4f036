"""The server's batched pool against the env itself: a session is the documented episode of its
seed, bit-identical alone and among 49 others, padding touches no slot, nothing recompiles, and
a session's log grades as the graders grade the same intervals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders
from inferencegym_jax import reward as reward_module
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.server import pool as pool_module
from inferencegym_jax.server.core import log_record

TASK = "InferenceGym-Task1-v0"
STEPS = 24
# Different compiled programs (the pool's vmapped step, a plain jitted step, a scanned episode)
# may fuse a multiply-add differently: float32 rounding, a few ulp per interval.
RTOL, ATOL = 2e-5, 1e-6


@pytest.fixture(scope="module")
def served():
    env, params = ig.make(TASK)
    policies = baselines.baseline_policies(env, params, TASK)
    # capacity 64: the server's default, so this is the program `inferencegym serve` compiles
    pool = pool_module.TaskPool(TASK, 64, policies)
    pool.warm_up()
    return env, params, policies, pool


@pytest.fixture(scope="module")
def step(served):
    """One jitted env.step_env for the module's tests (one compilation)."""
    return jax.jit(served[0].step_env)


def episode(pool, slot, seed, steps, op, others=()):
    """Reset `slot` (and `others`) and step them together `steps` times; the slot's rows."""
    pool.advance([{"slot": slot, "reset": True, "seed": seed}]
                 + [{"slot": o, "reset": True, "seed": 1000 + o} for o in others])
    rows = []
    for _ in range(steps):
        out = pool.advance([{"slot": slot, **op}] + [{"slot": o, "policy": 1 + o % 4} for o in others])
        rows.append(out[0])
    return rows


def test_batch_sizes_are_simd_multiples_up_to_the_capacity():
    assert pool_module.batch_sizes(1) == (8,)
    assert pool_module.batch_sizes(50) == (8, 56)
    assert pool_module.batch_sizes(64) == (8, 64)
    assert pool_module.batch_sizes(100) == (8, 64, 104)
    assert all(b % evaluate.BATCH_MULTIPLE == 0 for b in pool_module.batch_sizes(300))


def test_a_session_alone_and_among_49_others_is_bit_identical(served):
    _, _, _, pool = served
    mine, *others = [pool.allocate() for _ in range(50)]
    heuristic = {"policy": pool.policy_index("heuristic")}
    alone = episode(pool, mine, 7, STEPS, heuristic)
    among = episode(pool, mine, 7, STEPS, heuristic, others)
    for a, b in zip(alone, among):
        assert a == b  # every observation, metric, reward and knob, exactly
    for slot in (mine, *others):
        pool.release(slot)


def test_a_session_is_the_documented_episode_of_its_seed(served, step):
    """ig.make + evaluate.stream_episode_keys in a Python loop, and evaluate.run_episodes with
    the same policy, give the session's trajectory."""
    env, params, policies, pool = served
    slot, seed = pool.allocate(), 11
    rows = episode(pool, slot, seed, STEPS, {"policy": pool.policy_index("heuristic")})
    k_reset, k_env, k_policy = evaluate.stream_episode_keys(jax.random.key(seed), 0)
    obs, state = env.reset(k_reset, params)
    policy = jax.jit(policies["heuristic"])
    loop_rewards = []
    for t in range(STEPS):
        action = policy(jax.random.fold_in(k_policy, t), obs, params)
        obs, state, reward, *_ = step(jax.random.fold_in(k_env, t), state, action, params)
        loop_rewards.append(float(reward))
    scanned = evaluate.run_episodes(env, params, policies["heuristic"], jax.random.key(seed), 1, num_steps=STEPS)
    served_rewards = [r["reward"] for r in rows]
    np.testing.assert_allclose(served_rewards, loop_rewards, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(served_rewards, np.asarray(scanned.reward[0]), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose([r["metrics"]["ttft_p99_s"] for r in rows],
                               np.asarray(scanned.metrics.ttft_p99_s[0]), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose([r["obs"]["queue_depth"] for r in rows], np.asarray(scanned.metrics.queue_depth[0]),
                               rtol=RTOL, atol=ATOL)
    pool.release(slot)


def test_knob_values_step_like_a_serving_action_and_masked_knobs_are_reported(served, step):
    env, params, _, pool = served
    slot = pool.allocate()
    action = np.asarray([0.5, 4, 64, 1, 2], np.float32)  # task 1 masks spec, disagg, precision
    row = episode(pool, slot, 3, 1, {"policy": pool_module.GIVEN_ACTION, "action": action})[0]
    k_reset, k_env, _ = evaluate.stream_episode_keys(jax.random.key(3), 0)
    _, state = env.reset(k_reset, params)
    _, _, reward, _, _, info = step(jax.random.fold_in(k_env, 0), state, ig.ServingAction(*jnp.asarray(action)), params)
    assert [k for k, c in zip(KNOBS, row["clipped"]) if c] == ["spec_length", "prefill_disagg", "quant_tier"]
    np.testing.assert_allclose(row["applied"], np.asarray(info["applied_action"].as_vector()))
    np.testing.assert_allclose(row["reward"], float(reward), rtol=RTOL, atol=ATOL)
    assert set(row["reward_components"]) == set(info["reward_components"]) == set(reward_module.COMPONENTS)
    pool.release(slot)


def test_padding_rows_change_no_slot_and_nothing_recompiles(served):
    _, _, _, pool = served
    slot = pool.allocate()
    pool.advance([{"slot": slot, "reset": True, "seed": 5}])
    before = jax.device_get(pool._slots)
    for size in pool.batch_sizes:
        pool.advance_arrays(pool._padding(size))
    jax.tree_util.tree_map(np.testing.assert_array_equal, before, jax.device_get(pool._slots))
    for n in (1, 3, 9, 50):  # every batch length maps to a warmed-up size
        slots = [slot] + [s for s in range(pool.capacity) if s != slot][: n - 1]
        pool.advance([{"slot": s, "policy": 1} for s in slots])
    assert pool.traces == len(pool.batch_sizes)
    pool.release(slot)


def test_bad_operations_are_refused(served):
    _, _, _, pool = served
    with pytest.raises(ValueError, match="distinct slots"):
        pool.advance([{"slot": 0}, {"slot": 0}])
    with pytest.raises(ValueError, match="distinct slots"):
        pool.advance([{"slot": pool.capacity}])
    with pytest.raises(ValueError, match="policy='nope'"):
        pool.policy_index("nope")
    with pytest.raises(ValueError, match="not in use"):
        pool.release(0)


def test_a_sessions_log_grades_as_the_graders_grade_its_intervals(served):
    _, params, _, pool = served
    slot = pool.allocate()
    rows = episode(pool, slot, 9, STEPS, {"policy": pool.policy_index("random")})
    records = [log_record(r) for r in rows]
    traj = {
        "metrics": {f: jnp.asarray([[r["metrics"][f] for r in records]]) for f in graders.METRIC_FIELDS},
        "action": {k: jnp.asarray([[r["action"][k] for r in records]]) for k in KNOBS},
        "offered_tokens": jnp.asarray([[r["offered_tokens"] for r in records]]),
        "valid": jnp.ones((1, STEPS), bool),
    }
    expected = graders.grade(traj, params, TASK)
    from inferencegym_jax.server.core import ServerCore

    core = ServerCore.__new__(ServerCore)  # only the grader: no second pool
    core.pools = {TASK: pool}
    core._graders = {TASK: core._grader_program(TASK)}
    answer = core.grade(TASK, records)
    assert answer == core.grade(TASK, records)
    np.testing.assert_allclose(answer["score"], float(expected.score[0]), rtol=1e-6, atol=1e-7)
    assert answer["feedback"] == graders.feedback(expected, TASK)[0]
    assert answer["intervals"] == STEPS
    pool.release(slot)


def test_a_checkpoints_policy_steps_sessions_as_evaluate_runs_it(tmp_path):
    """`serve --checkpoint`: the trained policy (here an untrained network, saved and loaded as
    a run's would be) acts in the pool as evaluate.run_episodes has it act."""
    from inferencegym_jax.server.core import checkpoint_policy
    from inferencegym_jax.training_setup import from_dict, make_train
    from training.checkpoint import save_checkpoint

    config = from_dict(dict(task=TASK, num_envs=4, num_steps=2, num_minibatches=1, actor_widths=(8,),
                            critic_widths=(8,)))
    trainer = make_train(config)
    save_checkpoint(tmp_path, trainer, trainer.jit_init(trainer.root_key()))
    env, params = ig.make(TASK)
    policy = checkpoint_policy(str(tmp_path), TASK, params)
    pool = pool_module.TaskPool(TASK, 8, {"ppo": policy})
    pool.warm_up()
    rows = episode(pool, pool.allocate(), 13, STEPS, {"policy": pool.policy_index("ppo")})
    scanned = evaluate.run_episodes(env, params, policy, jax.random.key(13), 1, num_steps=STEPS)
    np.testing.assert_allclose([r["reward"] for r in rows], np.asarray(scanned.reward[0]), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="trained on InferenceGym-Task1-v0"):
        checkpoint_policy(str(tmp_path), "InferenceGym-Task2-v0", ig.make("InferenceGym-Task2-v0")[1])
    with pytest.raises(ValueError, match="other env params"):
        checkpoint_policy(str(tmp_path), TASK, params.replace(max_steps_in_episode=jnp.int32(50)))


def test_the_core_refuses_bad_knob_values_from_python_callers(served):
    """Requests are validated by their schemas; the core checks again for direct callers
    (validation.check_action, the env's own check)."""
    from inferencegym_jax.server.core import ServerCore
    from inferencegym_jax.server.sessions import Session

    _, _, _, pool = served
    core = ServerCore.__new__(ServerCore)  # only the session logic: no second pool
    core.pools = {TASK: pool}
    session = Session(id="s", task_id=TASK, slot=0, pinned=False, started=True)
    for action, where in (({"batch_size": 1000}, "batch_size"), ({"kv_budget": float("nan")}, "kv_budget"),
                          ({"kv_budget": "0.5"}, "kv_budget"), ({"batch_sise": 4}, "batch_sise")):
        with pytest.raises(ValueError, match=where):
            core._step_op(session, action, None)
    op = core._step_op(session, {"batch_size": 64}, None)
    np.testing.assert_array_equal(op["action"], [1.0, 0, 64, 0, 0])  # task 1's defaults elsewhere
