"""Where an adaptive policy can gain on a bursty task: reward per burst phase, static vs trained.

    python experiments/burst_phases.py --task 2 --checkpoint runs/results/task2/seed0
    python experiments/burst_phases.py --task 2 --version 1 --checkpoint DIR   # a policy of task 2-v1
    python experiments/burst_phases.py --task 2 --version 1 --kv 9 --specs 1 --batches 6 7 8 12 \
        --switch batch_size=8 batch_size=12 --switch-fraction 0.1 0.2 0.5 1   # README, uniform start

Runs held-out episodes (evaluation_key(0)) and splits their intervals into burst intervals
(offered output tokens above twice the episode-set median) and the rest. Prints, for static
configurations around the best static one, the mean reward in each phase, then how often a
trained policy (if `--checkpoint` is given) picks each (spec_length, batch_size) per phase and
its mean reward there, and the grader score of that policy with one knob at a time replaced by
the best static configuration's value, in every interval or in bursts only. The best static
configuration per phase, played in the right phase, bounds what switching on the burst can gain.
`--switch` grades the best static configuration with one knob switched in bursts, in every burst
interval or (`--switch-fraction`) in a random share of them, as a policy's exploration would.
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
from inferencegym_jax.tasks import resolve_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, default=2)
    parser.add_argument("--version", type=int, choices=(0, 1), default=0,
                        help="the task's version: InferenceGym-TaskN-vV")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--kv", type=int, default=1, help="kv_budget grid index of the static configurations")
    parser.add_argument("--specs", type=int, nargs="+", default=[0, 1, 2], help="spec_length grid indices")
    parser.add_argument("--batches", type=int, nargs="+", default=[6, 7, 8, 9], help="batch_size grid indices")
    parser.add_argument("--checkpoint", help="a run directory of `inferencegym train` or scripts/ppo_results.py")
    parser.add_argument("--switch", nargs="+", default=[], metavar="KNOB=INDEX",
                        help="switching rules to grade: the best static configuration, with KNOB at grid INDEX "
                             "in bursts (e.g. batch_size=8)")
    parser.add_argument("--switch-fraction", type=float, nargs="+", default=[1.0], metavar="P",
                        help="shares of the burst intervals, drawn at random, in which each --switch applies")
    args = parser.parse_args()
    if not all(0.0 <= p <= 1.0 for p in args.switch_fraction):
        raise SystemExit(f"--switch-fraction {args.switch_fraction}: each must be in [0, 1]")
    switches = []
    for item in args.switch:
        knob, _, index = item.partition("=")
        if knob not in KNOBS or not index.isdigit():
            raise SystemExit(f"--switch {item!r}: expected KNOB=INDEX with KNOB one of {list(KNOBS)}")
        switches.append((KNOBS.index(knob), int(index)))

    task_id = resolve_id(f"InferenceGym-Task{args.task}-v{args.version}", "--task/--version ")
    env, params = ig.make(task_id)
    steps = int(params.max_steps_in_episode)
    keys = evaluate.episode_keys(evaluate.evaluation_key(0), 0, args.episodes)
    run = episode_runner(env, params, steps, keys)

    offered = None
    print(f"{task_id}, {args.episodes} held-out episodes; mean reward per interval")
    print("| spec_length | batch_size | all | burst | between bursts |\n|---:|---:|---:|---:|---:|")
    for spec in args.specs:
        for batch in args.batches:
            traj = run(jnp.asarray([args.kv, spec, batch, 0, 0], jnp.int32), static_policy)
            reward = np.asarray(traj.reward)
            if offered is None:  # the traffic does not depend on the policy
                offered = np.asarray(traj.offered_tokens)
                burst = offered > 2.0 * np.median(offered)
            print(f"| {GRID[1][spec]:g} | {GRID[2][batch]:g} | "
                  f"{reward.mean():.4f} | {reward[burst].mean():.4f} | {reward[~burst].mean():.4f} |")
    print(f"burst intervals: {burst.mean():.1%}")
    if not (switches or args.checkpoint):
        return
    reference = BestStatic(params, run, task_id)  # the baseline of both comparisons below
    if switches:
        switching_rules(reference, switches, args.switch_fraction)

    if args.checkpoint:
        act, arrival_rate, play = trained_policy(args.checkpoint, env, params, steps, keys)
        traj = play(None, lambda _: act)
        reward = np.asarray(traj.reward)
        picks = np.stack([np.asarray(traj.action.spec_length), np.asarray(traj.action.batch_size)], axis=-1)
        for name, mask in (("burst", burst), ("between bursts", ~burst)):
            counts = collections.Counter(map(tuple, picks[mask].tolist()))
            top = ", ".join(f"spec {s:g} / batch {b:g} {n / mask.sum():.0%}" for (s, b), n in counts.most_common(4))
            print(f"policy, {name}: mean reward {reward[mask].mean():.4f}; {top}")
        print(f"policy, all: mean reward {reward.mean():.4f}")
        knob_ablations(reference, env, act, arrival_rate, play)


def episode_runner(env, params, steps: int, keys: jax.Array):
    """`run(policy_args, make_policy)`: the episodes of `keys` on `env` of the policy
    `make_policy(policy_args)` (a Trajectory). `run` compiles once per `make_policy` (a static
    argument); the arguments are traced, so one family of policies (say, "knob k switched to
    index i") is one program."""
    return jax.jit(lambda policy_args, make_policy: jax.vmap(
        lambda k: evaluate.run_episode(env, params, make_policy(policy_args), k, steps))(keys), static_argnums=1)


def trained_policy(checkpoint: str, env, params, steps: int, keys: jax.Array):
    """(act, arrival_rate, play): a checkpoint's policy as `act(key, obs, params) -> int32 (5,)`
    grid indices, `arrival_rate(obs)` [req/s], the arrival-rate EMA in act's observation, and
    `play`, an `episode_runner` on the env act's observations come from.

    A policy of a wrapper with a memory (the arrival history, the burst forecast) acts in that
    wrapper, on its flat observation (the serving env's first, `observation.flatten`); any
    other acts on the serving env through `base_action_policy` (hold and relative actions as
    grid indices).
    """
    from inferencegym_jax import observation
    from inferencegym_jax.training_setup import make_train, read_config
    from inferencegym_jax.wrappers import base_action_policy, is_memory_wrapper
    from training.checkpoint import load_checkpoint

    config = read_config(checkpoint)
    trainer = make_train(config)
    runner = load_checkpoint(checkpoint, trainer)
    policy = trainer.policy(runner.params, runner.obs_stats, True)
    if not is_memory_wrapper(trainer.env):
        play_env, act, rate = env, base_action_policy(trainer.env, policy), lambda obs: obs.arrival_rate_ema
    elif config.action_mode == "absolute":  # its actions are the grid indices already
        names = [name for name, _ in observation.FEATURES]
        at = sum(f.size for _, f in observation.FEATURES[:names.index("arrival_rate_ema")])
        peak = observation.scales(params).peak_rate
        play_env, act, rate = trainer.env, policy, lambda obs: obs[..., at] * peak
    else:
        raise SystemExit(f"--checkpoint {checkpoint}: a {config.action_mode!r} policy with an arrival history or "
                         "forecast cannot be replayed as grid indices; only 'absolute' ones")
    return act, rate, episode_runner(play_env, params, steps, keys)


def static_policy(action: jax.Array):
    """The policy that plays `action` (int32 (5,) grid indices) in every interval."""
    return lambda key, obs, p: action


class BestStatic:
    """The task's best static configuration and what the comparisons against it share.

    Attributes:
      task_id: the env id.
      action: int32 (5,), the graders' best static action (data/grader_constants.json).
      threshold: float [req/s], bursts as a policy can see them: arrival-rate EMA above the
        geometric mean of the base and burst rates (one interval into a burst).
      scores: float (episodes,), its grader score per held-out episode.
    """

    def __init__(self, params, run, task_id: str):
        from inferencegym_jax import graders

        self.params, self.run = params, run
        self.task_id = task_id
        self.action = jnp.asarray(graders.load_constants(self.task_id)["best_static_action"], jnp.int32)
        wl = params.workload
        self.threshold = float(np.sqrt(wl.base_rate * wl.base_rate * wl.burst_multiplier))
        self.scores = self.grader_scores(static_policy, self.action)

    def grader_scores(self, make_policy, policy_args=None, run=None) -> np.ndarray:
        """float (episodes,): the grader's score of each held-out episode of `make_policy(policy_args)`,
        played by `run` (an `episode_runner`; default: the serving env's)."""
        from inferencegym_jax import graders

        run = self.run if run is None else run
        return np.asarray(graders.grade(run(policy_args, make_policy), self.params, self.task_id).score)


def switching_rules(best: BestStatic, switches, fractions) -> None:
    """Grader score of the best static configuration with one knob switched in bursts, in a
    random fraction of the burst intervals (each interval independently, from the policy's key),
    paired against the best static configuration on the same episodes (mean, 95% CI over
    episodes). A fraction below 1 is what a stochastic policy's exploration tries."""

    def switched(args):  # (knob, index, fraction): float32 (3,), traced
        knob, index = args[0].astype(jnp.int32), args[1].astype(jnp.int32)
        in_burst = best.action.at[knob].set(index)

        def policy(key, obs, p):
            on = (obs.arrival_rate_ema > best.threshold) & (jax.random.uniform(key) < args[2])
            return jnp.where(on, in_burst, best.action)
        return policy

    print(f"\nbest static {np.asarray(best.action).tolist()}: score {best.scores.mean():.4f}; in bursts "
          f"(arrival-rate EMA > {best.threshold:.2f} req/s) switch one knob")
    print("| knob | grid value in bursts | share of burst intervals | score | minus best static (paired, 95% CI) |\n"
          "|---|---:|---:|---:|---:|")
    for knob, index in switches:
        for fraction in fractions:
            diff = best.grader_scores(switched, jnp.asarray([knob, index, fraction], jnp.float32)) - best.scores
            ci = evaluate.confidence_interval_95(diff)
            print(f"| {KNOBS[knob]} | {GRID[knob][index]:g} | {fraction:.0%} | {(best.scores + diff).mean():.4f} | "
                  f"{diff.mean():+.4f} ± {ci:.4f} |")


def knob_ablations(best: BestStatic, env, act, arrival_rate, play) -> None:
    """Grader score of the policy `act` with one knob replaced by the best static configuration's
    value, in every interval or only in bursts (`BestStatic.threshold`); `arrival_rate` and
    `play` as `trained_policy` gives them."""

    def replaced(knob_bursts):  # (knob, only in bursts): int32 (2,), traced
        def policy(key, obs, p):
            a = act(key, obs, p)
            swap = (knob_bursts[1] == 0) | (arrival_rate(obs) > best.threshold)
            return jnp.where(swap, a.at[knob_bursts[0]].set(best.action[knob_bursts[0]]), a)
        return policy

    def score(make_policy, policy_args=None) -> float:
        return float(np.mean(best.grader_scores(make_policy, policy_args, run=play)))

    print(f"\ngrader score; best static {best.scores.mean():.4f}, policy {score(lambda _: act):.4f}")
    print(f"policy with one knob set to the best static value (bursts: arrival-rate EMA > {best.threshold:.2f} req/s)")
    print("| knob | best static index | every interval | bursts only |\n|---|---:|---:|---:|")
    for knob in np.flatnonzero(np.asarray(env.action_space(best.params).nvec) > 1):
        every, bursts = (score(replaced, jnp.asarray([knob, flag], jnp.int32)) for flag in (0, 1))
        print(f"| {KNOBS[knob]} | {int(best.action[knob])} | {every:.4f} | {bursts:.4f} |")


if __name__ == "__main__":
    main()
