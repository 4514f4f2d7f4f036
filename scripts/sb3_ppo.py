"""Train Stable-Baselines3 PPO on a task through the gymnasium adapter, grade it, time it.

Usage: python scripts/sb3_ppo.py [--task InferenceGym-Task1-v0] [--timesteps 20000] [--num-envs 8] [--seed 0]
       [--episodes 32] [--vec-env batch|dummy|both] [--ours]

Training runs SB3's PPO (MLP policy, MultiDiscrete actions) on `inferencegym_jax.interop.gymnasium_env`:
`--vec-env batch` steps all envs with one jitted, vmapped call (`JaxBatchVecEnv`, an SB3 VecEnv
over `GymnasiumVectorEnv`), `dummy` steps `GymnasiumEnv`s one by one (SB3's `DummyVecEnv`), and
`both` trains once with each and prints both. The trained policy (its mode) is graded on
held-out episodes 0 .. episodes-1 of `evaluate.evaluation_key(seed)`, the episodes the
project's evaluator runs for every policy, with `gymnasium_env.evaluate_policy` (the graders
of `inferencegym_jax.graders` on the adapter's step infos); the fixed baselines are graded on
the same episodes by `evaluate.evaluate` for a paired comparison. Throughput: env steps per
second of SB3's `learn` (updates included, the adapter's compile before it), and, with
`--ours`, of this project's jitted PPO (training/) on the task's shipped config (3 updates,
compile apart).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecMonitor

from inferencegym_jax import baselines, evaluate, tasks
from inferencegym_jax.interop import gymnasium_env
from inferencegym_jax.interop.sb3_env import JaxBatchVecEnv


def make_vec_env(kind: str, task_id: str, num_envs: int) -> VecEnv:
    """The training VecEnv: "batch" (JaxBatchVecEnv) or "dummy" (DummyVecEnv of GymnasiumEnvs)."""
    if kind == "batch":
        return JaxBatchVecEnv(gymnasium_env.GymnasiumVectorEnv(num_envs, task_id))
    return DummyVecEnv([lambda: gymnasium_env.GymnasiumEnv(task_id) for _ in range(num_envs)])


def train(kind: str, task_id: str, args: argparse.Namespace) -> tuple[PPO, dict[str, float]]:
    """SB3 PPO for `args.timesteps` env steps; returns the model and its timings [s]."""
    venv = VecMonitor(make_vec_env(kind, task_id, args.num_envs))
    model = PPO("MlpPolicy", venv, n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.n_epochs,
                seed=args.seed, verbose=0, device="cpu")
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.num_envs * args.n_steps)  # warm-up: the adapter compiles here
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps, reset_num_timesteps=False)
    learn_s = time.perf_counter() - t0
    steps = model.num_timesteps - args.num_envs * args.n_steps
    return model, {"warmup_s": warm_s, "learn_s": learn_s, "steps": steps, "steps_per_s": steps / learn_s}


def env_only_rate(kind: str, task_id: str, num_envs: int, steps: int = 200) -> float:
    """Env steps/s of the VecEnv alone with random actions (compile excluded)."""
    venv = make_vec_env(kind, task_id, num_envs)
    venv.seed(0)
    venv.reset()
    actions = np.random.default_rng(0).integers(0, venv.action_space.nvec, size=(steps + 1, num_envs, 5))
    venv.step(actions[0])
    t0 = time.perf_counter()
    for a in actions[1:]:
        venv.step(a)
    return steps * num_envs / (time.perf_counter() - t0)


def grade(model: PPO, task_id: str, args: argparse.Namespace) -> dict[str, evaluate.EvalResult]:
    """Held-out grades of the SB3 policy and of the best static configuration on the same episodes."""
    key = evaluate.evaluation_key(args.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    results = {"sb3_ppo": gymnasium_env.evaluate_policy(policy, task_id, key, args.episodes, num_envs=args.num_envs)}
    env, params = tasks.make(task_id)
    results["best_static"] = evaluate.evaluate(env, params, baselines.best_static_policy(task_id), key, args.episodes,
                                               task_id)
    return results


def ours_rate(task: int, updates: int = 3) -> tuple[float, float]:
    """(env steps/s, compile s) of this project's PPO on the task's shipped config."""
    from inferencegym_jax.training_setup import load_config, make_train

    trainer = make_train(load_config(f"ppo_task{task}"))
    runner, hp = trainer.jit_init(trainer.root_key()), trainer.default_hparams()
    t0 = time.perf_counter()
    jax.block_until_ready(trainer.jit_run_updates(runner, hp, updates)[0].params)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(trainer.jit_run_updates(runner, hp, updates)[0].params)
    config = trainer.config
    return config.num_envs * config.num_steps * updates / (time.perf_counter() - t0), compile_s


def print_grades(results: dict[str, evaluate.EvalResult], episodes: int) -> None:
    paired = results["sb3_ppo"].scores - results["best_static"].scores
    print(f"\nheld-out grades, {episodes} episodes of evaluation_key(seed) (95% CI over episodes)")
    print("| policy | score | tokens/s | TTFT p99 s |")
    print("|---|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {np.mean(r.scores):.3f} ± {evaluate.confidence_interval_95(r.scores):.3f} "
              f"| {np.mean(r.metrics['tokens_per_s']):.0f} | {np.mean(r.metrics['ttft_p99_s']):.2f} |")
    print(f"sb3_ppo - best_static (paired): {np.mean(paired):+.4f} ± {evaluate.confidence_interval_95(paired):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="InferenceGym-Task1-v0",
                        help="task number (its newest version) or id (default: the v0 task 1 of BENCHMARKS.md)")
    parser.add_argument("--timesteps", type=int, default=20_000, help="env steps of timed training")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=32, help="held-out episodes to grade")
    parser.add_argument("--vec-env", choices=("batch", "dummy", "both"), default="batch")
    parser.add_argument("--n-steps", type=int, default=256, help="SB3 PPO rollout length per env")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--n-epochs", type=int, default=4)
    parser.add_argument("--ours", action="store_true", help="also time this project's PPO (about 1 min)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a small MLP gains nothing from threads; they contend with XLA's (5x slower on 2 cores)
    task_id = tasks.resolve_id(args.task, "--task=")
    kinds = ("batch", "dummy") if args.vec_env == "both" else (args.vec_env,)
    model = None
    for kind in kinds:
        model, t = train(kind, task_id, args)
        rate = env_only_rate(kind, task_id, args.num_envs)
        print(f"{kind:>5} VecEnv, {args.num_envs} envs: SB3 PPO {t['steps_per_s']:,.0f} env steps/s "
              f"({t['steps']:,} steps in {t['learn_s']:.1f} s; warm-up with compile {t['warmup_s']:.1f} s); "
              f"env alone {rate:,.0f} steps/s", flush=True)
    print_grades(grade(model, task_id, args), args.episodes)
    if args.ours:
        rate, compile_s = ours_rate(args.task)
        print(f"\nthis project's PPO (configs/train/ppo_task{args.task}.toml): {rate:,.0f} env steps/s "
              f"(compile {compile_s:.0f} s)")


if __name__ == "__main__":
    main()
