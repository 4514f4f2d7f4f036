"""The README's results table: PPO (several seeds) against every baseline, graded on held-out episodes.

Usage: python scripts/ppo_results.py [--tasks 1 2 3] [--version 0] [--seeds 3] [--episodes 256]
       [--out runs/results] [--uniform-start] [--set KEY=VALUE ...] [--mpc]

For each task (InferenceGym-Task<N>-v<version>): the seeds' training runs (its shipped config,
configs/train/ppo_task<N>.toml for v0, ppo_task<N>_v<version>.toml otherwise, seeds config.seed ..
config.seed + seeds - 1) run as one vmapped program (wall time and env steps reported); each
final policy is graded on the same `episodes` held-out episodes (evaluate.evaluation_key(0)),
as is every baseline. PPO's row gives the mean over seeds of each seed's mean score, with a 95%
CI over seeds (normal approximation) and, apart, the CI over all seed x episode scores.
Each seed's final state is saved as OUT/task<N>/seed<S>/checkpoint.msgpack (so
`inferencegym eval --checkpoint OUT/task<N>/seed<S>` re-grades it), and `--grade-only` grades
saved checkpoints again without training. Writes OUT/results.json and OUT/results.md (the
markdown table; rows of other tasks already in OUT/results.json are kept, so tasks run one at a
time into one OUT make one table) and prints the table. A config with imitation (`imitation_episodes`, tasks 2-4-v1's)
keeps PPO's start apart: each seed's policy fitted to the causal mpc, before any PPO update, is
saved in OUT/task<N>_v<k>/seed<S>/start and graded on the same episodes (the "ppo_start" row of
the JSON, a line under the table), so what PPO adds to the imitation is measured, not assumed.

With --mpc the table also has the model-predictive controllers of inferencegym_jax.control.mpc on the
same episodes (the clairvoyant `mpc_oracle`, an oracle bound, and the causal `mpc`, which plans
from the traffic belief, `inferencegym_jax.control.traffic_belief`, or on a replayed trace from its
recent past; their default horizon, samples and candidates) and a "gap closed" column: (PPO - best_static) /
(mpc_oracle - best_static), the share of the room the oracle shows that PPO takes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import baselines, evaluate
from inferencegym_jax.cli.common import ppo_config_name
from inferencegym_jax.cli.training_commands import parse_overrides as _overrides
from inferencegym_jax.control import mpc
from inferencegym_jax.evaluate import confidence_interval_95 as ci95
from inferencegym_jax.files import atomic_write_json, atomic_write_text
from inferencegym_jax.training_setup import load_config, make_train, read_config
from inferencegym_jax.training_setup.uniform_start import run_overrides
from training.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from training.evaluation import paired_difference
from training.sweep import graded_episodes, has_grader


def _folder(out: Path, task: str) -> Path:
    """OUT/task<N> for a v0 task, OUT/task<N>_v<k> for a later version."""
    return out / ppo_config_name(task).removeprefix("ppo_")


# A seed's folder holds, for a config with imitation, PPO's start (the policy fitted to the mpc,
# before any update) in this subfolder, graded as the row "ppo_start".
START = "start"

def train_task(task: str, seeds: int, overrides: dict, out: Path) -> None:
    """Train the seeds of task id `task` as one vmapped program; save each seed's checkpoint and
    the wall time."""
    config = load_config(ppo_config_name(task), **overrides)
    trainer = make_train(config)
    keys = jnp.stack([evaluate.training_key(config.seed + i) for i in range(seeds)])
    hps = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (seeds,)), config.hparams())
    t0 = time.perf_counter()
    if config.imitation_episodes:  # keep PPO's start (the imitation of the mpc) apart, to grade it too
        starts = jax.jit(jax.vmap(trainer.init))(keys, hps)
        runners, metrics = jax.jit(jax.vmap(lambda r, h: trainer.run_updates(r, h, config.num_updates)))(starts, hps)
    else:
        starts, (runners, metrics) = None, jax.jit(jax.vmap(trainer.train))(keys, hps)
    jax.block_until_ready(runners)
    train_s = time.perf_counter() - t0
    for i in range(seeds):
        seed_config = config.replace(seed=config.seed + i)
        seed_trainer = make_train(seed_config)
        folder = _folder(out, task) / f"seed{seed_config.seed}"
        save_checkpoint(folder, seed_trainer, jax.tree_util.tree_map(lambda x, i=i: x[i], runners))
        if starts is not None:
            save_checkpoint(folder / START, seed_trainer, jax.tree_util.tree_map(lambda x, i=i: x[i], starts))
    record = {"train_seconds_all_seeds": train_s, "seeds": [config.seed + i for i in range(seeds)],
              "final_train_reward": np.asarray(metrics["reward"])[:, -1].tolist()}
    atomic_write_json(_folder(out, task) / "train.json", record, indent=1)
    print(f"{task}: {seeds} seeds x {config.total_env_steps:,} env steps in {train_s:.0f} s", flush=True)


def grade_task(task: str, episodes: int, out: Path, with_mpc: bool = False) -> dict:
    """Grade the saved seeds and every baseline (and with `with_mpc` the MPC controllers) on
    the same held-out episodes."""
    record = json.loads((_folder(out, task) / "train.json").read_text())
    seeds = record["seeds"]
    configs = [read_config(_folder(out, task) / f"seed{s}") for s in seeds]
    trainers = [make_train(c) for c in configs]
    runners = [load_checkpoint(_folder(out, task) / f"seed{s}", t) for s, t in zip(seeds, trainers)]
    runners = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *runners)
    config, trainer = configs[0], trainers[0]
    train_s = record["train_seconds_all_seeds"]
    metrics = {"reward": np.asarray(record["final_train_reward"])[:, None]}
    seeds = len(seeds)

    key = evaluate.evaluation_key(0)
    graded = has_grader(config.task)  # False until scripts/grader_constants.py covers the task
    task_id = config.task if graded else None
    grade_seeds = jax.jit(jax.vmap(lambda p, s: graded_episodes(trainer, p, s, key, episodes, task_id)))
    ppo = grade_seeds(runners.params, runners.obs_stats)
    ppo_reward = np.asarray(ppo["reward"])  # (seeds, episodes)
    ppo_scores = np.asarray(ppo["score"]) if graded else ppo_reward
    rows = {"ppo": _seeds_row(ppo_scores, ppo_reward, graded)}
    per_seed_scores = {"ppo": ppo_scores}  # (seeds, episodes) of each policy trained per seed
    start_dirs = [_folder(out, task) / f"seed{s}" / START for s in record["seeds"]]
    if all(checkpoint_path(d).exists() for d in start_dirs):
        starts = [load_checkpoint(d, t) for d, t in zip(start_dirs, trainers)]
        starts = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *starts)
        start = grade_seeds(starts.params, starts.obs_stats)
        start_reward = np.asarray(start["reward"])
        start_scores = np.asarray(start["score"]) if graded else start_reward
        rows["ppo_start"] = _seeds_row(start_scores, start_reward, graded)
        per_seed_scores["ppo_start"] = start_scores
    env = getattr(trainer.env, "unwrapped", trainer.env)  # baselines act on the serving env, not PPO's wrapper
    if graded:
        policies = baselines.baseline_policies(env, trainer.env_params, config.task)
    else:
        policies = {"heuristic": baselines.heuristic_policy(env),
                    "vllm_default": baselines.fixed_default_policy(), "random": baselines.random_policy(env)}
    runs = {name: (lambda p=policy: evaluate.run_episodes(env, trainer.env_params, p, key, episodes))
            for name, policy in policies.items()}
    if graded and with_mpc:
        for name, clairvoyant in (("mpc_oracle", True), ("mpc", False)):
            ctrl = mpc.controller(env, trainer.env_params, config.task, mpc.MPCConfig(clairvoyant=clairvoyant))
            runs[name] = lambda c=ctrl: mpc.run_mpc_episodes(c, trainer.env_params, key, episodes)
    best_static_scores = None
    for name, run in runs.items():
        t0 = time.perf_counter()
        traj = run()
        rewards = np.asarray(traj.reward).mean(axis=1)
        rows[name] = {"reward": float(rewards.mean()), "reward_ci95": ci95(rewards), "score": None,
                      "seconds": time.perf_counter() - t0}
        if graded:
            result = evaluate.grade_trajectory(traj, trainer.env_params, config.task)
            rows[name].update(score=float(np.mean(result.scores)), ci95_episodes=ci95(result.scores))
            if best_static_scores is not None:
                paired = paired_difference(result.scores, best_static_scores)
                rows[name].update(minus_best_static=paired.mean, minus_best_static_ci95=paired.ci95)
            if name == "best_static":
                best_static_scores = np.asarray(result.scores)
                for row, scores in per_seed_scores.items():  # (seeds, episodes), paired episode by episode
                    paired = paired_difference(scores, best_static_scores)
                    rows[row].update(minus_best_static=paired.mean, minus_best_static_ci95_episodes=paired.ci95,
                                     minus_best_static_per_seed=paired.per_seed)
    set_gap_closed(rows)
    return {
        "task": config.task, "seeds": seeds, "episodes": episodes,
        "env_steps_per_seed": config.total_env_steps, "updates": config.num_updates,
        "train_seconds_all_seeds": train_s,
        "final_train_reward": np.asarray(metrics["reward"])[:, -1].tolist(),
        "config": config.to_toml(), "policies": rows,
    }


def _seeds_row(scores: np.ndarray, reward: np.ndarray, graded: bool) -> dict:
    """A policy trained per seed: scores and rewards (seeds, episodes) summed up over seeds and episodes."""
    return {
        "score": float(scores.mean()) if graded else None,
        "ci95_seeds": ci95(scores.mean(axis=1)) if graded else None,
        "ci95_episodes": ci95(scores.ravel()) if graded else None,
        "per_seed": scores.mean(axis=1).tolist() if graded else None,
        "reward": float(reward.mean()),
        "reward_ci95_seeds": ci95(reward.mean(axis=1)),
    }


def _seeds_ci(row: dict, seeds: int) -> float:
    """A seeded row's 95% CI: over seeds, or over episodes when one seed leaves none over seeds."""
    return row["ci95_seeds"] if seeds > 1 else row["ci95_episodes"]


def _percent(fraction: float) -> str:
    """A fraction as a whole percentage, "0%" rather than "-0%" for a tiny negative one."""
    pct = 100 * fraction
    return f"{pct if abs(pct) >= 0.5 else 0.0:.0f}%"


def start_lines(results: list[dict]) -> str:
    """One line per task whose PPO started from an imitation: that start's score before any update."""
    lines = []
    for r in results:
        start = r["policies"].get("ppo_start")
        if start is None or start["score"] is None:
            continue
        line = (f"- {r['task']}: PPO's start (the policy fitted to the causal mpc, before any PPO update) scores "
                f"{start['score']:.3f} ± {_seeds_ci(start, r['seeds']):.3f}")
        if "minus_best_static" in start:
            diff, ci = start["minus_best_static"], start["minus_best_static_ci95_episodes"]
            line += f", {diff:+.4f} ± {ci:.4f} over best_static"
        if start.get("gap_closed") is not None:
            line += f" ({_percent(start['gap_closed'])} of the gap)"
        per_seed = ", ".join(f"{d:+.4f}" for d in start.get("minus_best_static_per_seed", []))
        lines.append(line + (f"; per seed {per_seed}" if per_seed else "") + ".")
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    """Grader score where the task has constants, else mean reward per interval (marked 'reward')."""
    with_mpc = any("mpc_oracle" in r["policies"] for r in results)
    names = ["ppo", "best_static", "heuristic", "vllm_default", "random"]
    names += ["mpc_oracle", "mpc"] if with_mpc else []
    gap = " gap closed |" if with_mpc else ""
    lines = ["| task | metric | " + " | ".join(n + (" (oracle bound)" if n == "mpc_oracle" else "") for n in names)
             + f" | PPO - best_static (paired) |{gap} PPO budget (env steps x seeds) | training wall s |",
             "|---|---|" + "---:|" * len(names) + "---:|" + ("---:|" if with_mpc else "") + "---:|---:|"]
    for r in results:
        p = r["policies"]
        graded = p["ppo"]["score"] is not None
        if graded:
            cells = [f"**{p['ppo']['score']:.3f} ± {_seeds_ci(p['ppo'], r['seeds']):.3f}**"]
            cells += [f"{p[n]['score']:.3f} ± {p[n]['ci95_episodes']:.3f}" if n in p else "n/a" for n in names[1:]]
        else:
            cells = [f"**{p['ppo']['reward']:.4f} ± {p['ppo']['reward_ci95_seeds']:.4f}**"]
            cells += [f"{p[n]['reward']:.4f} ± {p[n]['reward_ci95']:.4f}" if n in p else "n/a" for n in names[1:]]
        ppo = p["ppo"]
        if "minus_best_static" in ppo:
            diff = ppo["minus_best_static"] if abs(ppo["minus_best_static"]) >= 5e-5 else 0.0  # no "-0.0000"
            cells.append(f"{diff:+.4f} ± {ppo['minus_best_static_ci95_episodes']:.4f}")
        else:
            cells.append("n/a")
        if with_mpc:
            closed = ppo.get("gap_closed")
            cells.append("n/a (no room)" if closed is None else _percent(closed))
        lines.append(f"| {r['task']} | {'score' if graded else 'reward'} | " + " | ".join(cells)
                     + f" | {r['env_steps_per_seed']:,} x {r['seeds']} | {r['train_seconds_all_seeds']:.0f} |")
    return "\n".join(lines)


def set_gap_closed(rows: dict[str, dict]) -> None:
    """Each PPO row's "gap_closed" (its paired difference over mpc_oracle's), where the oracle's
    room over best_static is larger than its own paired 95 % CI; None (no room) where it is not:
    a room within its noise would make the ratio noise (task 1-v2: +1e-6 made -157,009 %)."""
    oracle = rows.get("mpc_oracle")
    if oracle is None or "minus_best_static" not in oracle:
        return
    room, noise = oracle["minus_best_static"], oracle.get("minus_best_static_ci95", 0.0)
    for row in ("ppo", "ppo_start"):
        if row in rows and "minus_best_static" in rows[row]:
            rows[row]["gap_closed"] = rows[row]["minus_best_static"] / room if room > noise else None


def merged_with_earlier(path: Path, results: list[dict]) -> list[dict]:
    """`results` with the rows of an earlier run's `path` for the tasks this run did not grade,
    ordered by task id: tasks run one at a time into one OUT make one table."""
    if not path.exists():
        return results
    graded = {r["task"] for r in results}
    earlier = [r for r in json.loads(path.read_text()) if r["task"] not in graded]
    return sorted(earlier + results, key=lambda r: r["task"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--version", type=int, default=0, help="task version: InferenceGym-Task<N>-v<version>")
    parser.add_argument("--mpc", action="store_true", help="also the MPC controllers and the gap closed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--out", default="runs/results")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE")
    parser.add_argument("--uniform-start", action="store_true",
                        help="train from a uniform start (training_setup.uniform_start: UNIFORM_START, UNIFORM_BUDGET; "
                             "--set pairs on top)")
    parser.add_argument("--grade-only", action="store_true",
                        help="skip training: grade the checkpoints a previous run left in OUT")
    parser.add_argument("--render-only", action="store_true",
                        help="neither train nor grade: rewrite OUT/results.md (and the gap closed) "
                             "from OUT/results.json")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    task_ids = [] if args.render_only else [f"InferenceGym-Task{n}-v{args.version}" for n in args.tasks]
    if not args.grade_only and not args.render_only:
        for task in task_ids:
            overrides = run_overrides(load_config(ppo_config_name(task)), args.uniform_start, _overrides(args.set))
            train_task(task, args.seeds, overrides, out)
    for task in task_ids:
        results.append(grade_task(task, args.episodes, out, with_mpc=args.mpc))
        print(markdown(results[-1:]) + ("\n" + start_lines(results[-1:]) if start_lines(results[-1:]) else ""),
              flush=True)
    results = merged_with_earlier(out / "results.json", results)
    for r in results:
        set_gap_closed(r["policies"])
    seeds = sorted({int(r["seeds"]) for r in results})  # the table's, earlier rows included
    episodes = sorted({int(r["episodes"]) for r in results})
    with_mpc = any("mpc_oracle" in r["policies"] for r in results)
    over = "one seed, over episodes" if seeds == [1] else f"over {'/'.join(map(str, seeds))} seeds"
    header = (f"Held-out grader score (mean ± 95% CI; PPO: {over}, baselines: over episodes), "
              f"{'/'.join(map(str, episodes))} episodes from evaluation_key(0). PPO - best_static: the per-episode "
              f"score difference on the same episodes, averaged over seeds, mean ± 95% CI over episodes. "
              + ("Gap closed: (PPO - best_static) / (mpc_oracle - best_static), where the oracle's room is "
                 "above its paired 95% CI (else n/a). " if with_mpc else "")
              + f"{platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}.")
    table = header + "\n\n" + markdown(results)
    if start_lines(results):
        table += "\n\n" + start_lines(results)
    print("\n" + table)
    atomic_write_text(out / "results.md", table + "\n")
    atomic_write_json(out / "results.json", results, indent=1)


if __name__ == "__main__":
    main()
