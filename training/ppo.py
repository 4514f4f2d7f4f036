"""PPO in the PureJaxRL shape: `make_train(config) -> train(key)`, the whole run one jitted program.

    from training import load_config, make_train
    trainer = make_train(load_config("ppo_task1"))
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())     # one compiled program

One update (`Trainer.update_step`, a pure function of (RunnerState, HParams)):

1. rollout: `lax.scan` over `num_steps` intervals of `num_envs` vmapped envs (auto-reset);
   the actor samples the factored categorical action from normalised observations;
2. reward scaling: rewards divided by the running std of the discounted return;
3. GAE: the value is masked with `terminated` only; every step bootstraps from
   V(info["final_observation"]), the observation the step ended on before any auto-reset, so a
   truncated episode (the serving tasks end only by truncation) is bootstrapped, not treated as
   terminal;
4. `update_epochs` passes of `num_minibatches` shuffled minibatches, clipped PPO loss, clipped
   value loss, entropy bonus; optax Adam with global-norm clipping and a linearly annealed
   learning rate;
5. the observation statistics are updated with the rollout, after the update (so the update
   sees exactly the inputs the rollout acted on).

`train(key, hparams)` = `init` + `lax.scan(update_step)`; the host loop of `training.run` calls a
jitted chunk of the same `update_step` and checkpoints between chunks; both give the same bits.
`hparams` are traced, so `jax.vmap(train)` over keys and `HParams` runs a sweep in one program.
Anything shaped like the env (reset/step/action_space/flatten_observation) can be trained,
including `training.probes`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from inferencegym_jax import evaluate, sharding
from inferencegym_jax.actions import ServingAction, indices_from_action
from training.config import HParams, PPOConfig
from training.networks import ActionLayout, ActorCritic, policy_distribution, sample_actions
from training.normalize import RunningStats


@struct.dataclass
class RunnerState:
    """Everything the training loop carries; a checkpoint is exactly this pytree.

    Attributes:
      params: flax variables of `ActorCritic` (actor and critic MLP weights, float32).
      opt_state: optax state (gradient-clip and Adam moments, step count).
      obs_stats: RunningStats of the flat observation, float32 (obs_dim,).
      ret_stats: RunningStats of the discounted return, float32 () (reward scaling).
      env_state: the envs' state, leading axis num_envs.
      obs: float32 (num_envs, obs_dim), the current flat (unnormalised) observation.
      config_idx: int32 (num_envs, K), grid indices of the knobs in force (relative and hold
        actions start from them; zeros in absolute mode).
      returns: float32 (num_envs,), discounted return so far in the current episodes.
      key: PRNG key (new-style) for the next update.
      update: int32 (), updates done.
    """

    params: Any
    opt_state: Any
    obs_stats: RunningStats
    ret_stats: RunningStats
    env_state: Any
    obs: jax.Array
    config_idx: jax.Array
    returns: jax.Array
    key: jax.Array
    update: jax.Array


@struct.dataclass
class Transition:
    """One rollout step of all envs; leaves (num_envs, ...) ((num_steps, num_envs, ...) stacked).

    Attributes:
      obs: float32 (..., obs_dim), normalised observation the action was taken on.
      action: int32 (..., K_a), grid indices of the active knobs (ActionLayout).
      log_prob: float32, log pi(action | obs) at rollout time.
      value: float32, V(obs).
      next_value: float32, V(final observation of the step) (before auto-reset).
      reward: float32, raw env reward.
      terminated: bool, the episode reached a terminal state.
      done: bool, terminated or truncated (an auto-reset followed).
      returns: float32, discounted return including this step (for reward scaling).
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    next_value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    done: jax.Array
    returns: jax.Array


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: jax.Array,
    lam: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates over a rollout; all inputs float32/bool (T, N).

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t), with s'_t the observation the
    step ended on (the final observation, before any auto-reset); the recursion
    A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1} stops at every episode boundary
    (terminated or truncated), and A_T = 0 past the rollout (V(s'_{T-1}) bootstraps it).

    Returns (advantages, value targets = advantages + values), float32 (T, N).
    """
    not_term = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    deltas = rewards + gamma * next_values * not_term - values

    def body(next_adv, x):
        delta, nd = x
        adv = delta + gamma * lam * nd * next_adv
        return adv, adv

    _, advantages = jax.lax.scan(body, jnp.zeros_like(values[0]), (deltas, not_done), reverse=True)
    return advantages, advantages + values


def make_optimizer(config: PPOConfig, hp: HParams) -> optax.GradientTransformation:
    """Adam (eps 1e-5) after global-norm clipping; lr annealed linearly to 0 if config.anneal_lr."""
    grad_steps = config.num_updates * config.update_epochs * config.num_minibatches
    if config.anneal_lr:
        lr: Any = lambda count: hp.lr * (1.0 - count.astype(jnp.float32) / grad_steps)  # noqa: E731
    else:
        lr = hp.lr
    return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(lr, eps=1e-5))


class Trainer:
    """The pure functions of one PPO run (built by `make_train`); hashable by identity."""

    def __init__(self, config: PPOConfig, env: Any, env_params: Any):
        self.config = config
        self.env = env
        self.env_params = env_params
        self.nvec = tuple(env.action_space(env_params).nvec)
        # The task's default action as grid indices (0 on masked knobs; all 0 for envs without one).
        self._default_idx = np.zeros(len(self.nvec), np.int32)
        if hasattr(env_params, "default_action"):
            default = np.asarray(indices_from_action(env_params.default_action))
            self._default_idx = np.where(np.asarray(self.nvec) > 1, default, 0).astype(np.int32)
        self.acts_on_config = config.action_mode in ("relative", "hold")  # from the knobs in force
        if self.acts_on_config and not hasattr(env_params, "default_action"):
            raise ValueError(f"action_mode={config.action_mode!r} needs an env whose observation has the knobs in "
                             "force (config)")
        if config.action_mode == "relative":
            # Each active knob: choice 0, 1, 2 = one grid step down, no change, one step up.
            self.layout = ActionLayout(tuple(3 if n > 1 else 1 for n in self.nvec))
            self._keep = np.asarray([1 if n > 1 else 0 for n in self.nvec], np.int32)
        elif config.action_mode == "hold":
            # Each active knob: choice 0 = no change, choice i >= 1 = set grid index i - 1.
            self.layout = ActionLayout(tuple(n + 1 if n > 1 else 1 for n in self.nvec))
            self._keep = np.zeros(len(self.nvec), np.int32)
        else:
            self.layout = ActionLayout(self.nvec)
        initial = None
        if config.default_logit and (self.acts_on_config or hasattr(env_params, "default_action")):
            if config.initial_action == "best_static":  # absolute: index i; hold: choice i + 1, "set index i"
                default = self._best_static_idx() + (1 if config.action_mode == "hold" else 0)
            else:
                default = self._keep if self.acts_on_config else self._default_idx
            initial = self.layout.initial_logits(default, config.default_logit)
        self.network = ActorCritic(self.layout, config.actor_widths, config.critic_widths, initial)
        obs, _ = env.reset(jax.random.key(0), env_params)
        self.obs_dim = int(env.flatten_observation(obs, env_params).shape[-1])

    # ------------------------------------------------------------------ helpers

    def _best_static_idx(self) -> np.ndarray:
        """int32 (K,): grid indices of the graders' best static action (config.initial_action)."""
        from inferencegym_jax import graders

        try:
            best = graders.load_constants(self.config.task)["best_static_action"]
        except ValueError as err:
            raise ValueError(f"config key 'initial_action' = 'best_static': no best static configuration for task "
                             f"{self.config.task!r} ({err})") from None
        if len(best) != len(self.nvec) or any(not 0 <= b < n for b, n in zip(best, self.nvec)):
            raise ValueError(f"config key 'initial_action' = 'best_static': {self.config.task}'s best static action "
                             f"{best} does not fit the env's action space nvec={self.nvec}")
        return np.asarray(best, np.int32)  # a masked knob (nvec 1) passed the check only at index 0

    def root_key(self) -> jax.Array:
        """The run's root key: evaluate.training_key(config.seed) (disjoint from evaluation)."""
        return evaluate.training_key(self.config.seed)

    def default_hparams(self) -> HParams:
        return self.config.hparams()

    def _flat(self, obs: Any) -> jax.Array:
        return jax.vmap(self.env.flatten_observation, in_axes=(0, None))(obs, self.env_params)

    def config_indices(self, obs: Any) -> jax.Array:
        """int32 (..., K): grid indices of the knobs in force (absolute mode: unused zeros (num_envs, K))."""
        if not self.acts_on_config:
            return jnp.zeros((self.config.num_envs, len(self.nvec)), jnp.int32)
        c = obs.config
        return indices_from_action(ServingAction(*[c[..., i] for i in range(len(self.nvec))]))

    def env_action(self, choice: jax.Array, config_idx: jax.Array) -> jax.Array:
        """The env's int32 (..., K) action of the policy's choice (..., K_a)."""
        full = self.layout.to_env(choice)
        if not self.acts_on_config:
            return full
        active = np.asarray(self.nvec) > 1
        if self.config.action_mode == "hold":
            moved = jnp.where(full == 0, config_idx, full - 1)
        else:
            moved = jnp.clip(config_idx + full - self._keep, 0, np.asarray(self.nvec) - 1)
        return jnp.where(active, moved, 0).astype(jnp.int32)

    def _norm(self, stats: RunningStats, flat_obs: jax.Array) -> jax.Array:
        return stats.normalize(flat_obs) if self.config.normalize_obs else flat_obs

    # The env batch axis (leading, num_envs) is made only by these two methods: the one place to
    # put a sharding constraint (jax.sharding over devices) when envs are split across devices.
    # With config.num_devices > 1 XLA partitions the rollout by env and the update by sample
    # (the gradient mean becomes an all-reduce); one device otherwise.
    def _split(self, tree: Any) -> Any:
        if self.config.num_devices == 1:
            return tree
        return sharding.constrain_leading(tree, sharding.batch_mesh(self.config.num_devices))

    def _env_reset(self, key: jax.Array) -> tuple[Any, Any]:
        keys = self._split(jax.random.split(key, self.config.num_envs))
        return self._split(jax.vmap(self.env.reset, in_axes=(0, None))(keys, self.env_params))

    def _env_step(self, key: jax.Array, state: Any, action: jax.Array) -> tuple:
        keys = self._split(jax.random.split(key, self.config.num_envs))
        return self._split(jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(keys, state, action, self.env_params))

    # ------------------------------------------------------------------ the program

    def init(self, key: jax.Array, hp: HParams | None = None) -> RunnerState:
        """A fresh runner state from the run's root key."""
        hp = self.default_hparams() if hp is None else hp
        k_net, k_env, k_run = jax.random.split(key, 3)
        obs, env_state = self._env_reset(k_env)
        if self.config.desync_envs:
            obs, env_state = self._desync(jax.random.fold_in(k_env, 1), obs, env_state)
        params = self.network.init(k_net, jnp.zeros((1, self.obs_dim), jnp.float32))
        return RunnerState(
            params=params,
            opt_state=make_optimizer(self.config, hp).init(params),
            obs_stats=RunningStats.create((self.obs_dim,)),
            ret_stats=RunningStats.create(()),
            env_state=env_state,
            obs=self._flat(obs),
            config_idx=self.config_indices(obs),
            returns=jnp.zeros((self.config.num_envs,), jnp.float32),
            key=k_run,
            update=jnp.zeros((), jnp.int32),
        )

    def _desync(self, key: jax.Array, obs: Any, env_state: Any) -> tuple[Any, Any]:
        """Advance env i by k_i ~ U{0, .., horizon-1} intervals of the default action.

        Envs reset together would stay in lockstep, so every rollout would cover the same phase
        of every episode (a sawtooth in the training reward, biased batches). One horizon of
        masked steps at the start spreads them over the episode; it costs one episode of steps.
        """
        horizon = int(self.env_params.max_steps_in_episode)
        k_len, k_steps = jax.random.split(key)
        lengths = jax.random.randint(k_len, (self.config.num_envs,), 0, horizon)
        actions = jnp.broadcast_to(jnp.asarray(self._default_idx), (self.config.num_envs, len(self.nvec)))

        def body(carry, inputs):
            t, k = inputs
            obs, state = carry
            next_obs, next_state, *_ = self._env_step(k, state, actions)
            live = t < lengths

            def pick(new, old):
                return jnp.where(live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old)

            return (jax.tree_util.tree_map(pick, next_obs, obs), jax.tree_util.tree_map(pick, next_state, state)), None

        (obs, env_state), _ = jax.lax.scan(body, (obs, env_state),
                                           (jnp.arange(horizon), jax.random.split(k_steps, horizon)))
        return obs, env_state

    def rollout(self, runner: RunnerState, hp: HParams,
                key: jax.Array) -> tuple[RunnerState, Transition, RunningStats]:
        """`num_steps` steps of every env with the current policy.

        The runner's statistics are not changed; the statistics of the raw observations acted
        on are returned apart, to be merged after the update.
        """
        apply = self.network.apply

        def step(carry, k):
            env_state, raw_obs, config_idx, returns, seen = carry
            seen = seen.update(raw_obs)
            k_act, k_env = jax.random.split(k)
            obs = self._norm(runner.obs_stats, raw_obs)
            logits, value = apply(runner.params, obs)
            action = sample_actions(k_act, logits)
            log_prob = policy_distribution(logits).log_prob(action)
            next_obs, env_state, reward, terminated, truncated, info = self._env_step(
                k_env, env_state, self.env_action(action, config_idx))
            final = self._norm(runner.obs_stats, self._flat(info["final_observation"]))
            next_value = apply(runner.params, final, method=ActorCritic.value)
            done = terminated | truncated
            returns = returns * hp.gamma + reward
            transition = Transition(obs, action, log_prob, value, next_value, reward, terminated, done, returns)
            returns = jnp.where(done, 0.0, returns)
            return (env_state, self._flat(next_obs), self.config_indices(next_obs), returns, seen), transition

        seen = RunningStats(jnp.zeros_like(runner.obs_stats.mean), jnp.zeros_like(runner.obs_stats.var),
                            jnp.float32(0.0))
        carry = (runner.env_state, runner.obs, runner.config_idx, runner.returns, seen)
        (env_state, obs, config_idx, returns, seen), traj = jax.lax.scan(
            step, carry, jax.random.split(key, self.config.num_steps))
        return runner.replace(env_state=env_state, obs=obs, config_idx=config_idx, returns=returns), traj, seen

    def loss(self, params: Any, batch: Transition, advantages: jax.Array, targets: jax.Array,
             hp: HParams) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Clipped PPO loss of a minibatch (leading axis = samples) and its diagnostics."""
        logits, value = self.network.apply(params, batch.obs)
        pi = policy_distribution(logits)
        log_prob = pi.log_prob(batch.action)
        log_ratio = log_prob - batch.log_prob
        ratio = jnp.exp(log_ratio)
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        actor_loss = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - hp.clip_eps, 1.0 + hp.clip_eps) * adv))
        value_clipped = batch.value + jnp.clip(value - batch.value, -hp.clip_eps, hp.clip_eps)
        value_loss = 0.5 * jnp.mean(jnp.maximum(jnp.square(value - targets), jnp.square(value_clipped - targets)))
        entropy = jnp.mean(pi.entropy())
        total = actor_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
        diagnostics = {
            "actor_loss": actor_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > hp.clip_eps).astype(jnp.float32)),
        }
        return total, diagnostics

    def update_step(self, runner: RunnerState, hp: HParams) -> tuple[RunnerState, dict[str, jax.Array]]:
        """One PPO update: rollout, reward scaling, GAE, epochs x minibatches, stats update."""
        config = self.config
        key, k_roll, k_epochs = jax.random.split(runner.key, 3)
        runner, traj, seen = self.rollout(runner, hp, k_roll)

        ret_stats = runner.ret_stats.update(traj.returns) if config.scale_rewards else runner.ret_stats
        scale = ret_stats.std if config.scale_rewards else jnp.float32(1.0)
        terminal = traj.terminated if config.bootstrap_truncation else traj.done
        advantages, targets = compute_gae(traj.reward / scale, traj.value, traj.next_value, terminal, traj.done,
                                          hp.gamma, hp.gae_lambda)

        tx = make_optimizer(config, hp)
        grad_fn = jax.grad(self.loss, has_aux=True)
        flat = lambda x: x.reshape(config.batch_size, *x.shape[2:])  # noqa: E731
        data = (jax.tree_util.tree_map(flat, traj), flat(advantages), flat(targets))

        def minibatch(carry, mb):
            params, opt_state = carry
            batch, adv, tgt = mb
            grads, diag = grad_fn(params, batch, adv, tgt, hp)
            updates, opt_state = tx.update(grads, opt_state, params)
            diag["grad_norm"] = optax.tree.norm(grads)
            return (optax.apply_updates(params, updates), opt_state), diag

        def epoch(carry, k):
            perm = jax.random.permutation(k, config.batch_size)
            shuffled = jax.tree_util.tree_map(
                lambda x: x[perm].reshape(config.num_minibatches, config.minibatch_size, *x.shape[1:]), data)
            return jax.lax.scan(minibatch, carry, shuffled)

        (params, opt_state), diag = jax.lax.scan(
            epoch, (runner.params, runner.opt_state), jax.random.split(k_epochs, config.update_epochs))

        obs_stats = runner.obs_stats.merge(seen) if config.normalize_obs else runner.obs_stats
        metrics = {name: jnp.mean(v) for name, v in diag.items()}
        metrics["reward"] = jnp.mean(traj.reward)
        metrics["episodes_done"] = jnp.sum(traj.done).astype(jnp.float32)
        metrics["value"] = jnp.mean(traj.value)
        metrics["reward_scale"] = scale
        runner = runner.replace(params=params, opt_state=opt_state, obs_stats=obs_stats, ret_stats=ret_stats,
                                key=key, update=runner.update + 1)
        return runner, metrics

    def run_updates(self, runner: RunnerState, hp: HParams, num_updates: int) -> tuple[RunnerState, dict]:
        """`num_updates` updates by `lax.scan` (jit with num_updates static)."""
        return jax.lax.scan(lambda r, _: self.update_step(r, hp), runner, None, length=num_updates)

    @functools.cached_property
    def jit_init(self) -> Callable:
        """`jax.jit(init)`, compiled once per trainer."""
        return jax.jit(self.init)

    @functools.cached_property
    def jit_run_updates(self) -> Callable:
        """`jax.jit(run_updates)` with num_updates static; compiled once per chunk length."""
        return jax.jit(self.run_updates, static_argnums=2)

    def run_chunk(self, runner: RunnerState, hp: HParams, count: jax.Array) -> tuple[RunnerState, dict]:
        """The first `count` (traced, <= config.checkpoint_every) of a chunk of checkpoint_every updates.

        One compiled program serves every chunk length (the last, shorter chunk of a run and a
        resumed one included); skipped steps cost a branch and return zero metrics.
        """
        shapes = jax.eval_shape(self.update_step, runner, hp)[1]

        def body(r, i):
            return jax.lax.cond(
                i < count,
                lambda r: self.update_step(r, hp),
                lambda r: (r, jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)),
                r,
            )

        return jax.lax.scan(body, runner, jnp.arange(self.config.checkpoint_every))

    @functools.cached_property
    def jit_run_chunk(self) -> Callable:
        """`jax.jit(run_chunk)`: the host loop's one program."""
        return jax.jit(self.run_chunk)

    def train(self, key: jax.Array, hp: HParams | None = None) -> tuple[RunnerState, dict[str, jax.Array]]:
        """The whole run: init + `config.num_updates` updates. Metrics have a leading update axis."""
        hp = self.default_hparams() if hp is None else hp
        return self.run_updates(self.init(key, hp), hp, self.config.num_updates)

    # ------------------------------------------------------------------ acting

    def policy(self, params: Any, obs_stats: RunningStats, deterministic: bool = True) -> Callable:
        """`policy(key, obs, env_params) -> action` for evaluation, with frozen normaliser."""
        apply, env, norm = self.network.apply, self.env, self._norm

        def act(key: jax.Array, obs: Any, env_params: Any) -> jax.Array:
            x = norm(obs_stats, env.flatten_observation(obs, env_params))
            logits = apply(params, x, method=ActorCritic.logits)
            action = policy_distribution(logits).mode() if deterministic else sample_actions(key, logits)
            return self.env_action(action, self.config_indices(obs))

        return act


def make_env(task: str) -> tuple[Any, Any]:
    import inferencegym_jax as ig

    return ig.make(task)


def make_train(config: PPOConfig, env: Any = None, env_params: Any = None) -> Trainer:
    """The PPO program of `config` (on `config.task`, or on the given env and params).

    `make_train(config).train` is the PureJaxRL `train(key, hparams=None)`; jit it, or vmap it
    over keys and HParams for a sweep.
    """
    if env is None:
        env, default_params = make_env(config.task)
        env_params = default_params if env_params is None else env_params
    elif env_params is None:
        env_params = env.default_params
    return Trainer(config, env, env_params)
