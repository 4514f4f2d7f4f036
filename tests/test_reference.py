"""The NumPy reference and the JAX env agree, and the env's samplers draw what they claim.

Parity: on the physics tasks (tests/helpers.py; both engines, the mixed one of serving.mixed on
task 3-v2 and task 4-v2), both implementations get the same state, actions and random draws and
must return the same observation, reward, flags and next state within float32 tolerance, step by
step (teacher-forced) and over a free-running episode with two auto-resets.
The draws are made from public functions exactly as `env.step` makes them: per env,
u = sampling.uniforms(key, env.DRAWS_PER_STEP), the interval's draws from its first
workload.STEP_DRAWS uniforms, an auto-reset from the rest. The roofline is compared on its
own at a tighter tolerance, as are the mixed engine's iteration model and fresh-arrival TTFT law,
and the server at amounts around the EPS guard, so that a constant of the reference that differs
from the simulator's fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import pkgutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import PHYSICS_TASK_IDS, physics_task_params
from scipy import stats

import inferencegym_jax as ig
from inferencegym_jax import env as env_module
from inferencegym_jax import perf_model, serving
from inferencegym_jax.serving import fresh_ttft, iteration
from inferencegym_jax.testing import reference
from inferencegym_jax.testing.reference import fresh_ttft as ref_fresh_ttft
from inferencegym_jax.testing.reference import iteration as ref_iteration
from inferencegym_jax.testing.reference import roofline
from inferencegym_jax.traffic import sampling, strata, workload

NUM_ENVS, NUM_STEPS, HORIZON = 16, 24, 10
# The physics tasks and the mixed engine's (serving.mixed): an MMPP task and a trace task.
MIXED_TASK_IDS = ["InferenceGym-Task3-v2", "InferenceGym-Task4-v2"]
# The fast tier runs the fast physics task and task 3-v2 (the mixed engine); the slow tier the others.
# Variants: an env id, "+", and the options of VARIANTS (per-request TPOT, serving.request_tpot).
VARIANTS = {"request": {"server": {"slo_accounting": "request"}}}
PARITY_TASKS = [pytest.param(p.values[0], id=p.id) if p.id == MIXED_TASK_IDS[0] else p
                for p in physics_task_params(list(dict.fromkeys(PHYSICS_TASK_IDS + MIXED_TASK_IDS)))]
REQUEST_VARIANT = f"{MIXED_TASK_IDS[1]}+request"
PARITY_TASKS += [pytest.param(REQUEST_VARIANT, id=REQUEST_VARIANT, marks=pytest.mark.slow)]
FULL_GRID = (10, 5, 13, 2, 3)  # grid sizes of the five knobs: masked knobs get indices too, both must clip them
# The pytree classes the reference may import from the JAX side, to build its outputs in the same structure.
SHARED_CLASSES = {"ServerState", "Queue", "Sequences", "OnTime", "TpotCohorts", "IntervalMetrics", "EnvState",
                  "Observation", "Draws", "Arrivals", "WorkloadState", "ServingAction"}


def assert_close(name: str, got, want, rtol: float = 1e-3, scale_tol: float = 1e-4, atol: float = 1e-6) -> None:
    """float32 parity: |got - want| <= rtol |want| + scale_tol max|want| + atol (exact for bools and ints).

    The absolute part is relative to the field's scale over the batch, since fields range from
    dollars per interval (1e-3) to squared tokens (1e9).
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    if not np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = np.max(np.abs(want)) if want.size else 0.0
    tol = rtol * np.abs(want) + scale_tol * scale + atol
    err = np.abs(got - want)
    if np.all(err <= tol):
        return
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    raise AssertionError(f"{name}: max error {err.max():.3g} at {worst}: got {got[worst]}, want {want[worst]}")


def assert_trees_close(prefix: str, got, want, rtol: float = 1e-3) -> None:
    got_leaves, want_leaves = jax.tree_util.tree_leaves_with_path(got), jax.tree_util.tree_leaves_with_path(want)
    assert [p for p, _ in got_leaves] == [p for p, _ in want_leaves], f"{prefix}: different tree structure"
    for (path, g), (_, w) in zip(got_leaves, want_leaves):
        assert_close(prefix + jax.tree_util.keystr(path), g, w, rtol)


def at(tree, t):
    return jax.tree_util.tree_map(lambda x: x[t], tree)


def step_uniforms(key):
    """The uniforms of one env step, as env.step draws them."""
    return sampling.uniforms(key, env_module.DRAWS_PER_STEP)


@functools.cache
def jax_rollout(env_id: str):
    """NUM_STEPS vmapped env.step calls of a task with random grid actions, as NumPy: per step the
    state in, the actions, the draws and reset uniforms step used, everything step returned, and
    what those draws and uniforms give through the public workload functions. Cached: the tests
    below share one rollout per task."""
    env_id, _, variant = env_id.partition("+")
    env, params = ig.make(env_id, max_steps=HORIZON, **VARIANTS.get(variant, {}))
    dt = params.server.dt_s
    horizon_s = params.max_steps_in_episode * dt
    vmap_envs = dict(in_axes=(0, 0, 0, None, None))

    @jax.jit
    def run(key):
        k_reset, k_steps = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, NUM_ENVS), params)

        def body(state, key):
            keys = jax.random.split(key, NUM_ENVS)
            actions = jax.random.randint(jax.random.fold_in(key, 1), (NUM_ENVS, 5), 0, jnp.asarray(FULL_GRID))
            u = jax.vmap(step_uniforms)(keys)
            t_s = state.time.astype(jnp.float32) * dt
            draws = jax.vmap(workload.draws_from_uniforms, **vmap_envs)(
                u[:, : workload.STEP_DRAWS], state.workload, t_s, dt, params.workload
            )
            u_reset = u[:, workload.STEP_DRAWS:]
            obs, next_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                keys, state, actions, params
            )
            # what these draws give, from public functions: step must have used exactly them
            _, arrivals = jax.vmap(workload.advance, **vmap_envs)(draws, state.workload, t_s, dt, params.workload)
            fresh = jax.vmap(workload.init_from_draws, in_axes=(0, None, None))(u_reset, params.workload, horizon_s)
            flat = jax.vmap(env.flatten_observation, in_axes=(0, None))(obs, params)
            out = dict(state=state, actions=actions, draws=draws, u_reset=u_reset, obs=obs, next_state=next_state,
                       reward=reward, terminated=terminated, truncated=truncated, info=info, flat_obs=flat,
                       arrivals_from_draws=dataclasses.replace(arrivals, prompt_strata=None, prompt_law=None),
                       reset_workload=fresh)
            return next_state, out

        return jax.lax.scan(body, state, jax.random.split(k_steps, NUM_STEPS))[1]

    return params, reference.to_numpy(run(jax.random.key(0)))


def moments_of(params):
    wl = params.workload
    return {name: reference.length_moments(getattr(wl, name)) for name in ("prompt", "output", "burst_prompt")}


@pytest.mark.parametrize("env_id", PARITY_TASKS)
def test_reference_matches_the_jax_env(env_id):
    params, run = jax_rollout(env_id)
    p, moments = reference.to_numpy(params), moments_of(params)
    truncated = run["truncated"]
    assert truncated.sum() == 2 * NUM_ENVS, "the episode crossed two auto-resets"
    # the draws passed to the reference are those env.step used
    assert_trees_close("arrivals of the draws", run["arrivals_from_draws"], run["info"]["arrivals"])
    for t in range(NUM_STEPS):
        done = truncated[t]
        assert_trees_close(f"t={t} reset traffic", at(at(run["reset_workload"], t), done),
                           at(at(run["next_state"], t).workload, done))
    free = at(run["state"], 0)
    for t in range(NUM_STEPS):
        inputs = (at(run["actions"], t), at(run["draws"], t), at(run["u_reset"], t), p, moments)
        # teacher-forced: the JAX state in, one step out
        r_obs, r_state, r_reward, r_term, r_trunc, r_info = reference.step(at(run["state"], t), *inputs)
        assert_trees_close(f"t={t} obs", r_obs, at(run["obs"], t))
        assert_close(f"t={t} flat obs", reference.flatten_observation(r_obs, p), run["flat_obs"][t])
        assert_trees_close(f"t={t} state", r_state, at(run["next_state"], t))
        assert_close(f"t={t} reward", r_reward, run["reward"][t])
        np.testing.assert_array_equal(r_term, run["terminated"][t])
        np.testing.assert_array_equal(r_trunc, truncated[t])
        for name in ("metrics", "applied_action", "reward_components", "arrivals", "final_observation", "clipped"):
            assert_trees_close(f"t={t} info[{name}]", r_info[name], at(run["info"][name], t))
        # free-running: the reference's own state, the same draws
        f_obs, free, f_reward, _, f_trunc, _ = reference.step(free, *inputs)
        assert_trees_close(f"free t={t} obs", f_obs, at(run["obs"], t))
        assert_trees_close(f"free t={t} state", free, at(run["next_state"], t))
        assert_close(f"free t={t} reward", f_reward, run["reward"][t])
        np.testing.assert_array_equal(f_trunc, truncated[t])
    # step_env is step without the auto-reset
    state, inputs = at(run["state"], HORIZON - 1), (at(run["actions"], HORIZON - 1), at(run["draws"], HORIZON - 1))
    e_obs, *_ = reference.step_env(state, *inputs, p, moments)
    _, _, _, _, _, info = reference.step(state, *inputs, at(run["u_reset"], HORIZON - 1), p, moments)
    assert_trees_close("step_env obs", e_obs, info["final_observation"])


TIGHT = dict(rtol=2e-6, scale_tol=0.0, atol=0.0)  # float32 rounding of two formulations of one formula


@pytest.mark.parametrize("env_id", physics_task_params())
def test_roofline_matches_perf_model(env_id):
    """The roofline alone, at 2e-6 (a few float32 ulp): a grid of batches, contexts and (fractional)
    draft lengths on every tier; prefill passes; mixed iterations (a chunk beside the decodes, a lone
    chunk at batch 0); the prefill throughput admission uses; KV capacity."""
    _, params = ig.make(env_id)
    profiles = params.server.profiles
    batch, context, spec = (x.ravel() for x in np.meshgrid([1.0, 7.0, 64.0, 512.0], [0.0, 300.0, 6000.0],
                                                           [0.0, 1.0, 1.5, 3.0, 4.0, 6.0, 8.0], indexing="ij"))
    n = len(batch)
    for tier in range(3):
        p = roofline.select_profile(reference.to_numpy(profiles), np.full(n, tier))
        jp = serving.select_profile(profiles, tier)
        assert_close(f"tier {tier} tokens_per_step", roofline.tokens_per_step(p, spec),
                     jax.vmap(perf_model.tokens_per_step, in_axes=(None, 0))(jp, spec), **TIGHT)
        want = jax.vmap(perf_model.decode_step_time, in_axes=(None, 0, 0, 0))(jp, batch, context, spec)
        assert_close(f"tier {tier} decode_step_time", roofline.decode_step_time(p, batch, context, spec), want, **TIGHT)
        tokens, seqs = 40.0 * batch, np.maximum(batch / 4.0, 1.0)
        want = jax.vmap(perf_model.prefill_time, in_axes=(None, 0, 0, 0))(jp, tokens, seqs, tokens * tokens / seqs)
        assert_close(f"tier {tier} prefill_time", roofline.prefill_time(p, tokens, seqs, tokens * tokens / seqs),
                     want, **TIGHT)
        chunk = np.resize(np.asarray([0.0, 1.0, 37.0, 300.0, 2048.0], np.float32), n)  # batch 0: a lone chunk
        b = np.where(np.arange(n) % 3 == 0, 0.0, batch).astype(np.float32)
        want = jax.vmap(perf_model.mixed_step_time, in_axes=(None, 0, 0, 0, 0))(jp, b, context, spec, chunk)
        assert_close(f"tier {tier} mixed_step_time", roofline.mixed_step_time(p, b, context, spec, chunk), want,
                     **TIGHT)
        assert_close(f"tier {tier} prefill_throughput", roofline.prefill_throughput(p)[:1],
                     np.asarray(perf_model.prefill_throughput(jp))[None], **TIGHT)
        budget = np.linspace(0.1, 1.0, n).astype(np.float32)
        assert_close(f"tier {tier} kv capacity", roofline.kv_capacity_tokens(p, budget),
                     jax.vmap(perf_model.kv_capacity_tokens, in_axes=(None, 0))(jp, budget), **TIGHT)


def test_mixed_iterations_and_fresh_law_match_serving():
    """The mixed engine's iteration model (chunk-time knots, g(k) read off them, a prompt's own
    service) and the fresh arrivals' TTFT law on their own, at 2e-5 (a few float32 ulp through the
    chain's divisions; g is a difference of two step times, so it is compared at 2e-5 of the
    batch's largest): pools from empty to past the chunk budget, both context sizes, speculation,
    a prefill GPU, tiers; loads from idle to the chain's RHO_CLIP; one-class and three-class traffic."""
    _, params = ig.make("InferenceGym-Task3-v2")
    profiles = params.server.profiles
    mbt = params.server.max_batched_tokens
    pool, context, spec, disagg, tier = (x.ravel() for x in np.meshgrid(
        [0.0, 0.4, 1.0, 7.0, 64.0, 600.0], [0.0, 2500.0], [0.0, 2.0], [False, True], [0, 2], indexing="ij"))
    pool, context, spec = (x.astype(np.float32) for x in (pool, context, spec))
    n = len(pool)
    rng = np.random.default_rng(5)
    count = (rng.poisson(rng.choice([0.5, 4.0, 40.0], n)[:, None] * np.ones(3)) * (rng.random((n, 3)) < 0.8)
             ).astype(np.float32)
    prompt = (count * rng.uniform(50.0, 6000.0, (n, 3))).astype(np.float32)
    log_sd = rng.choice([0.0, 0.6, 1.3], (n, 3)).astype(np.float32)
    strata_ = np.asarray(jax.vmap(strata.length_strata)(log_sd))
    tokens = np.resize(np.asarray([0.0, 1.0, 20.0, 150.0, 900.0, 2047.0, 2049.0, 9000.0], np.float32), (n, 8))

    def jax_side(p, pool, context, spec, disagg, count, prompt, strata_, tokens):
        it = iteration.iterations(p, pool, context, spec, mbt, disagg)
        law = fresh_ttft.fresh_law(it, count, prompt, strata_, params.server.dt_s)
        return it, iteration.chunk_time_s(it, tokens), iteration.prompt_service_s(it, tokens), law

    jp = jax.vmap(serving.select_profile, in_axes=(None, 0))(profiles, tier)
    it, g, service, law = jax.jit(jax.vmap(jax_side))(jp, pool, context, spec, disagg, count, prompt, strata_, tokens)
    p = roofline.select_profile(reference.to_numpy(profiles), tier)
    r_it = ref_iteration.iterations(p, pool, context, spec, np.float32(mbt), disagg)
    r_law = ref_fresh_ttft.fresh_law(r_it, count, prompt, strata_, np.float32(params.server.dt_s))
    tight = dict(rtol=2e-5, scale_tol=0.0, atol=0.0)
    for name in ("step_s", "decode_s", "token_s", "chunk_tokens", "prefill_share"):
        assert_close(f"iterations.{name}", getattr(r_it, name), getattr(it, name), **tight)
    assert_close("chunk knots", r_it.knots_s, it.chunk_knots_s, rtol=2e-5, scale_tol=2e-5, atol=0.0)
    assert_close("chunk_time_s", ref_iteration.chunk_time_s(r_it, tokens), g, rtol=2e-5, scale_tol=2e-5, atol=0.0)
    assert_close("prompt_service_s", ref_iteration.prompt_service_s(r_it, tokens), service, **tight)
    for name in ("node_weight", "prompt", "service_s", "wait_mean_s", "wait_var_s2", "iteration_s"):
        assert_close(f"fresh_law.{name}", getattr(r_law, name), getattr(law, name), rtol=2e-5, scale_tol=1e-6,
                     atol=0.0)
    assert np.mean(np.asarray(law.wait_var_s2) > 0) > 0.5 and np.ptp(np.asarray(law.iteration_s)) > 0


def shrink_server(state, arrivals, factor):
    """Server states and arrivals with every amount times `factor` (N,)."""
    def scale(x):
        return x * factor.reshape((-1,) + (1,) * (x.ndim - 1)) if np.issubdtype(x.dtype, np.floating) else x

    smaller = serving.ServerState(
        jax.tree_util.tree_map(scale, state.queue), jax.tree_util.tree_map(scale, state.running),
        jax.tree_util.tree_map(scale, state.preempted), state.stall_s, state.prefill_warmup_s, state.config,
        state.started, jax.tree_util.tree_map(scale, state.on_time),
        None if state.tpot is None else state.tpot.scaled(factor[:, None, None]),  # amounts, not per-sequence means
    )
    return smaller, jax.tree_util.tree_map(scale, arrivals)


@pytest.mark.parametrize("env_id", PARITY_TASKS)
def test_serve_interval_matches_at_the_smallest_amounts(env_id):
    """Queues, pools and arrivals of a few requests' millionths (either side of the EPS guard):
    the guards must cut at the same amount in both implementations."""
    params, run = jax_rollout(env_id)
    state, arrivals, config = (at(x, NUM_STEPS // 2) for x in (run["state"].server, run["info"]["arrivals"],
                                                               run["info"]["applied_action"]))
    factors = np.repeat(np.asarray([0.0, 3e-8, 3e-7, 3e-6, 3e-5], np.float32), NUM_ENVS // 4)
    pick = np.arange(len(factors)) % NUM_ENVS
    state, arrivals, config = (at(x, pick) for x in (state, arrivals, config))
    state, arrivals = shrink_server(state, arrivals, factors)
    server_params = params.server
    want = jax.jit(jax.vmap(serving.serve_interval, in_axes=(0, 0, 0, None)))(state, arrivals, config, server_params)
    got = reference.serve_interval(state, arrivals, config, reference.to_numpy(server_params))
    for tiny in np.unique(factors):
        rows = factors == tiny
        assert_trees_close(f"x{tiny:g}", at(got, rows), at(reference.to_numpy(want), rows))


def reference_sources() -> dict[str, str]:
    """Module name -> source of every module of the reference package."""
    out = {reference.__name__: inspect.getsource(reference)}
    for info in pkgutil.iter_modules(reference.__path__, reference.__name__ + "."):
        module = __import__(info.name, fromlist=["_"])
        out[info.name] = inspect.getsource(module)
    return out


def shared_with_the_jax_side(source: str) -> list[str]:
    """What a module's source takes from the JAX side beyond the pytree classes of its outputs:
    imports of anything else from inferencegym_jax (modules, constants, functions, private
    names), private attributes (`._x`) and jax.numpy."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inferencegym_jax"):
            if not node.module.startswith(reference.__name__):
                found += [f"line {node.lineno}: from {node.module} import {alias.name}" for alias in node.names
                          if alias.name not in SHARED_CLASSES]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name.startswith(("inferencegym_jax", "jax.numpy"))]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "jnp":
            found.append(f"line {node.lineno}: jnp")
    return found


def test_reference_shares_no_constant_with_the_jax_side():
    """The reference's modules take only the pytree classes of its outputs from the JAX side."""
    bad = ("from inferencegym_jax.numerics import EPS\n"
           "from inferencegym_jax import serving\n"
           "from inferencegym_jax.serving import Queue, _EPS\n"
           "import inferencegym_jax.perf_model\n"
           "x = serving._PREFILL_REF_TOKENS\n")
    assert len(shared_with_the_jax_side(bad)) == 5, shared_with_the_jax_side(bad)
    sources = reference_sources()
    assert len(sources) >= 8, sorted(sources)
    for name, source in sources.items():
        assert shared_with_the_jax_side(source) == [], name


def test_reference_env_runs_with_its_own_sampler():
    env, params = ig.make("InferenceGym-Task3-v0")
    ref = reference.ReferenceEnv(params, num_envs=32, seed=0)
    obs = ref.reset()
    assert obs.queue_depth.shape == (32,)
    actions = np.random.default_rng(1).integers(0, env.action_space(params).nvec, (20, 32, 5))
    rewards, tokens = [], []
    for a in actions:
        obs, reward, terminated, truncated, info = ref.step(a)
        rewards.append(reward)
        tokens.append(info["metrics"].tokens_per_s)
    rewards = np.stack(rewards)
    assert rewards.dtype == np.float32 and np.all(np.isfinite(rewards))
    assert rewards.min() >= -1.0 and rewards.max() <= 1.0
    assert obs.queue_depth.max() > 0 and np.mean(tokens) > 0


@pytest.mark.parametrize("lam", [0.0, 0.3, 2.5, 15.0, sampling.POISSON_EXACT_MAX])
def test_poisson_quantile_is_the_exact_inverse_cdf(lam):
    """Below POISSON_EXACT_MAX a count is exactly the Poisson quantile of its uniform; it may
    differ only where u is within float32 rounding of a CDF step."""
    u = (np.arange(8192) + 0.5) / 8192
    got = np.asarray(sampling.poisson_from_uniform(jnp.asarray(u, jnp.float32), lam))
    want = stats.poisson.ppf(u, lam)
    near_step = np.abs(u - stats.poisson.cdf(np.minimum(got, want), lam)) < 1e-5
    assert np.all((got == want) | near_step), f"lam={lam}: {np.sum(got != want)} counts differ"


@pytest.mark.parametrize("lam", [40.0, 300.0])
def test_poisson_quantile_above_the_switch_is_close(lam):
    """Above it (Cornish-Fisher): the quantile differs for < 1 % of u, mean and variance agree."""
    u = (np.arange(65536) + 0.5) / 65536
    got = np.asarray(sampling.poisson_from_uniform(jnp.asarray(u, jnp.float32), lam), np.float64)
    want = stats.poisson.ppf(u, lam)
    assert np.mean(got != want) < 0.01
    assert abs(got.mean() - lam) < 1e-3 * lam and abs(got.var() / lam - 1.0) < 5e-3


def test_uniforms_are_jax_random_uniform_bit_for_bit():
    with jax.threefry_partitionable(False):
        for seed in range(3):
            key = jax.random.fold_in(jax.random.key(seed), 7)
            for n in (1, 2, 3, workload.STEP_DRAWS + workload.RESET_DRAWS):
                np.testing.assert_array_equal(sampling.uniforms(key, n), jax.random.uniform(key, (n,)))
    u = sampling.uniforms(jax.random.key(3), 4096 * 2)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0 and abs(float(u.mean()) - 0.5) < 0.01
