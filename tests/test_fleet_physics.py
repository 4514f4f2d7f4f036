"""The fleet's physics core (`inferencegym_jax.fleet`): the one-replica fleet is the single server,
equal replicas split the traffic, routing conserves requests, the autoscaler's actuator provisions
and drains, and `fleet_interval` jits once and vmaps over fleets."""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import fleet, serving
from inferencegym_jax.fleet import routing
from inferencegym_jax.traffic import workload

STEPS = 50  # intervals of the equivalence runs (the must-show)
# Float32 rounding over a closed-loop run: the vmapped and the plain program are compiled apart, so
# their roundings differ by a few ulps an interval and feed back through the queue (measured over 50
# intervals of task 1-v2: 2e-6 of a leaf's largest magnitude at worst, not growing); 1e-5 of it.
RTOL = 1e-5


@pytest.fixture(scope="module")
def task():
    """Task 1-v2's server params, default configuration and 50 intervals of its arrivals
    (workload.step with the prompt strata the mixed engine uses), leaves (STEPS, ...)."""
    _, params = ig.make("InferenceGym-Task1-v2")
    sp, wp = params.server, params.workload

    @jax.jit
    def arrivals(key):
        state = workload.init(key, wp, jnp.float32(STEPS) * sp.dt_s)

        def body(s, i):
            return workload.step(jax.random.fold_in(key, i), s, i * sp.dt_s, sp.dt_s, wp)

        return jax.lax.scan(body, state, jnp.arange(STEPS, dtype=jnp.float32))[1]

    return sp, params.default_action, arrivals(jax.random.key(7))


def at(tree, i):
    """The i-th entry of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def single_run(sp, config, arrivals):
    """The single server's states and metrics over the arrivals (leaves (STEPS, ...))."""
    def body(s, a):
        s, m = serving.serve_interval(s, a, config, sp)
        return s, (s, m)

    return jax.jit(lambda arr: jax.lax.scan(body, serving.initial_state(config, sp.num_age_buckets), arr)[1])(arrivals)


def fleet_run(sp, config, arrivals, replicas):
    """A fleet of `replicas` active replicas with equal weights: states and metrics per interval."""
    def body(s, a):
        s, m = fleet.fleet_interval(s, a, jnp.ones((replicas,), jnp.float32), config, sp)
        return s, (s, m)

    start = fleet.initial_fleet(config, sp.num_age_buckets, replicas, replicas)
    return jax.jit(lambda arr: jax.lax.scan(body, start, arr)[1])(arrivals)


def assert_close(actual, expected, what: str) -> tuple[float, float]:
    """Leaf by leaf within RTOL of the leaf's largest magnitude; returns the worst absolute and
    elementwise relative differences."""
    worst_abs = worst_rel = 0.0
    paths = jax.tree_util.tree_leaves_with_path(expected)
    for (path, e), a in zip(paths, jax.tree_util.tree_leaves(actual), strict=True):
        e, a = np.asarray(e, np.float64), np.asarray(a, np.float64).reshape(np.shape(e))
        diff = np.abs(a - e)
        scale = max(float(np.max(np.abs(e), initial=0.0)), 1e-6)
        assert np.all(diff <= RTOL * scale), f"{what}{jax.tree_util.keystr(path)}: max diff {diff.max()} of {scale}"
        worst_abs = max(worst_abs, float(diff.max(initial=0.0)))
        worst_rel = max(worst_rel, float(np.max(np.where(diff > 0, diff / np.maximum(np.abs(e), 1e-30), 0.0),
                                                initial=0.0)))
    return worst_abs, worst_rel


def test_one_replica_fleet_reproduces_the_single_server(task):
    sp, config, arrivals = task
    assert sp.engine == "mixed" and float(jnp.sum(arrivals.count)) > 100.0
    states, metrics = single_run(sp, config, arrivals)
    fleet_states, fleet_metrics = fleet_run(sp, config, arrivals, 1)
    state_diff = assert_close(at(fleet_states.servers, (slice(None), 0)), states, "state")
    metric_diff = assert_close(at(fleet_metrics.replica, (slice(None), 0)), metrics, "metrics")
    sums = {"completed": "completed", "output_tokens": "output_tokens", "good_tokens": "good_tokens",
            "cost_usd": "cost_usd", "timeouts": "timeouts", "queue_depth": "queue_depth"}
    for fleet_name, name in sums.items():
        np.testing.assert_allclose(getattr(fleet_metrics, fleet_name), getattr(metrics, name), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(fleet_metrics.ttft_p99_s, metrics.ttft_p99_s, rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(fleet_metrics.gpu_seconds, metrics.num_gpus * sp.dt_s, rtol=1e-6)
    assert float(jnp.sum(fleet_metrics.lost)) == 0.0
    print(f"one replica vs single server, {STEPS} intervals: state max abs {state_diff[0]:.3g} rel "
          f"{state_diff[1]:.3g}; metrics max abs {metric_diff[0]:.3g} rel {metric_diff[1]:.3g}")


def test_four_equal_replicas_each_serve_a_quarter(task):
    sp, config, arrivals = task
    quarter = jax.tree_util.tree_map(lambda x: x * 0.25, arrivals)
    quarter = quarter.replace(prompt_strata=arrivals.prompt_strata)  # a per-request shape, not a sum
    states, metrics = single_run(sp, config, quarter)
    fleet_states, fleet_metrics = fleet_run(sp, config, arrivals, 4)
    for r in range(4):
        assert_close(at(fleet_states.servers, (slice(None), r)), states, f"replica {r} state")
        assert_close(at(fleet_metrics.replica, (slice(None), r)), metrics, f"replica {r} metrics")
    np.testing.assert_allclose(fleet_metrics.completed, 4.0 * metrics.completed, rtol=RTOL, atol=1e-5)
    np.testing.assert_allclose(fleet_metrics.cost_usd, 4.0 * metrics.cost_usd, rtol=1e-6)


STEP = jax.jit(fleet.fleet_interval)


def test_inactive_replicas_cost_nothing_and_serve_nothing(task):
    sp, config, arrivals = task
    start = fleet.initial_fleet(config, sp.num_age_buckets, 3, 1)
    state, cost, served = start, 0.0, 0.0
    for i in range(10):
        state, m = STEP(state, at(arrivals, i), jnp.ones((3,), jnp.float32), config, sp)
        cost, served = cost + float(m.cost_usd), served + float(m.admitted)
        assert float(m.lost) == 0.0
        for field in ("cost_usd", "output_tokens", "admitted", "completed", "num_gpus", "queue_depth"):
            assert np.all(np.asarray(getattr(m.replica, field))[1:] == 0.0), field
        np.testing.assert_allclose(m.cost_usd, m.replica.cost_usd[0], rtol=1e-6)
    chex.assert_trees_all_equal(at(state.servers, slice(1, None)), at(start.servers, slice(1, None)))
    assert cost > 0.0 and served > 0.0
    # No replica up: every arrival refused, counted lost and as a violation; nothing billed.
    state, m = STEP(fleet.initial_fleet(config, sp.num_age_buckets, 3, 0), at(arrivals, 0),
                    jnp.ones((3,), jnp.float32), config, sp)
    arrived = float(jnp.sum(arrivals.count[0]))
    assert arrived > 0 and float(m.lost) == arrived == float(m.slo_violations) == float(m.judged)
    assert float(m.cost_usd) == 0.0 == float(m.gpu_seconds) == float(m.admitted)


def test_routing_conserves_requests(task):
    _, _, arrivals = task
    rng = np.random.default_rng(0)
    a = at(arrivals, 3)
    fields = ("count", "prompt_tokens", "output_tokens", "prompt_sq_tokens")
    for case in range(24):
        weights = rng.exponential(size=5) * (rng.random(5) < 0.7)
        receiving = rng.random(5) < (0.0 if case == 0 else 0.6)
        per, lost = fleet.route(a, jnp.asarray(weights, jnp.float32), jnp.asarray(receiving))
        for f in fields:
            total = np.sum(np.asarray(getattr(per, f), np.float64), axis=0) + np.asarray(getattr(lost, f))
            np.testing.assert_allclose(total, getattr(a, f), rtol=1e-6, err_msg=f"case {case} {f}")
            assert np.all(np.asarray(getattr(per, f))[~receiving] == 0.0)
        np.testing.assert_allclose(float(jnp.sum(per.rate)) + float(lost.rate), float(a.rate), rtol=1e-6)
        assert (float(jnp.sum(lost.count)) > 0) == (not receiving.any())
        np.testing.assert_array_equal(per.prompt_strata[0], a.prompt_strata)


def test_least_loaded_fills_the_emptiest_replicas_to_one_level(task):
    sp, config, arrivals = task
    state = fleet.initial_fleet(config, sp.num_age_buckets, 4, 4)
    held = jnp.asarray([5.0, 0.0, 2.0, 1.0], jnp.float32)
    state = state.replace(servers=state.servers.replace(running=state.servers.running.replace(seqs=held)),
                          draining=jnp.asarray([False, False, False, True]))
    for total, expected in ((4.0, [0.0, 3.0, 1.0, 0.0]), (20.0, [4.0, 9.0, 7.0, 0.0])):
        a = at(arrivals, 0).replace(count=jnp.asarray([0.0, total, 0.0], jnp.float32))
        weights = fleet.least_loaded_weights(state, a)
        np.testing.assert_allclose(weights, expected, rtol=1e-6, atol=1e-6)
        per, lost = fleet.route(a, weights, state.receiving)
        after = np.asarray(held) + np.asarray(jnp.sum(per.count, axis=1))
        filled = np.asarray(per.count[:3, 1]) > 0.0
        level = after[:3][filled]
        np.testing.assert_allclose(level, level[0], rtol=1e-6)  # the filled ones end level ...
        assert np.all(after[:3][~filled] >= level[0] - 1e-5)  # ... at most as high as the others
        assert float(jnp.sum(lost.count)) == 0.0


@pytest.mark.parametrize("provision_s", [0.3, 1.0, 2.5, 7.0])
def test_warming_replicas_become_active_after_ceil_provision_over_dt(task, provision_s):
    sp, config, arrivals = task
    state = fleet.scale_to(fleet.initial_fleet(config, sp.num_age_buckets, 2, 1), 2, provision_s)
    assert bool(state.warming[1]) and not bool(state.active[1])
    expected = math.ceil(provision_s / float(sp.dt_s))
    for i in range(expected):
        assert not bool(state.active[1]), f"active after {i} of {expected} intervals"
        state, m = STEP(state, at(arrivals, i), jnp.ones((2,), jnp.float32), config, sp)
        assert float(m.replica.admitted[1]) == 0.0  # a warming replica serves nothing ...
        np.testing.assert_allclose(m.gpu_seconds, 2.0 * sp.dt_s, rtol=1e-6)  # ... but holds its GPU
    assert bool(state.active[1]) and float(state.warming_s[1]) == 0.0
    state, m = STEP(state, at(arrivals, expected), jnp.ones((2,), jnp.float32), config, sp)
    assert float(m.replica.admitted[1]) > 0.0


def test_scale_to_drains_retires_and_recalls(task):
    sp, config, arrivals = task
    state = fleet.initial_fleet(config, sp.num_age_buckets, 3, 3)
    weights = jnp.ones((3,), jnp.float32)
    for i in range(5):
        state, _ = STEP(state, at(arrivals, i), weights, config, sp)
    assert float(fleet.pooled_requests(state.servers)[2]) > 1.0
    recalled = fleet.scale_to(fleet.scale_to(state, 1, 60.0), 3, 60.0)  # drained then recalled: no delay
    assert bool(jnp.all(recalled.active & ~recalled.draining)) and not bool(jnp.any(recalled.warming))
    state = fleet.scale_to(state, 1, 60.0)
    np.testing.assert_array_equal(state.draining, [False, True, True])
    for i in range(300):
        if not bool(jnp.any(state.active[1:])):
            break
        state, m = STEP(state, at(arrivals, i % STEPS), weights, config, sp)
        assert np.all(np.asarray(state.servers.queue.count)[1:, :, 0] == 0.0)  # no new arrivals
        assert float(m.residue) < 2 * fleet.EMPTY_BELOW_REQUESTS
    assert not bool(jnp.any(state.active[1:])) and not bool(jnp.any(state.draining)), "never retired"
    assert float(jnp.sum(state.servers.running.seqs[1:])) == 0.0 and not bool(jnp.any(state.servers.started[1:]))
    state, m = STEP(state, at(arrivals, 0), weights, config, sp)
    np.testing.assert_allclose(m.cost_usd, m.replica.cost_usd[0], rtol=1e-6)  # only replica 0 billed
    up = fleet.scale_to(state, 2, 0.0)  # no delay: active at once, the lowest idle index
    np.testing.assert_array_equal(up.active, [True, True, False])


def test_bad_input_is_refused_with_the_name_and_range(task):
    sp, config, arrivals = task
    state = fleet.initial_fleet(config, sp.num_age_buckets, 2, 1)
    with pytest.raises(ValueError, match="target_active"):
        fleet.scale_to(state, 3, 10.0)
    with pytest.raises(ValueError, match="provision_s"):
        fleet.scale_to(state, 1, -1.0)
    with pytest.raises(ValueError, match="weights"):
        fleet.fleet_interval(state, at(arrivals, 0), jnp.asarray([1.0, -1.0]), config, sp)
    with pytest.raises(ValueError, match="config.batch_size"):
        fleet.fleet_interval(state, at(arrivals, 0), jnp.ones((2,)), config.replace(batch_size=jnp.ones((3,))), sp)
    with pytest.raises(ValueError, match="num_active"):
        fleet.initial_fleet(config, sp.num_age_buckets, 2, 3)


def test_fleet_interval_traces_once_and_vmaps_over_fleets(task):
    sp, config, arrivals = task
    r = 2

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(state, a, weights, configs):
        return fleet.fleet_interval(state, a, weights, configs, sp)

    state = fleet.initial_fleet(config, sp.num_age_buckets, r, r)
    configs = fleet.stack_configs(config, r)
    for i, (w, batch) in enumerate(((1.0, 32.0), (0.2, 64.0), (3.0, 8.0))):
        state, m = step(state, at(arrivals, i), jnp.asarray([1.0, w], jnp.float32),
                         configs.replace(batch_size=jnp.asarray([32.0, batch], jnp.float32)))
    chex.assert_tree_all_finite(m)
    # Eight fleets in one vmap: different weights and sizes, the same arrivals.
    fleets = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 8), fleet.initial_fleet(config, sp.num_age_buckets, r, r))
    fleets = fleets.replace(active=jnp.asarray([[True, k % 2 == 0] for k in range(8)]))
    weights = jnp.asarray([[1.0, 0.1 * k] for k in range(8)], jnp.float32)
    batched = jax.jit(jax.vmap(fleet.fleet_interval, in_axes=(0, None, 0, None, None)))
    out, metrics = batched(fleets, at(arrivals, 0), weights, config, sp)
    chex.assert_tree_all_finite(metrics)
    assert metrics.cost_usd.shape == (8,) and out.servers.queue.count.shape[:2] == (8, r)
    np.testing.assert_allclose(metrics.lost, 0.0)
    np.testing.assert_allclose(metrics.arrived, float(jnp.sum(arrivals.count[0])), rtol=1e-6)
    assert float(metrics.gpu_seconds[0]) == 2.0 * float(sp.dt_s) and float(metrics.gpu_seconds[1]) == float(sp.dt_s)


def test_a_busy_replica_is_joined_only_when_every_other_one_is_busy(task):
    """`routing.busy_join_share` (what joins a replica beside a request it holds, behind a
    least-loaded router): 1 alone; with N receiving, P(Poisson(K) >= N - 1) for K requests in the
    fleet (the Poisson tail summed here), rising with K; draining replicas are not counted."""
    sp, config, _ = task
    state = fleet.initial_fleet(config, sp.num_age_buckets, 4, 4)

    def share(held, draining=(False,) * 4):
        s = state.replace(servers=state.servers.replace(running=state.servers.running.replace(
            seqs=jnp.asarray(held, jnp.float32))), draining=jnp.asarray(draining))
        return float(routing.busy_join_share(s.servers, s.receiving))

    def tail(k, n):  # P(Poisson(k) >= n)
        return 1.0 - sum(math.exp(-k) * k**i / math.factorial(i) for i in range(n))

    assert share([0.5, 0.0, 0.0, 0.0], (False, True, True, True)) == 1.0  # a lone receiving replica
    assert share([0.0] * 4) == 0.0
    for held in ([1.0, 0.5, 0.5, 0.0], [2.0, 1.0, 1.0, 1.0], [6.0, 5.0, 4.0, 5.0]):
        assert share(held) == pytest.approx(tail(sum(held), 3), rel=1e-5)
    assert share([1.0, 1.0, 1.0, 0.0]) < share([2.0, 2.0, 2.0, 0.0]) < share([4.0, 4.0, 4.0, 0.0])
    assert share([3.0, 0.0, 0.0, 9.0], (False, False, False, True)) == pytest.approx(tail(3.0, 2), rel=1e-5)
