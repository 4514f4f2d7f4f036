"""Imitation of the causal MPC before PPO: a start that already reacts to the server's state.

On task 2-v1 the causal `mpc` (inferencegym_jax.control.mpc: plans with the simulator from the traffic
belief, never from the episode's future) beats the best static configuration by reacting for an
interval or two at a time (smaller batches and KV budget just after a burst starts:
results/mpc_behaviour_task2_v1.json), and PPO started on the best static configuration does not
find those reactions. With `config.imitation_episodes > 0`, `Trainer.init` therefore starts PPO
from a policy fitted to the MPC's choices:

1. `MPCTeacher` plays `imitation_episodes` episodes of the causal MPC (`imitation_horizon`
   intervals ahead over `imitation_samples` futures, its default candidates) in the env PPO acts
   in (wrappers included), on keys of the run's own training stream, recording the flat
   observation the policy would have seen and the MPC's choice at each interval;
2. `pretrain` sets the observation normaliser to those observations' statistics and the return
   scale to their discounted returns', then for `imitation_epochs` epochs fits the actor to the
   teacher's choices (cross-entropy) and the critic to the teacher's lambda-returns, recomputed
   from the critic itself each epoch, so a truncated episode is bootstrapped from V(final
   observation) exactly as PPO's GAE does;
3. for each of `imitation_rounds` (DAgger, Ross et al. 2011, "A Reduction of Imitation Learning
   and Structured Prediction to No-Regret Online Learning"): the fitted policy plays
   `imitation_episodes` episodes, the MPC's choice in every state it reached is recorded, the
   episodes join the data, and the fit goes on. A policy fitted to the teacher's states alone
   drifts, off them, into states whose right reaction it has never seen.

This is behaviour cloning from a fair teacher: the MPC sees the server's true state (a policy
sees its observation's summaries) and the arrivals so far, nothing of the future. PPO then
trains from that start with its own rollouts and rewards. With `imitation_teacher =
"switch_rule"` the teacher is `RuleTeacher` instead: the causal switching rule
(inferencegym_jax.control.switch_rule) the baseline selects for the task, which sees the arrivals only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from inferencegym_jax import graders
from inferencegym_jax.control import mpc, switch_rule
from inferencegym_jax.env import EnvState
from inferencegym_jax.evaluate import Policy
from training.advantages import compute_gae
from training.networks import ActionLayout, ActorCritic, policy_distribution
from training.normalize import RunningStats

# Fold-in tag of the teacher's episode keys in the run's root key (`Trainer.init`): a stream of
# its own, so the other keys of init (network, envs, runner) are those of a run without imitation.
IMITATION_KEY_TAG = 7
# Episodes the teacher plays at once (vmapped); the rest go in sequence (`lax.map`), which bounds
# memory: each holds candidates x samples rolled-out env states.
TEACHER_BATCH = 8


@struct.dataclass
class Demonstrations:
    """The teacher's episodes, as the policy would have seen them; leading axes (N episodes, T intervals).

    Attributes:
      obs: float32 (N, T, D), the flat (unnormalised) observation before each interval.
      final_obs: float32 (N, D), the flat observation the last interval ended on.
      action: int32 (N, T, K), the teacher's choice in each state, in the env's action space
        (grid indices, 0 on masked knobs): played in its own episodes, only recorded in a DAgger
        episode (the learner plays).
      reward: float32 (N, T), the env's reward per interval, for the action played.
    """

    obs: jax.Array
    final_obs: jax.Array
    action: jax.Array
    reward: jax.Array


def serving_state(state: Any) -> EnvState:
    """The serving env's state under any memory wrappers' states (each holds it in `env_state`)."""
    while not isinstance(state, EnvState):
        state = state.env_state
    return state


class Teacher:
    """`teacher(key, act=None) -> Demonstrations`: `episodes` episodes of the subclass's
    `episode(key, act)` from split(key, episodes), TEACHER_BATCH of them at a time."""

    episodes: int

    def episode(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        raise NotImplementedError

    def __call__(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        keys = jax.random.split(key, self.episodes)
        return jax.lax.map(lambda k: self.episode(k, act), keys, batch_size=min(TEACHER_BATCH, self.episodes))


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: it holds arrays (params)
class MPCTeacher(Teacher):
    """The causal MPC as a source of demonstrations: `teacher(key, act=None) -> Demonstrations`.

    Attributes:
      env: the env PPO acts in (a serving env in the absolute layout, possibly wrapped by memory
        wrappers); the MPC plans on the serving env under it.
      params: its EnvParams.
      task_id: the task (the MPC's grader objective and its candidates' best static action).
      episodes: N, episodes per call.
      candidates: the MPC's candidate actions, int32 grid indices, C rows of K.
      horizon: [intervals] the MPC looks ahead.
      samples: sampled futures per candidate.
    """

    env: Any
    params: Any
    task_id: str
    episodes: int
    candidates: tuple[tuple[int, ...], ...]
    horizon: int
    samples: int

    @classmethod
    def build(cls, env: Any, params: Any, task_id: str, episodes: int, horizon: int,
              samples: int) -> MPCTeacher:
        """The teacher with the MPC's default candidates (`mpc.candidate_actions`), looking
        `horizon` intervals ahead over `samples` futures."""
        base = getattr(env, "unwrapped", env)
        rows = mpc.candidate_actions(base, params, task_id)
        return cls(env, params, task_id, episodes, tuple(tuple(int(i) for i in row) for row in rows), horizon, samples)

    def episode(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        """One episode from `key` (the keys of `mpc.run_mpc_episode` and `evaluate.run_episode`),
        each interval labelled with the MPC's choice from the state reached; leaves without the N axis.

        Args:
          act: None: the MPC's choices are played (its own episode); else this policy of `env`
            (`act(key, obs, params)`, asked with the key `evaluate.run_episode` gives it, so the
            episode is run_episode's) is (the learner, for DAgger) and the MPC's choices are only
            recorded.
        """
        env, params = self.env, self.params
        base = getattr(env, "unwrapped", env)
        num_steps = int(params.max_steps_in_episode)
        candidates = jnp.asarray(self.candidates, jnp.int32)
        grader = graders.grader_name(self.task_id)
        k_reset, k_env, k_plan = jax.random.split(key, 3)
        obs, state = env.reset_env(k_reset, params)
        past, belief = mpc.start_memory(params)

        def body(carry, t):
            obs, state, past, belief = carry
            served = serving_state(state)
            choice = mpc.plan(base, params, candidates, served, past, belief, t, k_env, k_plan, num_steps,
                              self.horizon, self.samples, clairvoyant=False, grader=grader)
            flat = env.flatten_observation(obs, params)
            action = choice if act is None else act(jax.random.fold_in(k_plan, t), obs, params)
            obs, state, reward, _, _, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)
            past, belief = mpc.advance(past, belief, served, info, t, params)
            return (obs, state, past, belief), (flat, choice, reward)

        (obs, *_), (flats, choices, rewards) = jax.lax.scan(body, (obs, state, past, belief), jnp.arange(num_steps))
        return Demonstrations(flats, env.flatten_observation(obs, params), choices, rewards)


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: it holds arrays (params, rule)
class RuleTeacher(Teacher):
    """The causal switching rule (inferencegym_jax.control.switch_rule) as a source of demonstrations,
    called like MPCTeacher. Its choice depends on the arrivals alone, so in a DAgger episode it
    labels the learner's states with what it would have chosen in its own.

    Attributes:
      env, params, episodes: as MPCTeacher's.
      rule: the rule (`switch_rule.SwitchRule`).
    """

    env: Any
    params: Any
    episodes: int
    rule: switch_rule.SwitchRule

    @classmethod
    def build(cls, env: Any, params: Any, task_id: str, episodes: int) -> RuleTeacher:
        """The teacher with the baseline's rule: `switch_rule.select` with its defaults (128
        episodes of its own training stream, seed 0), the same for every run of the task."""
        rule, _ = switch_rule.select(getattr(env, "unwrapped", env), params, task_id)
        return cls(env, params, episodes, rule)

    def episode(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        """One episode from `key`, each interval labelled with the rule's choice; as MPCTeacher's."""
        env, params, rule = self.env, self.params, self.rule
        k_reset, k_env, k_plan = jax.random.split(key, 3)
        obs, state = env.reset_env(k_reset, params)

        def body(carry, t):
            obs, state, memory = carry
            memory, choice = switch_rule.decide(rule, memory, t, params.server.dt_s)
            flat = env.flatten_observation(obs, params)
            action = choice if act is None else act(jax.random.fold_in(k_plan, t), obs, params)
            obs, state, reward, _, _, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)
            return (obs, state, switch_rule.remember(rule, memory, t, info)), (flat, choice, reward)

        start = (obs, state, switch_rule.start_memory(rule))
        (obs, *_), (flats, choices, rewards) = jax.lax.scan(body, start, jnp.arange(int(params.max_steps_in_episode)))
        return Demonstrations(flats, env.flatten_observation(obs, params), choices, rewards)


def concatenate(*demos: Demonstrations) -> Demonstrations:
    """The episodes of several Demonstrations, one after the other on the N axis."""
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *demos)


@struct.dataclass
class PretrainedStart:
    """What PPO starts from after imitation (`pretrain`).

    Attributes:
      params: ActorCritic weights fitted to the demonstrations.
      obs_stats: RunningStats of the demonstrations' flat observations (D,).
      ret_stats: RunningStats of their discounted returns so far () (PPO's reward scale).
      actor_loss: float32 (epochs,), mean cross-entropy per epoch [nats, summed over knobs].
      value_loss: float32 (epochs,), mean squared error of the critic per epoch [scaled reward^2].
      agreement: float32 (), share of intervals whose every knob the fitted policy's mode sets as
        the teacher did.
    """

    params: Any
    obs_stats: RunningStats
    ret_stats: RunningStats
    actor_loss: jax.Array
    value_loss: jax.Array
    agreement: jax.Array


def discounted_returns_so_far(reward: jax.Array, gamma: jax.Array) -> jax.Array:
    """float32 (N, T): sum_{s <= t} gamma^(t - s) r_s within each episode, PPO's `returns` that scale rewards."""

    def body(ret, r):
        ret = ret * gamma + r
        return ret, ret

    _, out = jax.lax.scan(body, jnp.zeros_like(reward[:, 0]), reward.T)
    return out.T


def pretrain(network: ActorCritic, layout: ActionLayout, params: Any, demos: Demonstrations, key: jax.Array, *,
             epochs: int, lr: float, minibatch_size: int, gamma: jax.Array, gae_lambda: jax.Array,
             vf_coef: jax.Array, max_grad_norm: jax.Array, normalize_obs: bool,
             scale_rewards: bool) -> PretrainedStart:
    """Fit `params` (ActorCritic weights) to the demonstrations (module docstring, step 2).

    Each epoch recomputes the critic's lambda-return targets, then takes Adam steps (lr, global
    norm clip) over shuffled minibatches of `minibatch_size` intervals (the last partial one
    dropped) on cross-entropy + vf_coef * 0.5 * squared value error.
    """
    n, t, dim = demos.obs.shape
    obs_stats = RunningStats.of(demos.obs, (dim,)) if normalize_obs else RunningStats.create((dim,))
    returns = discounted_returns_so_far(demos.reward, gamma)
    ret_stats = RunningStats.of(returns, ()) if scale_rewards else RunningStats.create(())
    scale = ret_stats.std if scale_rewards else jnp.float32(1.0)

    def norm(x: jax.Array) -> jax.Array:
        return obs_stats.normalize(x) if normalize_obs else x

    x = norm(demos.obs)
    x_next = norm(jnp.concatenate([demos.obs[:, 1:], demos.final_obs[:, None]], axis=1))
    choices = demos.action[..., jnp.asarray(layout.active)]
    last = jnp.zeros((n, t), bool).at[:, -1].set(True)  # each episode ends (is truncated) at T
    size = n * t
    batch = min(minibatch_size, size)
    steps = size // batch
    tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(lr, eps=1e-5))

    def loss(p: Any, xb: jax.Array, ab: jax.Array, tb: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        logits, value = network.apply(p, xb)
        actor = -jnp.mean(policy_distribution(logits).log_prob(ab))
        critic = 0.5 * jnp.mean(jnp.square(value - tb))
        return actor + vf_coef * critic, (actor, critic)

    def epoch(carry, k):
        p, opt_state = carry
        values = network.apply(p, x, method=ActorCritic.value)
        next_values = network.apply(p, x_next, method=ActorCritic.value)
        _, targets = compute_gae(demos.reward.T / scale, values.T, next_values.T, jnp.zeros((t, n), bool), last.T,
                                 gamma, gae_lambda)
        perm = jax.random.permutation(k, size)[: steps * batch]
        data = (x.reshape(size, dim)[perm], choices.reshape(size, -1)[perm], targets.T.reshape(size)[perm])
        data = jax.tree_util.tree_map(lambda a: a.reshape(steps, batch, *a.shape[1:]), data)

        def step(carry, mb):
            p, opt_state = carry
            grads, parts = jax.grad(loss, has_aux=True)(p, *mb)
            updates, opt_state = tx.update(grads, opt_state, p)
            return (optax.apply_updates(p, updates), opt_state), parts

        (p, opt_state), (actor, critic) = jax.lax.scan(step, (p, opt_state), data)
        return (p, opt_state), (jnp.mean(actor), jnp.mean(critic))

    (params, _), (actor_loss, value_loss) = jax.lax.scan(epoch, (params, tx.init(params)),
                                                         jax.random.split(key, epochs))
    mode = policy_distribution(network.apply(params, x, method=ActorCritic.logits)).mode()
    agreement = jnp.mean(jnp.all(mode == choices, axis=-1).astype(jnp.float32))
    return PretrainedStart(params, obs_stats, ret_stats, actor_loss, value_loss, agreement)
