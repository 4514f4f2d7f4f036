"""The fleet env (`inferencegym_jax.fleet.env.FleetEnv`, InferenceGym-Fleet1-v1): the gymnax
contract, reproducibility, one compile, robustness inside jit, bad input outside it, the reward's
decomposition, request accounting, the provisioning delay, the day curve, and the issue's bar: a
one-replica fleet reproduces the single-server env to float32 rounding.

Episodes are shortened (a handful of 60-s control intervals) so the file stays in the fast tier.
"""

from __future__ import annotations

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import tasks
from inferencegym_jax.env import InferenceGymEnv
from inferencegym_jax.fleet import pooled_requests
from inferencegym_jax.fleet import tasks as fleet_tasks
from inferencegym_jax.fleet.day_traffic import DAY_MIN, MINUTE_S, DayCurve, requests_per_minute
from inferencegym_jax.fleet.env import OBS_SIZE, RESET_DRAWS, FleetEnv, FleetObservation
from inferencegym_jax.serving.types import judged_metric
from inferencegym_jax.traffic import sampling, workload

ENV_ID = "InferenceGym-Fleet1-v1"
SHORT = 6  # [control intervals] the shortened episode of most tests
DAYTIME = 1 * DAY_MIN + 14 * 60  # [min] 14:00 UTC on day 1 (a Saturday): a train window's load
EQUIV_STEPS = 50  # [intervals] of the one-replica equivalence run (the must-show)
EQUIV_RATE = 3.0  # [req/s] the constant load of that run: above one replica's TPOT knee (~2.5)
# Float32 rounding over a closed-loop run, as tests/test_fleet_physics.py's RTOL: the two programs
# round apart by a few ulps an interval, fed back through the queue (measured over 50 intervals:
# 1.7e-7 of a leaf's largest magnitude at worst); 1e-5 of it.
RTOL = 1e-5


@pytest.fixture(scope="module")
def fleet_env():
    """Fleet1's env, its params shortened to SHORT intervals, and the module's jitted reset, step
    (traced at most once over the whole module: every call passes the same shapes and dtypes) and
    step_env, so the file compiles each program once."""
    env, params = ig.make(ENV_ID)
    chex.clear_trace_counter()
    jitted = {"reset": jax.jit(env.reset), "step": jax.jit(chex.assert_max_traces(env.step, n=1)),
              "step_env": jax.jit(env.step_env)}
    return env, params.replace(max_steps_in_episode=jnp.asarray(SHORT, jnp.int32)), jitted


def at_start(params, minute: int = DAYTIME):
    """`params` whose every episode starts at `minute` (the start list keeps its shape, so the
    jitted programs are not traced again)."""
    return params.replace(curve=params.curve.replace(starts=jnp.full_like(params.curve.starts, minute)))


def play(fleet_env, key, targets, params, auto_reset: bool = False):
    """Actions [target, t % 2] from a reset through the jitted `step_env` (or `step`): the reset
    state and numpy stacks (leading axis T) of the states, rewards, truncations and infos."""
    _, _, jitted = fleet_env
    _, state = jitted["reset"](key, params)
    start, out = state, []
    for t, target in enumerate(targets):
        action = jnp.asarray([target, t % 2], jnp.int32)
        _, state, reward, _, truncated, info = jitted["step" if auto_reset else "step_env"](
            jax.random.fold_in(key, t), state, action, params)
        out.append((state, reward, truncated, info))
    return start, jax.tree_util.tree_map(lambda *x: np.stack(x), *out)


def at(tree, i: int):
    """The i-th entry of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def last(tree):
    return at(tree, -1)


def leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True))


# ---------------------------------------------------------------- the gymnax contract


def test_reset_and_step_shapes_dtypes_and_spaces(fleet_env):
    env, params, jitted = fleet_env
    obs, state = jitted["reset"](jax.random.key(0), params)
    assert isinstance(obs, FleetObservation)
    for leaf in jax.tree_util.tree_leaves(obs):
        assert leaf.shape == () and leaf.dtype == jnp.float32
    flat = env.flatten_observation(obs, params)
    assert flat.shape == (OBS_SIZE,) and flat.dtype == jnp.float32
    assert env.observation_space(params).contains(flat)
    assert tuple(env.action_space(params).nvec) == (params.num_replicas + 1, 2)
    obs2, state2, reward, terminated, truncated, info = jitted["step"](
        jax.random.key(1), state, jnp.asarray([8, 1], jnp.int32), params)
    assert reward.shape == () and reward.dtype == jnp.float32
    assert terminated.dtype == truncated.dtype == jnp.bool_ and not bool(terminated) and not bool(truncated)
    assert info["applied_action"].dtype == jnp.int32 and info["applied_action"].tolist() == [8, 1]
    assert set(info) >= {"totals", "applied_action", "reward_components", "discount", "final_observation"}
    # The state keeps its structure, shapes and dtypes across a step (a scan carry).
    chex.assert_trees_all_equal_shapes_and_dtypes(state, state2)
    assert int(state2.time) == 1 and float(state2.last.arrived) > 0.0
    # Eight drained at once: serving 8; the others finish their backlog (draining) or are retired.
    assert float(obs2.serving) == 8.0 and float(obs2.draining) <= 8.0 and float(obs2.warming) == 0.0
    assert float(obs2.episode_fraction) == pytest.approx(1 / SHORT)


@pytest.mark.slow  # the fast tier's budget: compiles a second env or a vmapped step
def test_vmap_over_keys_matches_unbatched(fleet_env):
    env, params, jitted = fleet_env
    keys = jax.random.split(jax.random.key(2), 3)
    actions = jnp.asarray([[16, 0], [4, 1], [0, 0]], jnp.int32)
    _, states = jax.vmap(jitted["reset"], in_axes=(0, None))(keys, params)
    out = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, states, actions, params)
    assert out[1].time.shape == (3,) and out[2].shape == (3,) and out[1].fleet.active.shape == (3, 16)
    assert len(set(np.asarray(out[2]).tolist())) == 3  # different keys and actions, different rewards
    for i in (0, 2):
        key, state = at((keys, states), i)
        single = jitted["step"](key, state, actions[i], params)
        chex.assert_trees_all_close(at(out[:3], i), single[:3], rtol=1e-5, atol=1e-5)


def test_auto_reset_at_the_horizon_keeps_the_final_observation(fleet_env):
    _, params, jitted = fleet_env
    params = params.replace(max_steps_in_episode=jnp.asarray(2, jnp.int32))
    _, state = jitted["reset"](jax.random.key(3), params)
    action = jnp.asarray([10, 0], jnp.int32)
    _, state, *_ = jitted["step"](jax.random.key(4), state, action, params)
    obs, after, _, _, truncated, info = jitted["step"](jax.random.key(5), state, action, params)
    final_obs, final_state, *_ = jitted["step_env"](jax.random.key(5), state, action, params)
    assert bool(truncated) and int(after.time) == 0 and float(obs.episode_fraction) == 0.0
    assert float(after.episode.arrived) == 0.0 and float(obs.serving) == float(params.initial_replicas)
    assert float(info["final_observation"].episode_fraction) == 1.0
    assert leaves_equal(info["final_observation"], final_obs)
    assert int(final_state.time) == 2 and float(final_state.episode.arrived) > 0.0


def test_step_and_step_env_make_the_same_transition(fleet_env):
    _, params, jitted = fleet_env
    _, state = jitted["reset"](jax.random.key(6), params)
    action = jnp.asarray([5, 1], jnp.int32)
    a = jitted["step"](jax.random.key(7), state, action, params)
    b = jitted["step_env"](jax.random.key(7), state, action, params)
    assert leaves_equal(a[:5], b[:5])
    assert leaves_equal(a[5]["totals"], b[5]["totals"])


def test_same_key_same_bits_and_one_compile(fleet_env):
    """Same key, same bits; the jitted step (chex.assert_max_traces(n=1) for the whole module)
    is not traced again for other keys, actions, states or values of traced params."""
    _, params, _ = fleet_env
    targets = [16, 3, 0, 9]
    first, second = play(fleet_env, jax.random.key(11), targets, params, auto_reset=True), \
        play(fleet_env, jax.random.key(11), targets, params, auto_reset=True)
    other = play(fleet_env, jax.random.key(12), targets, params, auto_reset=True)
    assert leaves_equal(first, second)
    assert not np.array_equal(first[1][1], other[1][1])  # the rewards
    play(fleet_env, jax.random.key(13), targets, params.replace(max_steps_in_episode=jnp.asarray(3, jnp.int32)),
         auto_reset=True)


# ---------------------------------------------------------------- robustness and bad input


def test_out_of_range_actions_are_clipped_inside_jit(fleet_env):
    _, params, jitted = fleet_env
    _, state = jitted["reset"](jax.random.key(8), params)
    for action, applied in (([99, 7], [16, 1]), ([-5, -1], [0, 0]), ([3, 1], [3, 1])):
        info = jitted["step"](jax.random.key(9), state, jnp.asarray(action, jnp.int32), params)[5]
        assert info["applied_action"].tolist() == applied


def test_random_actions_give_finite_bounded_observations(fleet_env):
    env, params, jitted = fleet_env
    params = at_start(params, 4 * DAY_MIN + 9 * 60).replace(max_steps_in_episode=jnp.asarray(5, jnp.int32))
    key = jax.random.key(10)
    _, state = jitted["reset"](key, params)
    actions = np.random.default_rng(0).integers([-4, -2], [22, 4], size=(12, 2)).astype(np.int32)
    lost = truncations = 0.0
    for t, action in enumerate(actions):
        obs, state, reward, _, truncated, info = jitted["step"](jax.random.fold_in(key, t), state, action, params)
        flat = env.flatten_observation(obs, params)
        chex.assert_tree_all_finite((state, obs, flat, reward, info))
        assert flat.shape == (OBS_SIZE,) and float(flat.min()) >= 0.0 and float(flat.max()) <= 1.0
        lost, truncations = lost + float(info["totals"].lost), truncations + float(truncated)
    assert truncations == 2.0  # two horizons crossed, two auto-resets
    assert lost > 0.0  # the random targets left the fleet short at times


@pytest.mark.parametrize("action", [[17, 0], [0, 2], [-1, 0], [1, 0, 0], [1.5, 0.0], [[1, 0]]])
def test_bad_action_outside_jit_raises(fleet_env, action):
    env, params, jitted = fleet_env
    _, state = jitted["reset"](jax.random.key(0), params)
    with pytest.raises(ValueError, match=r"action=.*replicas in \[0, 16\].*routing in \[0, 1\]"):
        env.step(jax.random.key(0), state, np.asarray(action), params)


@pytest.mark.parametrize("overrides, message", [
    ({"fleet": {"num_replicas": 0}}, r"fleet\.num_replicas=0: .*\[1, 256\]"),
    ({"fleet": {"bogus": 1}}, r"unknown config key 'fleet\.bogus'"),
    ({"bogus": 1}, r"unknown config key 'bogus'"),
    ({"split": "test"}, r"split='test' is not one of \['train', 'heldout'\]"),
    ({"fleet": {"control_interval_s": 1.5}}, r"fleet\.control_interval_s=1\.5 must be a whole number"),
    ({"fleet": {"initial_replicas": 17}}, r"fleet\.initial_replicas=17 must be <= fleet\.num_replicas=16"),
    ({"traffic": {"fleet_share": 0.0}}, r"traffic\.fleet_share=0\.0: .*\(0, 1\]"),
])
def test_bad_config_raises_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        ig.make(ENV_ID, **overrides)


# ---------------------------------------------------------------- reward and accounting

SCALED_TARGETS = [16, 16, 3, 3, 3, 0, 0, 10, 10, 10, 10, 10]  # [replicas] per interval


@pytest.fixture(scope="module")
def scaled_episode(fleet_env):
    """A 12-interval daytime episode that scales 16 -> 3 -> 0 -> 10 replicas (provision_s 120 s),
    through `step_env`: (params, start state, per-interval states, rewards, infos)."""
    _, params = ig.make(ENV_ID, fleet={"provision_s": 120.0})
    params = at_start(params).replace(max_steps_in_episode=jnp.asarray(len(SCALED_TARGETS), jnp.int32))
    start, (states, rewards, _, infos) = play(fleet_env, jax.random.key(20), SCALED_TARGETS, params)
    return params, start, states, rewards, infos


@pytest.mark.slow  # the fast tier's budget: compiles a scripted 12-step episode
def test_episode_return_is_minus_the_episode_cost(scaled_episode):
    params, start, states, rewards, infos = scaled_episode
    episode = last(states).episode
    horizon_s = len(SCALED_TARGETS) * 60.0
    cost = (float(episode.gpu_seconds) / (params.num_replicas * horizon_s)
            + float(params.slo_weight) * float(episode.slo_violations) / float(start.expected_requests))
    assert float(params.slo_weight) == pytest.approx(100.0, rel=1e-5)
    assert float(rewards.sum()) == pytest.approx(-cost, rel=1e-5)
    parts = infos["reward_components"]
    np.testing.assert_allclose(rewards, -(parts["gpu"] + parts["slo"]), rtol=1e-6)
    # The episode's sums are the sums of its intervals.
    for name in ("arrived", "judged", "slo_violations", "gpu_seconds", "cost_usd", "lost"):
        assert float(getattr(episode, name)) == pytest.approx(float(getattr(infos["totals"], name).sum()),
                                                              rel=1e-5, abs=1e-3), name
    # The actuator did what was asked: 16 -> 3 at once (drained), 0, then 10 after 120 s of warming.
    assert infos["totals"].serving.tolist() == [16, 16, 3, 3, 3, 0, 0, 0, 10, 10, 10, 10]


@pytest.mark.slow  # the fast tier's budget: compiles a scripted 12-step episode
def test_expected_requests_are_the_curves_over_the_episode_inside_jit(scaled_episode):
    _, start, *_ = scaled_episode
    counts = requests_per_minute("azure-code-2024")[DAYTIME:DAYTIME + len(SCALED_TARGETS)].sum()
    # rel 1e-4: a difference of two float32 prefix sums of ~7e6 requests (spacing 0.5)
    assert float(start.expected_requests) == pytest.approx(counts * 0.4, rel=1e-4)


@pytest.mark.slow  # the fast tier's budget: compiles a scripted 12-step episode
def test_arrivals_are_judged_or_still_in_the_system(scaled_episode):
    """Every arrival is judged (completed, timed out, failed, refused with no replica receiving,
    or dropped as a retired replica's residue: `fleet_metrics`' judged counts lost and residue)
    or still waiting, running or preempted on an active replica at the end of each interval."""
    _, _, states, _, infos = scaled_episode
    totals = infos["totals"]
    pools = np.asarray(jax.vmap(pooled_requests)(states.fleet.servers))  # (T, R)
    held = np.where(states.fleet.active, pools, 0.0).sum(-1)
    arrived, judged = np.cumsum(totals.arrived), np.cumsum(totals.judged)
    np.testing.assert_allclose(arrived, judged + held, rtol=1e-5, atol=1e-2)
    assert np.all(np.where(states.fleet.active, 0.0, pools) == 0.0)  # idle replicas hold nothing
    # The scenario exercised the paths: refusals at 0 replicas, replicas drained and retired.
    assert float(totals.lost.sum()) > 100.0 and float(totals.gpu_seconds[3]) == 3 * 60.0
    assert float(totals.slo_violations.sum()) >= float(totals.lost.sum())
    assert np.all(totals.judged >= totals.slo_violations - 1e-3)


def test_a_scale_up_serves_only_after_the_provisioning_delay(fleet_env):
    _, params = ig.make(ENV_ID, fleet={"initial_replicas": 2})
    params = at_start(params)
    delay = math.ceil(float(params.provision_s) / float(params.server.dt_s))  # [physics intervals]
    ready = (delay - 1) // params.substeps  # the control interval in whose last physics intervals they serve
    _, (states, _, _, infos) = play(fleet_env, jax.random.key(21), [4] * (ready + 2), params)
    totals = infos["totals"]
    assert delay == 831 and ready == 13  # 830.5 s of the file
    assert totals.serving.tolist() == [2.0] * ready + [4.0, 4.0]
    assert totals.warming.tolist() == [2.0] * ready + [0.0, 0.0]
    held = np.asarray(jax.vmap(pooled_requests)(states.fleet.servers))  # (T, R)
    assert np.all(held[:ready, 2:4] == 0.0) and np.all(held[ready + 1, 2:4] > 0.0)
    assert np.all(held[:, 4:] == 0.0)
    # Warming replicas are billed: four GPUs for every interval.
    np.testing.assert_allclose(totals.gpu_seconds, 4 * 60.0, rtol=1e-6)


# ---------------------------------------------------------------- the day curve


def test_the_curve_is_the_shipped_counts_and_the_splits_are_disjoint_days():
    _, train = ig.make(ENV_ID)
    _, heldout = ig.make(ENV_ID, split="heldout")
    counts = requests_per_minute("azure-code-2024")
    for minute in (0, 777, DAYTIME, 5 * DAY_MIN + 1, counts.size - 1):
        assert float(train.curve.rate[minute]) == pytest.approx(counts[minute] * 0.4 / MINUTE_S, rel=1e-6)
    np.testing.assert_array_equal(train.curve.rate, heldout.curve.rate)
    train_days = set((np.asarray(train.curve.starts) // DAY_MIN).tolist())
    heldout_days = set((np.asarray(heldout.curve.starts) // DAY_MIN).tolist())
    assert train_days == {1, 2, 3, 4} and heldout_days == {5, 6}
    assert train.curve.starts.shape == (73,) and heldout.curve.starts.shape == (25,)
    # Whole windows inside their days: the last start's day is the window's last day.
    day_min = int(train.max_steps_in_episode)
    assert int(train.curve.starts[-1]) + day_min == 5 * DAY_MIN
    assert int(heldout.curve.starts[-1]) + day_min == 7 * DAY_MIN


# ---------------------------------------------------------------- one replica = the single server


@pytest.fixture(scope="module", params=[ENV_ID, "InferenceGym-Fleet1-v2"])
def one_replica_runs(request):
    """A one-replica Fleet1 (substeps 1, one replica up, no delay, a constant curve) and the
    single-server env of its replica task at that rate, fed the same uniforms for EQUIV_STEPS
    intervals, action [1, 0] and the default configuration: per-interval (fleet states, single
    states, fleet totals, single metrics, single arrivals, single's judged requests). On v2 the
    fleet's extra routing uniforms (its even rule's) are drawn apart: least-loaded does not read them."""
    cfg, replica = fleet_tasks.fleet_task_config(request.param)
    fp = fleet_tasks.build_fleet_params(cfg, replica)
    sp = tasks.build_params(replica)
    rate = jnp.float32(EQUIV_RATE)
    minutes = fp.curve.rate.shape[0]
    curve = DayCurve(rate=jnp.full((minutes,), rate), starts=jnp.zeros((1,), jnp.int32),
                     cumulative=jnp.arange(minutes + 1, dtype=jnp.float32) * rate * MINUTE_S,
                     first_weekday=fp.curve.first_weekday)
    horizon = jnp.asarray(EQUIV_STEPS, jnp.int32)
    fp = dataclasses.replace(fp, curve=curve, num_replicas=1, substeps=1, provision_s=jnp.float32(0.0),
                             initial_replicas=jnp.asarray(1, jnp.int32), max_steps_in_episode=horizon)
    sp = sp.replace(workload=sp.workload.replace(base_rate=rate), max_steps_in_episode=horizon)
    fenv, senv = FleetEnv(fp), InferenceGymEnv(sp)
    draws = workload.STEP_DRAWS + RESET_DRAWS

    def run(key):
        u0 = sampling.uniforms(key, RESET_DRAWS)
        _, fs = fenv._reset_from_uniforms(u0, fp)
        _, ss = senv._reset_from_uniforms(u0[:workload.RESET_DRAWS], sp)

        def body(carry, i):
            u = sampling.uniforms(jax.random.fold_in(key, i), draws)
            extra = fenv._draws(fp) - workload.STEP_DRAWS  # static: 0 on v1
            routing = sampling.uniforms(jax.random.fold_in(key, i + 100_000), extra) if extra else u[:0]
            u_fleet = jnp.concatenate([u[:workload.STEP_DRAWS], routing, u[workload.STEP_DRAWS:]])
            _, fs, _, _, _, fi = fenv._transition(u_fleet, carry[0], jnp.asarray([1, 0], jnp.int32), fp)
            _, ss, _, _, _, si = senv._transition(u, carry[1], sp.default_action, sp)
            return (fs, ss), (fs, ss, fi["totals"], si["metrics"], si["arrivals"])

        return jax.lax.scan(body, (fs, ss), jnp.arange(EQUIV_STEPS))[1]

    fs, ss, totals, metrics, arrivals = jax.jit(run)(jax.random.key(3))
    judged = getattr(metrics, judged_metric(sp.server.slo_accounting)) + metrics.timeouts + metrics.failed
    return sp, fs, ss, totals, metrics, arrivals, judged


def close(actual, expected, what: str) -> None:
    """Within RTOL of the expected array's largest magnitude."""
    e, a = np.asarray(expected, np.float64), np.asarray(actual, np.float64).reshape(np.shape(expected))
    scale = max(float(np.max(np.abs(e), initial=0.0)), 1e-6)
    assert np.all(np.abs(a - e) <= RTOL * scale), f"{what}: max diff {np.abs(a - e).max()} of {scale}"


@pytest.mark.slow  # the fast tier's budget: compiles a second env or a vmapped step
def test_one_replica_fleet_reproduces_the_single_server_env(one_replica_runs):
    sp, fs, ss, totals, metrics, arrivals, judged = one_replica_runs
    assert float(totals.arrived.sum()) > 100.0 and float(totals.slo_violations.sum()) > 1.0
    np.testing.assert_array_equal(totals.arrived, arrivals.count.sum(-1))
    pairs = {"judged": judged, "slo_violations": metrics.slo_violations, "completed": metrics.completed,
             "output_tokens": metrics.output_tokens, "queue_depth": metrics.queue_depth,
             "cost_usd": metrics.cost_usd, "gpu_seconds": metrics.num_gpus * sp.server.dt_s}
    for name, expected in pairs.items():
        close(getattr(totals, name), expected, name)
    assert float(totals.lost.sum()) == 0.0
    for (path, a), e in zip(jax.tree_util.tree_leaves_with_path(fs.fleet.servers),
                            jax.tree_util.tree_leaves(ss.server), strict=True):
        close(a[:, 0], e, f"server state{jax.tree_util.keystr(path)}")  # admitted, running, queue ...
    chex.assert_trees_all_equal(fs.workload, ss.workload)


@pytest.mark.slow  # the fast tier's budget: compiles a second env or a vmapped step
def test_one_replica_ttft_p99_matches_in_every_interval(one_replica_runs):
    _, _, _, totals, metrics, *_ = one_replica_runs
    close(totals.ttft_p99_s, metrics.ttft_p99_s, "ttft_p99_s")
