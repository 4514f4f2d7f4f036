"""The "clamped" prompt-length strata (workload's `length_strata` rule, traffic.strata): the
law's strata with none above its longest prompt."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import inferencegym_jax as ig
from inferencegym_jax import serving
from inferencegym_jax.serving import iteration, mixed
from inferencegym_jax.testing.reference import to_numpy
from inferencegym_jax.testing.reference import traffic as ref_traffic
from inferencegym_jax.traffic import strata, workload

W = np.asarray(strata.LENGTH_STRATA_W)
capped = jax.jit(strata.capped_strata)


@settings(max_examples=60, deadline=None)
@given(log_sd=st.floats(0.0, 2.0), cap=st.floats(0.0, 200.0))
def test_capped_strata_keep_the_mean_and_order_within_the_cap(log_sd, cap):
    law = np.asarray(strata.length_strata(jnp.full((3,), log_sd, jnp.float32)))
    caps = np.full(3, cap, np.float32)
    got = np.asarray(capped(law, caps))
    np.testing.assert_allclose(got @ W, 1.0, rtol=2e-5)
    assert np.all(got <= max(cap, 1.0) * (1 + 2e-6)), "no stratum above the cap"
    assert np.all(np.diff(got, axis=-1) >= -1e-6), "the strata stay in order"
    if cap <= 1.0:
        np.testing.assert_allclose(got, 1.0, rtol=1e-6)  # a cap at the mean: every stratum is the mean
    if cap >= law.max():
        np.testing.assert_allclose(got, law, rtol=1e-5, atol=1e-6)  # the cap does not bind
    np.testing.assert_allclose(got, ref_traffic.capped_strata(law[None], caps[None])[0], rtol=2e-6, atol=2e-6)


def test_a_lone_longest_prompt_waits_for_its_own_prefill_only():
    """One request at the clamped law's longest prompt (Fleet1's code service: 7,437 tokens) on an
    idle engine. Under "clamped" no length node is above the clamp, so the TTFT law's longest own
    service is that prompt's prefill; under "moments" the top node is 4.6 times the interval's mean
    (the 0.44 % of first tokens past 2 s at 0.05 req/s in
    experiments/results/lone_replica_misses.json, where that prompt prefills in 0.6 s)."""
    _, params = ig.make("InferenceGym-Task1-v2")
    prompt_law = workload.length_dist("lognormal", 3.0, 7437.0, median1=1801.0, sigma1=1.36)

    @jax.jit
    def laws_and_own(server):  # one program, not op by op
        count, prompt = jnp.asarray([0.0, 1.0, 0.0]), jnp.asarray([0.0, 7437.0, 0.0])
        profile = mixed.mixed_profile(serving.select_profile(server.profiles, 0))
        it = iteration.iterations(profile, jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0),
                                  server.max_batched_tokens, jnp.asarray(False))
        moments = strata.length_strata(strata.log_sd_of(*workload.length_moments(prompt_law)))
        by_rule = {"moments": moments, "clamped": strata.capped_strata(moments, jnp.ones(3))}  # high / mean = 1
        laws = {rule: mixed.arrivals_law(workload.Arrivals(count, prompt, count * 10.0, prompt * prompt,
                                                           jnp.float32(1.0), node_strata), it, server.dt_s)
                for rule, node_strata in by_rule.items()}
        return laws, iteration.prompt_service_s(it, jnp.float32(7437.0))

    laws, own = laws_and_own(params.server)
    own = float(own)
    assert float(laws["clamped"].prompt[1, -1]) == pytest.approx(7437.0, rel=1e-5)
    assert float(laws["clamped"].service_s[1, -1]) == pytest.approx(own, rel=1e-5)
    assert float(laws["moments"].prompt[1, -1]) > 4.0 * 7437.0
    assert float(laws["moments"].service_s[1, -1]) > 3.0 * own


@pytest.mark.parametrize("env_id", [
    pytest.param("InferenceGym-Task2-v2", marks=pytest.mark.slow),  # periodic, lognormal prompts
    "InferenceGym-Task3-v2",  # mmpp, bimodal prompts, a burst law of its own
])
def test_workload_arrivals_match_the_numpy_reference(env_id):
    _, params = ig.make(env_id, workload={"length_strata": "clamped"})
    wl, dt = params.workload, params.server.dt_s
    t_s = jnp.float32(dt) * 37.0
    by_rule = {rule: dataclasses.replace(wl, length_strata=rule) for rule in ("clamped", "moments")}

    @jax.jit
    def run(keys):  # one program: both rules on the same draws
        states = jax.vmap(workload.init, in_axes=(0, None, None))(keys, wl, jnp.float32(600.0))
        draws = jax.vmap(workload.draw, in_axes=(0, 0, None, None, None))(keys, states, t_s, dt, wl)
        step = jax.vmap(workload.advance, in_axes=(0, 0, None, None, None))
        return states, draws, {rule: step(draws, states, t_s, dt, p)[1] for rule, p in by_rule.items()}

    states, draws, arrivals = run(jax.random.split(jax.random.key(3), 64))
    got = to_numpy(arrivals["clamped"])
    p = to_numpy(params).workload
    moments = {name: ref_traffic.length_moments(getattr(p, name)) for name in ("prompt", "output", "burst_prompt")}
    want = ref_traffic.advance(to_numpy(draws), to_numpy(states), np.float32(t_s), np.float32(dt), p, moments)[1]
    np.testing.assert_allclose(got.prompt_strata, want.prompt_strata, rtol=5e-5, atol=2e-6)
    # the rule changes the strata only: the counts and sums are those of the "moments" rule
    by_moments = arrivals["moments"]
    np.testing.assert_array_equal(np.asarray(by_moments.prompt_tokens), got.prompt_tokens)
    busy = got.count > 0
    nodes = (got.prompt_tokens / np.maximum(got.count, 1.0))[..., None] * got.prompt_strata
    high = max(float(wl.prompt.high[0]), float(wl.burst_prompt.high[0]))
    assert np.all(nodes[busy] <= high * (1 + 1e-5)), "no length node above the law's longest prompt"
    moments_nodes = (got.prompt_tokens / np.maximum(got.count, 1.0))[..., None] * np.asarray(by_moments.prompt_strata)
    assert np.any(moments_nodes[busy] > high), "the moments rule's nodes pass the clamp on these draws"
