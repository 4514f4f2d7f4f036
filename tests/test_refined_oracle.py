"""The refined oracle: it replays the episodes it refines, never lowers an episode's grade, keeps
a schedule no candidate improves, and improves a bad one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders, refined_oracle
from inferencegym_jax.control import mpc

TASK = "InferenceGym-Task2-v0"
STEPS, EPISODES = 12, 8


@pytest.fixture(scope="module")
def task():
    return ig.make(TASK)


def unnormalised(traj, params):
    return np.asarray(graders.grade_episodes(traj, params, graders.grader_name(TASK), 0.0, 1.0, 0.0, 1.0).score)


def fixed_episodes(env, params, action, key):
    return evaluate.run_episodes(env, params, baselines.fixed_policy(jnp.asarray(action)), key, EPISODES,
                                 num_steps=STEPS)


def test_replay_of_a_schedule_is_the_episode_that_played_it(task):
    env, params = task
    key = evaluate.evaluation_key(3)
    best = mpc.candidate_actions(env, params, TASK)[0]
    played = fixed_episodes(env, params, best, key)
    schedule = jnp.broadcast_to(jnp.asarray(best), (STEPS, 5))
    replayed = jax.vmap(lambda k: refined_oracle.replay(env, params, k, schedule))(
        evaluate.episode_keys(key, 0, EPISODES))
    # the same arrivals and configurations; two compiled programs may round a reward apart by an ulp
    np.testing.assert_array_equal(np.asarray(replayed.metrics.completed), np.asarray(played.metrics.completed))
    np.testing.assert_allclose(np.asarray(replayed.reward), np.asarray(played.reward), rtol=2e-5, atol=1e-6)


def test_refinement_keeps_what_no_candidate_improves_and_improves_a_bad_schedule(task):
    env, params = task
    key = evaluate.evaluation_key(4)
    cands = mpc.candidate_actions(env, params, TASK)
    bad = cands[[i for i, c in enumerate(cands) if c[2] == 0][0]]  # batch size 1
    base = fixed_episodes(env, params, bad, key)
    # the only candidate is the schedule's own configuration: nothing changes
    same = refined_oracle.refined_episodes(env, params, TASK, key, base, bad[None], block=4)
    np.testing.assert_array_equal(np.asarray(same.action.batch_size), np.asarray(base.action.batch_size))
    np.testing.assert_allclose(np.asarray(same.reward), np.asarray(base.reward), rtol=2e-5, atol=1e-6)
    # with the whole neighbourhood, each block may only raise the episode's grade
    refined = refined_oracle.refined_episodes(env, params, TASK, key, base, cands, block=4, passes=2)
    before, after = unnormalised(base, params), unnormalised(refined, params)
    assert np.all(after >= before - 1e-5), after - before
    assert np.mean(after) > np.mean(before) + 0.05
    again = refined_oracle.refined_episodes(env, params, TASK, key, base, cands, block=4, passes=2)
    jax.tree_util.tree_map(np.testing.assert_array_equal, refined, again)


def test_refining_the_oracle_never_lowers_its_grade(task):
    env, params = task
    key = evaluate.evaluation_key(5)
    oracle = mpc.run_mpc_episodes(env, params, TASK, key, EPISODES, clairvoyant=True, horizon=3, num_steps=STEPS)
    refined = refined_oracle.refined_episodes(env, params, TASK, key, oracle, mpc.candidate_actions(env, params, TASK),
                                              block=3)
    assert np.all(unnormalised(refined, params) >= unnormalised(oracle, params) - 1e-5)


def test_bad_block_sizes_are_refused(task):
    env, params = task
    key = evaluate.evaluation_key(4)
    base = fixed_episodes(env, params, mpc.candidate_actions(env, params, TASK)[0], key)
    for block, passes in ((5, 1), (0, 1), (4, 0)):  # 5 does not divide 12 intervals
        with pytest.raises(ValueError, match=f"block={block}, passes={passes}"):
            refined_oracle.refined_episodes(env, params, TASK, key, base, mpc.candidate_actions(env, params, TASK),
                                            block=block, passes=passes)
