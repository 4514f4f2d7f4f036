"""`inferencegym plot`: one held-out episode of a policy over time, drawn as a PNG.

    inferencegym plot --task 2 --policy heuristic --out episode.png
    inferencegym plot --checkpoint runs/task1 --out runs/task1/episode_seed3.png --seed 3   # the trained policy

The episode is episode 0 of `evaluate.evaluation_key(SEED)`, the first episode that `inferencegym
eval --eval-seed SEED` grades, with the same numbers (`inferencegym_jax.episode_plot`). The
policy is a baseline (`baselines.baseline_policies`: random, vllm_default or its alias default,
heuristic, best_static) or `ppo`, the trained policy of a checkpoint, built as `inferencegym
eval` builds it: in the env it was trained in (its action wrapper), with the observation
normaliser frozen, acting by its mode when the run's config says `deterministic_eval`.
`train` draws the same figure for the policy it trained (DIR/episode.png, `write_trained_episode`).

Every check (output path, policy, task, checkpoint) comes before the episode runs; JAX, the
trainer and matplotlib are imported inside the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from inferencegym_jax.cli.common import add_command, check_output_file, seed_int, task_id

PPO = "ppo"
# Names `plot` accepts for a baseline besides those of `baselines.baseline_policies` (the
# `rollout` command's name of the vLLM default).
POLICY_ALIASES = {"default": "vllm_default"}


def check_png_path(value: str, option: str = "--out") -> Path:
    """The path of the PNG to write: a file path ending in .png in a folder that can be written
    (ValueError naming `option` otherwise)."""
    path = check_output_file(value, option)
    if path.suffix.lower() != ".png":
        raise ValueError(f"{option} {value!r}: the figure is a PNG; give a path ending in .png")
    return path


def baseline_episode(env_id: str, policy_name: str, seed: int) -> tuple[Any, Any]:
    """(Episode, env params) of a baseline on `env_id`; ValueError for an unknown baseline."""
    import inferencegym_jax as ig
    from inferencegym_jax import baselines, episode_plot

    env, params = ig.make(env_id)
    available = baselines.baseline_policies(env, params, env_id)
    name = POLICY_ALIASES.get(policy_name, policy_name)
    if name not in available:
        raise ValueError(f"--policy {policy_name!r}: not a policy of {env_id}; use {PPO!r} (with --checkpoint) "
                         f"or a baseline: {sorted([*available, *POLICY_ALIASES])}")
    return episode_plot.collect_episode(env, params, available[name], env_id, name, seed), params


def trained_episode(trainer: Any, runner: Any, seed: int) -> tuple[Any, Any]:
    """(Episode, env params) of a trained policy, acting as `inferencegym eval` has it act."""
    from inferencegym_jax import episode_plot, wrappers

    config = trainer.config
    policy = trainer.policy(runner.params, runner.obs_stats, config.deterministic_eval)
    mode = "mode" if config.deterministic_eval else "sampled"
    name = f"{PPO} ({int(runner.update)} updates, {wrappers.action_mode_of(trainer.env)} actions, {mode})"
    episode = episode_plot.collect_episode(trainer.env, trainer.env_params, policy, trainer.env_id, name, seed)
    return episode, trainer.env_params


def write_trained_episode(trainer: Any, runner: Any, seed: int, path: Path) -> Path:
    """Draw the trained policy's episode 0 of evaluation_key(seed) and write it to `path` (PNG)."""
    from inferencegym_jax import episode_plot

    episode, params = trained_episode(trainer, runner, seed)
    return episode_plot.write_png(episode_plot.plot_episode(episode, params), path)


def checkpoint_episode(checkpoint: str, env_id: str | None, seed: int) -> tuple[Any, Any]:
    """(Episode, env params) of a checkpoint's trained policy; ValueError for a missing or
    corrupt checkpoint, or one trained on another task than `env_id` (when given)."""
    from inferencegym_jax.training_setup import make_train, read_config
    from training.checkpoint import load_checkpoint

    try:
        config = read_config(checkpoint)
    except ValueError as err:
        raise ValueError(f"--checkpoint {checkpoint!r}: {err}") from None
    if env_id is not None and env_id != config.task:
        raise ValueError(f"--task {env_id}: the checkpoint in {checkpoint} was trained on {config.task}")
    trainer = make_train(config)
    return trained_episode(trainer, load_checkpoint(checkpoint, trainer), seed)


def _policy_name(args: argparse.Namespace) -> str:
    """--policy, `ppo` when only --checkpoint is given; ValueError for combinations that do not fit."""
    policy = args.policy or (PPO if args.checkpoint else None)
    if policy is None:
        raise ValueError("--policy: give a baseline (random, default, heuristic, best_static) with --task, "
                         f"or {PPO!r} with --checkpoint DIR")
    if policy == PPO and args.checkpoint is None:
        raise ValueError(f"--policy {PPO}: give the trained run with --checkpoint DIR")
    if policy != PPO and args.checkpoint is not None:
        raise ValueError(f"--checkpoint is for --policy {PPO}, not for the baseline {policy!r}")
    if policy != PPO and args.task is None:
        raise ValueError(f"--policy {policy!r}: give the task with --task N")
    return policy


def cmd_plot(args: argparse.Namespace) -> None:
    """Run one held-out episode of the policy and write its figure."""
    from inferencegym_jax import episode_plot

    out = check_png_path(args.out)
    policy = _policy_name(args)
    if policy == PPO:
        episode, params = checkpoint_episode(args.checkpoint, args.task, args.seed)
    else:
        episode, params = baseline_episode(args.task, policy, args.seed)
    episode_plot.write_png(episode_plot.plot_episode(episode, params), out)
    reward = float(episode.trajectory.reward.mean())
    print(f"{episode.task_id}, {episode.policy_name}: episode 0 of evaluation_key({args.seed}), "
          f"score {episode.score:.3f}, mean reward {reward:+.3f} per interval; wrote {out}")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `plot` subcommand."""
    p = add_command(sub, "plot", help="draw one held-out episode of a policy over time (PNG)")
    p.add_argument("--task", type=task_id, default=None,
                   help="task number or id (for --policy ppo: optional, the checkpoint's task)")
    p.add_argument("--policy", default=None,
                   help="random, default (vllm_default), heuristic, best_static, or ppo (default with --checkpoint)")
    p.add_argument("--checkpoint", default=None, help="run directory with checkpoint.msgpack (for --policy ppo)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="evaluation seed: the episode is the first that `eval --eval-seed SEED` grades")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.set_defaults(func=cmd_plot)
