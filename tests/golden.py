"""Golden trajectories: what the env, the evaluation path and one PPO run produce under fixed keys.

    python tests/golden.py            # (re)record tests/data/golden.npz from the installed package
    python tests/golden.py --check    # compare with the file; print the largest deviations

The recorders (`sections()`) use only the public surface (`make`, `reset`, `step`, `flatten_observation`,
`info["metrics"]`, `evaluate.run_episodes`, `training.make_train`), so the same code records
before and after a refactor. `tests/test_golden.py` compares a fresh recording with the file:
a behaviour-preserving change keeps it green; a deliberate change of numbers re-records it in a
commit of its own that says why.

XLA:CPU contracts a multiply and an add into one fused multiply-add when both land in the same
fusion, so a refactor that moves a fusion boundary can change the last bit of some values. The
comparison therefore allows float32 rounding (relative 1e-5 of a value plus 1e-5 of the field's
largest magnitude); integers and bools must match exactly. `--check` also says which fields are
bit-identical.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

FILE = Path(__file__).resolve().parent / "data" / "golden.npz"
# The v0 tasks (the fluid engine) and two v2 tasks (the mixed engine: an MMPP and a trace replay).
TASKS = ("InferenceGym-Task1-v0", "InferenceGym-Task2-v0", "InferenceGym-Task3-v0", "InferenceGym-Task4-v0",
         "InferenceGym-Task3-v2", "InferenceGym-Task4-v2")
NUM_ENVS, NUM_STEPS = 16, 50
SHORT_HORIZON = 20  # a second run with this horizon crosses two auto-resets in NUM_STEPS
GRID_SIZES = (10, 5, 13, 2, 3)  # every knob's full grid: masked knobs are exercised too
EVAL_EPISODES, EVAL_STEPS = 8, 50
SHORT_FIELDS = ("flat_obs", "reward", "truncated", "timestep", "cost_so_far")
RTOL, ATOL_OF_SCALE = 1e-5, 1e-5
# PPO's actor loss is the mean of clipped ratio x advantage over a minibatch of advantages
# normalised to mean 0 and unit variance: a residual ~1e-4 of O(1) terms that cancel. Its float32
# rounding is that of the terms (~1e-7 absolute: eps x sqrt(terms)), not of the residual, and a
# CPU that orders the sum differently (AVX-512 against AVX2) moves it by that much.
SUM_OF_UNIT_TERMS = ("actor_loss",)
ATOL_OF_UNIT_TERMS = 1e-6


def _leaves(prefix: str, tree) -> dict[str, np.ndarray]:
    import jax

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        out[prefix + jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def env_rollouts(env_id: str, index: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """NUM_ENVS envs x NUM_STEPS steps of `env.step` (auto-reset) with fixed random grid actions,
    at the task's horizon and at SHORT_HORIZON (one program: the horizon is a traced param)."""
    import jax
    import jax.numpy as jnp

    import inferencegym_jax as ig

    env, params = ig.make(env_id)
    _, short_params = ig.make(env_id, max_steps=SHORT_HORIZON)
    rng = np.random.default_rng(100 + index)
    actions = jnp.asarray(rng.integers(0, GRID_SIZES, (NUM_STEPS, NUM_ENVS, 5)).astype(np.int32))

    @jax.jit
    def run(key, params):
        k_reset, k_steps = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, NUM_ENVS), params)

        def body(state, x):
            k, a = x
            keys = jax.random.split(k, NUM_ENVS)
            obs, state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                keys, state, a, params)
            flat = jax.vmap(env.flatten_observation, in_axes=(0, None))(obs, params)
            out = {
                "flat_obs": flat, "reward": reward, "terminated": terminated, "truncated": truncated,
                "arrival_rate_ema": obs.arrival_rate_ema, "cost_so_far": obs.cost_so_far,
                "running_seqs": obs.running_seqs, "timestep": obs.timestep,
                "metrics": info["metrics"], "applied": info["applied_action"], "clipped": info["clipped"],
                "components": info["reward_components"],
            }
            return state, out

        return jax.lax.scan(body, state, (jax.random.split(k_steps, NUM_STEPS), actions))[1]

    key = jax.random.key(1000 + index)
    full = _leaves("", run(key, params))
    short = _leaves("", run(key, short_params))
    return full, {k: v for k, v in short.items() if k.split("[")[1].strip("']") in SHORT_FIELDS}


def eval_rollout(env_id: str) -> dict[str, np.ndarray]:
    """`evaluate.run_episodes` of the random policy: the path graders and baselines take."""
    import inferencegym_jax as ig
    from inferencegym_jax import baselines, evaluate

    env, params = ig.make(env_id)
    traj = evaluate.run_episodes(env, params, baselines.random_policy(env), evaluate.evaluation_key(5),
                                 EVAL_EPISODES, num_steps=EVAL_STEPS)
    m = traj.metrics
    return _leaves("", {"reward": traj.reward, "action": traj.action, "offered_tokens": traj.offered_tokens,
                        "metrics": {f: getattr(m, f) for f in ("good_tokens", "output_tokens", "slo_violations",
                                                               "admitted", "timeouts", "failed", "oom", "cost_usd",
                                                               "ttft_p99_s")}})


def ppo_run(env_id: str, **extra) -> dict[str, np.ndarray]:
    """Two updates of a tiny PPO config: the parameters, normalisers and metrics."""
    import jax

    from inferencegym_jax.training_setup import from_dict, make_train

    config = from_dict(dict(task=env_id, num_envs=16, num_steps=8, num_updates=2, update_epochs=1, num_minibatches=2,
                            actor_widths=(16, 16), critic_widths=(16, 16), **extra))
    trainer = make_train(config)
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())
    return _leaves("", {"params": runner.params, "obs_stats": runner.obs_stats, "ret_stats": runner.ret_stats,
                        "metrics": metrics})


def _short(env_id: str) -> str:
    """"Task3" for a v0 id (the file's first sections), "Task3-v2" for a later version."""
    return env_id.replace("InferenceGym-", "").replace("-v0", "")


def _env_section(index: int) -> dict[str, np.ndarray]:
    env_id = TASKS[index]
    full, short_horizon = env_rollouts(env_id, index)
    out = {f"env/{_short(env_id)}/{k}": v for k, v in full.items()}
    out.update({f"env_short/{_short(env_id)}/{k}": v for k, v in short_horizon.items()})
    return out


def _eval_section(index: int) -> dict[str, np.ndarray]:
    env_id = TASKS[index]
    return {f"eval/{_short(env_id)}/{k}": v for k, v in eval_rollout(env_id).items()}


PPO_RUNS = {
    "Task1": ("InferenceGym-Task1-v0", {}),
    "Task3": ("InferenceGym-Task3-v0", {"action_mode": "hold", "initial_action": "best_static", "default_logit": 4.0}),
}


def _ppo_section(name: str) -> dict[str, np.ndarray]:
    env_id, extra = PPO_RUNS[name]
    return {f"ppo/{name}/{k}": v for k, v in ppo_run(env_id, **extra).items()}


def sections() -> dict[str, object]:
    """Recorders of the golden file's sections by name (each returns its share of the arrays);
    the test runs them one by one, so that parallel test workers share the work."""
    out: dict[str, object] = {}
    for i, env_id in enumerate(TASKS):
        out[f"env-{_short(env_id)}"] = lambda i=i: _env_section(i)
        out[f"eval-{_short(env_id)}"] = lambda i=i: _eval_section(i)
    for name in PPO_RUNS:
        out[f"ppo-{name}"] = lambda name=name: _ppo_section(name)
    return out


def stored_section(stored: dict[str, np.ndarray], section: str) -> dict[str, np.ndarray]:
    """The stored arrays a section records (by key prefix)."""
    kind, name = section.split("-", 1)
    prefixes = (f"{kind}/{name}/",) + ((f"env_short/{name}/",) if kind == "env" else ())
    return {k: v for k, v in stored.items() if k.startswith(prefixes)}


def compare(fresh: dict[str, np.ndarray], stored: dict[str, np.ndarray]) -> list[str]:
    """Problems found (empty when every field matches within float32 rounding)."""
    problems = []
    missing, extra = sorted(set(stored) - set(fresh)), sorted(set(fresh) - set(stored))
    if missing:
        problems.append(f"fields no longer recorded: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    if extra:
        problems.append(f"new fields: {extra[:10]}{' ...' if len(extra) > 10 else ''}")
    for name in sorted(set(stored) & set(fresh)):
        got, want = fresh[name], stored[name]
        if got.shape != want.shape:
            problems.append(f"{name}: shape {got.shape} != {want.shape}")
            continue
        if not np.issubdtype(want.dtype, np.floating):
            if not np.array_equal(got, want):
                problems.append(f"{name}: {int(np.sum(got != want))} of {want.size} entries differ")
            continue
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        scale = float(np.max(np.abs(want64))) if want.size else 0.0
        if any(term in name for term in SUM_OF_UNIT_TERMS):
            scale = max(scale, ATOL_OF_UNIT_TERMS / ATOL_OF_SCALE)
        err = np.abs(got64 - want64)
        bad = ~(err <= RTOL * np.abs(want64) + ATOL_OF_SCALE * scale) | (np.isnan(got64) != np.isnan(want64))
        if np.any(bad):
            problems.append(f"{name}: {int(bad.sum())} of {want.size} entries off, max abs error {err.max():.3g} "
                            f"(scale {scale:.3g})")
    return problems


def load() -> dict[str, np.ndarray]:
    with np.load(FILE) as data:
        return {k: data[k] for k in data.files}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored file instead of writing it")
    parser.add_argument("--sections", nargs="+", choices=sorted(sections()), default=None,
                        help="only these sections (with --check: compare them; else: re-record them, keep the rest)")
    args = parser.parse_args(argv)
    chosen = sections() if args.sections is None else {name: sections()[name] for name in args.sections}
    fresh: dict[str, np.ndarray] = {}
    for fn in chosen.values():
        fresh.update(fn())
    if args.check:
        stored = load()
        if args.sections is not None:
            stored = {k: v for name in args.sections for k, v in stored_section(stored, name).items()}
        problems = compare(fresh, stored)
        same = sum(1 for k in stored if k in fresh and np.array_equal(fresh[k], stored[k], equal_nan=True))
        print(f"{same} of {len(stored)} fields bit-identical")
        for p in problems:
            print(p)
        return 1 if problems else 0
    if args.sections is not None:
        kept = load()
        for name in args.sections:
            for key in stored_section(kept, name):
                del kept[key]
        fresh = {**kept, **fresh}
    FILE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(FILE, **dict(sorted(fresh.items())))
    print(f"wrote {FILE} ({len(fresh)} fields, {FILE.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
