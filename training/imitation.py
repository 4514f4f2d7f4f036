"""Imitation before PPO: fit the policy to a teacher's demonstrations, then DAgger rounds.

The teacher is any `Teacher`: `teacher(key, act=None) -> Demonstrations`, a pure, jittable
function that plays its episodes (with `act`, the learner plays and the teacher only labels the
states reached). training knows nothing of the env: the serving tasks' teachers (the causal MPC,
the switching rule) are built by the serving setup (`inferencegym_jax.training_setup.teachers`)
and handed to `training.make_train`. With a teacher, `Trainer.init`:

1. asks the teacher for its episodes, on keys of the run's own training stream
   (fold_in(key, IMITATION_KEY_TAG));
2. `pretrain` sets the observation normaliser to those observations' statistics and the return
   scale to their discounted returns', then for `imitation_epochs` epochs fits the actor to the
   teacher's choices (cross-entropy) and the critic to the teacher's lambda-returns, recomputed
   from the critic itself each epoch, so a truncated episode is bootstrapped from V(final
   observation) exactly as PPO's GAE does;
3. for each of `imitation_rounds` (DAgger, Ross et al. 2011, "A Reduction of Imitation Learning
   and Structured Prediction to No-Regret Online Learning"): the fitted policy plays the
   teacher's episodes, the teacher's choice in every state it reached is recorded, the episodes
   join the data, and the fit goes on. A policy fitted to the teacher's states alone drifts, off
   them, into states whose right reaction it has never seen.

This is behaviour cloning; PPO then trains from that start with its own rollouts and rewards.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import jax
import jax.numpy as jnp
import optax
from flax import struct

from inferencegym_jax.evaluate import Policy
from training.advantages import compute_gae
from training.networks import ActionLayout, ActorCritic, policy_distribution
from training.normalize import RunningStats

# Fold-in tag of the teacher's episode keys in the run's root key (`Trainer.init`): a stream of
# its own, so the other keys of init (network, envs, runner) are those of a run without imitation.
IMITATION_KEY_TAG = 7


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


class Teacher(Protocol):
    """A source of demonstrations: `teacher(key, act=None) -> Demonstrations` (pure, jittable).

    `key`: the episodes' key (from the run's root key). `act`: None, the teacher plays its own
    episodes; else the learner's policy (`act(key, obs, env_params) -> action`, a
    `ppo.TrainedPolicy`) plays and the teacher labels each state reached with its own choice.
    Each call returns the same number of episodes (N) of the same length (T).
    """

    def __call__(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        ...


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
        # flax annotates Module.apply's result as "outputs or (outputs, variables)"; it is the
        # latter only with mutable=, so the casts name the outputs.
        logits, value = cast(tuple[jax.Array, jax.Array], network.apply(p, xb))
        actor = -jnp.mean(policy_distribution(logits).log_prob(ab))
        critic = 0.5 * jnp.mean(jnp.square(value - tb))
        return actor + vf_coef * critic, (actor, critic)

    def epoch(carry, k):
        p, opt_state = carry
        values = cast(jax.Array, network.apply(p, x, method=ActorCritic.value))
        next_values = cast(jax.Array, network.apply(p, x_next, method=ActorCritic.value))
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
    mode = policy_distribution(cast(jax.Array, network.apply(params, x, method=ActorCritic.logits))).mode()
    agreement = jnp.mean(jnp.all(mode == choices, axis=-1).astype(jnp.float32))
    return PretrainedStart(params, obs_stats, ret_stats, actor_loss, value_loss, agreement)
