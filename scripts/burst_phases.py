"""Where an adaptive policy can gain on a bursty task: reward per burst phase, static vs trained.

    python scripts/burst_phases.py --task 2 --checkpoint runs/results/task2/seed0

Runs held-out episodes (evaluation_key(0)) and splits their intervals into burst intervals
(offered output tokens above twice the episode-set median) and the rest. Prints, for static
configurations around the best static one, the mean reward in each phase, then how often a
trained policy (if `--checkpoint` is given) picks each (spec_length, batch_size) per phase and
its mean reward there. The best static configuration per phase, played in the right phase,
bounds what switching on the burst can gain.
"""

from __future__ import annotations

import argparse
import collections

import jax
import jax.numpy as jnp
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax import evaluate
from inferencegym_jax.actions import GRID


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--kv", type=int, default=1, help="kv_budget grid index of the static configurations")
    parser.add_argument("--specs", type=int, nargs="+", default=[0, 1, 2], help="spec_length grid indices")
    parser.add_argument("--batches", type=int, nargs="+", default=[6, 7, 8, 9], help="batch_size grid indices")
    parser.add_argument("--checkpoint", help="a run directory of `inferencegym train` or scripts/ppo_results.py")
    args = parser.parse_args()

    env, params = ig.make(f"InferenceGym-Task{args.task}-v0")
    steps = int(params.max_steps_in_episode)
    keys = evaluate.episode_keys(evaluate.evaluation_key(0), 0, args.episodes)
    run = jax.jit(lambda policy_args, policy: jax.vmap(
        lambda k: evaluate.run_episode(env, params, policy(policy_args), k, steps))(keys), static_argnums=1)

    def static(action):
        return lambda k, o, p: action

    offered = None
    print(f"Task {args.task}, {args.episodes} held-out episodes; mean reward per interval")
    print("| spec_length | batch_size | all | burst | between bursts |\n|---:|---:|---:|---:|---:|")
    for spec in args.specs:
        for batch in args.batches:
            traj = run(jnp.asarray([args.kv, spec, batch, 0, 0], jnp.int32), static)
            reward = np.asarray(traj.reward)
            if offered is None:  # the traffic does not depend on the policy
                offered = np.asarray(traj.offered_tokens)
                burst = offered > 2.0 * np.median(offered)
            print(f"| {GRID[1][spec]:g} | {GRID[2][batch]:g} | "
                  f"{reward.mean():.4f} | {reward[burst].mean():.4f} | {reward[~burst].mean():.4f} |")
    print(f"burst intervals: {burst.mean():.1%}")

    if args.checkpoint:
        from training.checkpoint import load_checkpoint, read_config
        from training.ppo import make_train

        trainer = make_train(read_config(args.checkpoint))
        runner = load_checkpoint(args.checkpoint, trainer)
        traj = run(runner, lambda r: trainer.policy(r.params, r.obs_stats, True))
        reward = np.asarray(traj.reward)
        picks = np.stack([np.asarray(traj.action.spec_length), np.asarray(traj.action.batch_size)], axis=-1)
        for name, mask in (("burst", burst), ("between bursts", ~burst)):
            counts = collections.Counter(map(tuple, picks[mask].tolist()))
            top = ", ".join(f"spec {s:g} / batch {b:g} {n / mask.sum():.0%}" for (s, b), n in counts.most_common(4))
            print(f"policy, {name}: mean reward {reward[mask].mean():.4f}; {top}")
        print(f"policy, all: mean reward {reward.mean():.4f}")


if __name__ == "__main__":
    main()
