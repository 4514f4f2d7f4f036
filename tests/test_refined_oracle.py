"""The refined oracle (experiments/refined_oracle.py, an offline study beside its script): it replays
the episodes it refines, never lowers an episode's grade, keeps a schedule no candidate improves,
and improves a bad one. It is not part of the package, so it runs in a subprocess from its folder,
as experiments/mpc_gap.py imports it; the subprocess prints what the tests check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Slow tier: a study outside the package (about 90 s of compiling in its subprocess), kept out of
# the README's test command; CI runs it.
pytestmark = pytest.mark.slow

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

CHECKS = r'''
import json
import jax, jax.numpy as jnp, numpy as np
import refined_oracle
import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate, graders
from inferencegym_jax.control import mpc

TASK, STEPS, EPISODES = "InferenceGym-Task2-v0", 12, 8
env, params = ig.make(TASK)
cands = mpc.candidate_actions(env, params, TASK)
out = {}

def unnormalised(traj):
    return np.asarray(graders.grade_episodes(traj, params, graders.grader_name(TASK), 0.0, 1.0, 0.0, 1.0).score)

def fixed_episodes(action, key):
    return evaluate.run_episodes(env, params, baselines.fixed_policy(jnp.asarray(action)), key, EPISODES,
                                 num_steps=STEPS)

def refused(**kwargs):
    try:
        refined_oracle.refined_episodes(env, params, TASK, key, base, cands, **kwargs)
    except ValueError as e:
        return str(e)
    return None

# a replay of a schedule is the episode that played it
key = evaluate.evaluation_key(3)
played = fixed_episodes(cands[0], key)
schedule = jnp.broadcast_to(jnp.asarray(cands[0]), (STEPS, 5))
replayed = jax.vmap(lambda k: refined_oracle.replay(env, params, k, schedule))(evaluate.episode_keys(key, 0, EPISODES))
out["replay_completed"] = [np.asarray(t.metrics.completed).tolist() for t in (replayed, played)]
out["replay_reward"] = [np.asarray(t.reward).tolist() for t in (replayed, played)]

# refinement keeps what no candidate improves and improves a bad schedule
key = evaluate.evaluation_key(4)
bad = cands[[i for i, c in enumerate(cands) if c[2] == 0][0]]  # batch size 1
base = fixed_episodes(bad, key)
same = refined_oracle.refined_episodes(env, params, TASK, key, base, bad[None], block=4)
out["same_batch"] = [np.asarray(same.action.batch_size).tolist(), np.asarray(base.action.batch_size).tolist()]
out["same_reward"] = [np.asarray(same.reward).tolist(), np.asarray(base.reward).tolist()]
refined = refined_oracle.refined_episodes(env, params, TASK, key, base, cands, block=4, passes=2)
again = refined_oracle.refined_episodes(env, params, TASK, key, base, cands, block=4, passes=2)
out["bad_before_after"] = [unnormalised(base).tolist(), unnormalised(refined).tolist()]
out["again_equal"] = all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(refined),
                                                             jax.tree_util.tree_leaves(again)))
out["refused"] = {f"{b},{p}": refused(block=b, passes=p) for b, p in ((5, 1), (0, 1), (4, 0))}

# refining the oracle never lowers its grade
key = evaluate.evaluation_key(5)
oracle = mpc.run_mpc_episodes(mpc.controller(env, params, TASK, mpc.MPCConfig(clairvoyant=True, horizon=3),
                                             num_steps=STEPS), params, key, EPISODES)
refined = refined_oracle.refined_episodes(env, params, TASK, key, oracle, cands, block=3)
out["oracle_before_after"] = [unnormalised(oracle).tolist(), unnormalised(refined).tolist()]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def checked() -> dict:
    done = subprocess.run([sys.executable, "-c", CHECKS], capture_output=True, text=True, cwd=EXPERIMENTS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_replay_of_a_schedule_is_the_episode_that_played_it(checked):
    replayed, played = checked["replay_completed"]
    np.testing.assert_array_equal(replayed, played)
    # the same arrivals and configurations; two compiled programs may round a reward apart by an ulp
    np.testing.assert_allclose(*checked["replay_reward"], rtol=2e-5, atol=1e-6)


def test_refinement_keeps_what_no_candidate_improves_and_improves_a_bad_schedule(checked):
    # the only candidate is the schedule's own configuration: nothing changes
    np.testing.assert_array_equal(*checked["same_batch"])
    np.testing.assert_allclose(*checked["same_reward"], rtol=2e-5, atol=1e-6)
    # with the whole neighbourhood, each block may only raise the episode's grade
    before, after = map(np.asarray, checked["bad_before_after"])
    assert np.all(after >= before - 1e-5), after - before
    assert np.mean(after) > np.mean(before) + 0.05
    assert checked["again_equal"]


def test_refining_the_oracle_never_lowers_its_grade(checked):
    before, after = map(np.asarray, checked["oracle_before_after"])
    assert np.all(after >= before - 1e-5)


def test_bad_block_sizes_are_refused(checked):
    for point, message in checked["refused"].items():  # 5 does not divide 12 intervals
        block, passes = point.split(",")
        assert message is not None and f"block={block}, passes={passes}" in message
