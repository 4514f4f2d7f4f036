"""Whole-request routing (fleet.request_routing): the law of each replica's arrivals, refusals, and the
v2 fleet task's two rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.fleet import request_routing
from inferencegym_jax.fleet.tasks import make_fleet
from inferencegym_jax.traffic import sampling, workload

DRAWS = 4096  # intervals drawn: the means below are within 4 standard errors


@pytest.fixture(scope="module")
def traffic():
    _, params = make_fleet("InferenceGym-Fleet1-v2")
    wl = params.workload.replace(base_rate=jnp.float32(6.0))  # 6 req/s: the fleet's night
    return wl, workload.init(jax.random.key(0), wl, jnp.float32(600.0))


def routed(traffic, share, lost_share):
    wl, state = traffic
    r = share.shape[0]

    def one(key):
        u = sampling.uniforms(key, request_routing.routing_draws(r))
        return request_routing.route_requests(u, share, lost_share, state, jnp.float32(0.0), jnp.float32(1.0), wl)

    return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(1), DRAWS))


def test_each_replica_gets_poisson_requests_at_its_share_with_their_own_lengths(traffic):
    wl, _ = traffic
    share = jnp.asarray([0.5, 0.3, 0.2, 0.0], jnp.float32)
    per_replica, lost = routed(traffic, share, jnp.float32(0.0))
    count = np.asarray(per_replica.count[..., 1], np.float64)  # (draws, R): class 1 carries the traffic
    mean = 6.0 * np.asarray(share)
    se = np.sqrt(np.maximum(mean, 1e-9) / DRAWS)
    assert np.all(np.abs(count.mean(axis=0) - mean) < 4 * se + 1e-9), count.mean(axis=0)
    assert np.all(np.abs(count.var(axis=0) - mean) < 0.1 * mean + 1e-9)  # Poisson: variance = mean
    assert np.all(count == np.round(count)) and np.all(count[:, 3] == 0.0)
    assert abs(np.corrcoef(count[:, 0], count[:, 1])[0, 1]) < 0.06  # thinned streams are independent
    m1 = float(workload.length_moments(wl.prompt)[0][1])
    prompt = np.asarray(per_replica.prompt_tokens[..., 1], np.float64)
    busy = count[:, 0] > 0
    ratio = prompt[busy, 0].sum() / count[busy, 0].sum()
    assert abs(ratio / m1 - 1.0) < 0.03
    low, high = float(wl.prompt.low[1]), float(wl.prompt.high[1])
    assert np.all(prompt >= count * low - 1e-3) and np.all(prompt <= count * high + 1e-3)
    assert float(jnp.sum(lost.count)) == 0.0 and lost.prompt_strata is None


def test_one_request_is_one_whole_prompt_within_the_law(traffic):
    """Clamped strata: with one request no length node exceeds the law's longest prompt."""
    wl, _ = traffic
    per_replica, _ = routed(traffic, jnp.full((6,), 1.0 / 6.0, jnp.float32), jnp.float32(0.0))  # 1 req/s each
    one = np.asarray(per_replica.count[..., 1]) == 1.0
    mean = np.asarray(per_replica.prompt_tokens[..., 1])[one]
    top = np.asarray(per_replica.prompt_strata[..., 1, :]).max(axis=-1)[one] * mean
    assert one.sum() > 1000 and np.all(top <= float(wl.prompt.high[1]) * (1 + 1e-5))


def test_with_no_replica_receiving_everything_is_refused(traffic):
    per_replica, lost = routed(traffic, jnp.zeros(3, jnp.float32), jnp.float32(1.0))
    assert float(jnp.sum(per_replica.count)) == 0.0
    assert abs(float(jnp.mean(jnp.sum(lost.count, axis=-1))) - 6.0) < 4 * np.sqrt(6.0 / DRAWS)


def greedy_reference(count, load, receiving):
    """Join-the-shortest-queue one request at a time (NumPy, float64): classes in order, ties to
    the lowest index."""
    level = np.where(receiving, load, np.inf).astype(np.float64)
    given = np.zeros((len(load), 3))
    if receiving.any():
        for c in range(3):
            for _ in range(int(count[c])):
                r = int(np.argmin(level))
                level[r] += 1.0
                given[r, c] += 1.0
    return given


def test_jsq_gives_each_request_to_the_replica_with_the_fewest():
    rng = np.random.default_rng(0)
    jitted = jax.jit(request_routing.jsq_counts)
    for _ in range(60):
        r = int(rng.integers(1, 17))
        load = (np.round(rng.uniform(0, 6, r) * 4) / 4 * rng.integers(0, 2)).astype(np.float32)  # exact in float32
        receiving = rng.random(r) < 0.8
        count = rng.integers(0, 40, 3).astype(np.float32)
        got = np.asarray(jitted(jnp.asarray(count), jnp.asarray(load), jnp.asarray(receiving)))
        np.testing.assert_array_equal(got, greedy_reference(count, load, receiving))


def test_a_replay_cannot_be_routed_request_by_request(traffic):
    wl, state = traffic
    with pytest.raises(ValueError, match="schedule='trace'"):
        request_routing.expected_counts(state, jnp.float32(0.0), jnp.float32(1.0), wl.replace(schedule="trace"))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"fleet": {"even_unit": "whole"}}, "even_unit"),
    ({"fleet": {"least_loaded_unit": 1}}, "least_loaded_unit"),
])
def test_bad_routing_unit_names_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        ig.make("InferenceGym-Fleet1-v2", **overrides)


def test_v2_steps_both_rules_and_keeps_every_request():
    """A small v2 fleet (4 replicas, 5-s control intervals): per rule, one jitted program; every
    arrival is admitted, refused or still waiting, and rewards and observations stay finite."""
    env, params = ig.make("InferenceGym-Fleet1-v2", max_steps=6,
                          fleet={"num_replicas": 4, "initial_replicas": 3, "control_interval_s": 5.0})
    assert params.routing_units == ("fluid", "request")
    step = jax.jit(env.step_env)
    for rule in (0, 1):
        _, state = env.reset(jax.random.key(rule), params)
        arrived = admitted = lost = 0.0
        for t in range(6):
            obs, state, reward, _, _, info = step(jax.random.key(10 + t), state, jnp.asarray([3, rule]), params)
            totals = info["totals"]
            arrived, admitted, lost = arrived + totals.arrived, admitted + totals.admitted, lost + totals.lost
            assert np.isfinite(float(reward)) and np.all(np.isfinite(np.asarray(env.flatten_observation(obs, params))))
        unaccounted = float(arrived) - float(admitted) - float(lost) - float(totals.queue_depth)
        assert float(arrived) > 0 and abs(unaccounted) < 1e-3 * float(arrived)


def test_unknown_routing_units_are_refused_before_tracing():
    env, params = ig.make("InferenceGym-Fleet1-v2", max_steps=2, fleet={"num_replicas": 2, "initial_replicas": 2})
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match="routing_units"):
        env.step(jax.random.key(1), state, jnp.asarray([2, 1]), params.replace(routing_units=("fluid", "whole")))
