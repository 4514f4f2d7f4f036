"""Where an adaptive policy can gain on a bursty task: reward per burst phase, static vs trained.

    python scripts/burst_phases.py --task 2 --checkpoint runs/results/task2/seed0

Runs held-out episodes (evaluation_key(0)) and splits their intervals into burst intervals
(offered output tokens above twice the episode-set median) and the rest. Prints, for static
configurations around the best static one, the mean reward in each phase, then how often a
trained policy (if `--checkpoint` is given) picks each (spec_length, batch_size) per phase and
its mean reward there, and the grader score of that policy with one knob at a time replaced by
the best static configuration's value, in every interval or in bursts only. The best static
configuration per phase, played in the right phase, bounds what switching on the burst can gain.
"""

from __future__ import annotations

import argparse
import collections

import jax
import jax.numpy as jnp
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax import evaluate
from inferencegym_jax.actions import GRID, KNOBS


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
        knob_ablations(env, params, trainer, runner, run, args)


def knob_ablations(env, params, trainer, runner, run, args) -> None:
    """Grader score of the policy with one knob replaced by the best static configuration's value,
    in every interval or only in bursts as the policy can see them (arrival-rate EMA above the
    geometric mean of the base and burst rates: one interval into a burst)."""
    from inferencegym_jax import graders

    task_id = f"InferenceGym-Task{args.task}-v0"
    best = jnp.asarray(graders.load_constants(task_id)["best_static_action"], jnp.int32)
    wl = params.workload
    threshold = float(np.sqrt(wl.base_rate * wl.base_rate * wl.burst_multiplier))
    act = trainer.policy(runner.params, runner.obs_stats, True)

    def replaced(knob, only_in_bursts):
        def policy(key, obs, p):
            a = act(key, obs, p)
            swap = obs.arrival_rate_ema > threshold if only_in_bursts else True
            return jnp.where(swap, a.at[knob].set(best[knob]), a)
        return policy

    def score(policy) -> float:
        return float(np.mean(np.asarray(graders.grade(run(None, lambda _: policy), params, task_id).score)))

    print(f"\ngrader score; best static {score(lambda k, o, p: best):.4f}, policy {score(act):.4f}")
    print(f"policy with one knob set to the best static value (bursts: arrival-rate EMA > {threshold:.2f} req/s)")
    print("| knob | best static index | every interval | bursts only |\n|---|---:|---:|---:|")
    for knob in np.flatnonzero(np.asarray(env.action_space(params).nvec) > 1):
        print(f"| {KNOBS[knob]} | {int(best[knob])} | {score(replaced(knob, False)):.4f} | {score(replaced(knob, True)):.4f} |")


if __name__ == "__main__":
    main()
