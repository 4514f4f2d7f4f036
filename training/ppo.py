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

With a teacher (make_train's `teacher`, `training.imitation.Teacher`), `init` first fits the
network and the normalisers to the teacher's episodes, so PPO starts from an imitation of it.

`train(key, hparams)` = `init` + `lax.scan(update_step)`; the host loop of `training.run` calls a
jitted chunk of the same `update_step` and checkpoints between chunks; both give the same bits.
`hparams` are traced, so `jax.vmap(train)` over keys and `HParams` runs a sweep in one program.
`Trainer` trains anything shaped like a gymnax env (reset/step/action_space/flatten_observation),
including `training.probes`; it knows nothing of the serving env. What a configs/train file asks
for (the serving task in its action layout, memory wrappers, the initial action's prior, the
imitation teacher) is built by the serving setup, `inferencegym_jax.training_setup.make_train`,
which calls `make_train` here with that env, prior and teacher.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from inferencegym_jax import evaluate, sharding
from inferencegym_jax.protocols import Environment
from training.advantages import compute_gae
from training.config import EnvConfig, HParams, PPOConfig
from training.imitation import IMITATION_KEY_TAG, Demonstrations, PretrainedStart, Teacher, concatenate, pretrain
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
    returns: jax.Array
    key: jax.Array
    update: jax.Array


@struct.dataclass
class Transition:
    """One rollout step of all envs; leaves (num_envs, ...) ((num_steps, num_envs, ...) stacked).

    Attributes:
      obs: float32 (..., obs_dim), normalised observation the action was taken on.
      action: int32 (..., K_a), the policy's choices of the active action entries (ActionLayout).
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


def make_optimizer(config: PPOConfig, hp: HParams) -> optax.GradientTransformation:
    """Adam (eps 1e-5) after global-norm clipping; lr annealed linearly to 0 if config.anneal_lr."""
    grad_steps = config.num_updates * config.update_epochs * config.num_minibatches
    def annealed(count: jax.Array) -> jax.Array:
        return hp.lr * (1.0 - count.astype(jnp.float32) / grad_steps)

    lr: Any = annealed if config.anneal_lr else hp.lr
    return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.adam(lr, eps=1e-5))


class Trainer:
    """The pure functions of one PPO run (built by `make_train`); hashable by identity.

    Attributes:
      config: the PPOConfig.
      env_config: what built the env (an `EnvConfig`, e.g. the serving setup), stored and
        verified with config by checkpoints; None: the env as given (probes).
      env: the env PPO acts in, with the gymnax call shape: `reset(key, params)`,
        `step(key, state, action, params)` (auto-reset, `info["final_observation"]`),
        `action_space(params)` (a MultiDiscrete with `.nvec`), `flatten_observation(obs, params)`.
      env_params: its params (`max_steps_in_episode` is read by desync_envs).
      nvec: choices per entry of the env's action (K entries).
      layout: ActionLayout of the policy over `nvec`.
    """

    def __init__(self, config: PPOConfig, env: Environment, env_params: Any, initial_action: Any = None,
                 initial_logit: float = 0.0, warmup_action: Any = None, teacher: Teacher | None = None,
                 env_config: EnvConfig | None = None):
        """Args:
          initial_action: optional int32 (K,) in the env's action space: the initial policy
            puts `initial_logit` on each active entry's choice (a prior, not a constraint).
          initial_logit: the logit bonus; 0 (or no initial_action) starts near uniform.
          warmup_action: int32 (K,) in the env's action space that desync_envs steps the envs
            with before training (default: all zeros).
          teacher: optional `imitation.Teacher`, `teacher(key, act=None) -> Demonstrations`
            (pure, jittable; `act`: the learner's policy for a DAgger round, a `TrainedPolicy`)
            whose episodes `init` fits the network to before PPO (`training.imitation`).
          env_config: what built the env (`EnvConfig`), kept for checkpoints.
        """
        self.config = config
        self.teacher = teacher
        self.env_config = env_config
        if config.num_devices > 1:
            sharding.require_every_process(sharding.batch_mesh(config.num_devices), "num_devices")
        self.env = env
        self.env_params = env_params
        self.nvec = tuple(env.action_space(env_params).nvec)
        self.layout = ActionLayout(self.nvec)
        warmup = np.zeros(len(self.nvec), np.int32) if warmup_action is None else warmup_action
        self._warmup = _action(warmup, self.nvec, "warmup_action")
        initial = None
        if initial_action is not None and initial_logit:
            initial = self.layout.initial_logits(_action(initial_action, self.nvec, "initial_action"), initial_logit)
        self.network = ActorCritic(self.layout, config.actor_widths, config.critic_widths, initial)
        obs, _ = env.reset(jax.random.key(0), env_params)
        self.obs_dim = int(env.flatten_observation(obs, env_params).shape[-1])

    # ------------------------------------------------------------------ helpers

    @property
    def env_id(self) -> str:
        """The env's id (a task id for a serving env, else its class name)."""
        return str(getattr(self.env, "env_id", type(self.env).__name__))

    def root_key(self) -> jax.Array:
        """The run's root key: evaluate.training_key(config.seed) (disjoint from evaluation)."""
        return evaluate.training_key(self.config.seed)

    def default_hparams(self) -> HParams:
        return self.config.hparams()

    def _flat(self, obs: Any) -> jax.Array:
        return jax.vmap(self.env.flatten_observation, in_axes=(0, None))(obs, self.env_params)

    def _norm(self, stats: RunningStats, flat_obs: jax.Array) -> jax.Array:
        return stats.normalize(flat_obs) if self.config.normalize_obs else flat_obs

    # The env batch axis (leading, num_envs) is made only by these two methods: the one place to
    # put a sharding constraint (jax.sharding over devices) when envs are split across devices.
    # With config.num_devices > 1 XLA partitions the rollout by env and the update by sample
    # (the gradient mean becomes an all-reduce); one device otherwise. With several processes
    # (jax.distributed) the devices span them all, and the env state comes out spread over them:
    # `sharding.gather(runner)` before host use (checkpoints).
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
        obs_stats, ret_stats = RunningStats.create((self.obs_dim,)), RunningStats.create(())
        if self.teacher is not None:
            start = self.imitate(key, hp, params)
            params, obs_stats, ret_stats = start.params, start.obs_stats, start.ret_stats
        return RunnerState(
            params=params,
            opt_state=make_optimizer(self.config, hp).init(params),
            obs_stats=obs_stats,
            ret_stats=ret_stats,
            env_state=env_state,
            obs=self._flat(obs),
            returns=jnp.zeros((self.config.num_envs,), jnp.float32),
            key=k_run,
            update=jnp.zeros((), jnp.int32),
        )

    def imitate(self, key: jax.Array, hp: HParams, params: Any) -> PretrainedStart:
        """The network `params` fitted to the teacher's episodes (`training.imitation`), from the
        run's root `key` (a stream of its own: fold_in(key, IMITATION_KEY_TAG)); then, for each of
        `config.imitation_rounds` (DAgger), episodes of the fitted policy labelled by the teacher
        are added to the data and the fit goes on."""
        teacher = self.teacher
        if teacher is None:
            raise ValueError("Trainer.imitate needs a teacher (Trainer(..., teacher=...))")
        k_demo, k_fit = jax.random.split(jax.random.fold_in(key, IMITATION_KEY_TAG))
        demos = teacher(k_demo)
        start = self._fit(params, demos, k_fit, hp)
        for r in range(1, self.config.imitation_rounds + 1):
            learner = self.policy(start.params, start.obs_stats)  # the fit's mode
            demos = concatenate(demos, teacher(jax.random.fold_in(k_demo, r), learner))
            start = self._fit(start.params, demos, jax.random.fold_in(k_fit, r), hp)
        return start

    def _fit(self, params: Any, demos: Demonstrations, key: jax.Array, hp: HParams) -> PretrainedStart:
        config = self.config
        return pretrain(self.network, self.layout, params, demos, key, epochs=config.imitation_epochs,
                        lr=config.imitation_lr, minibatch_size=config.minibatch_size, gamma=hp.gamma,
                        gae_lambda=hp.gae_lambda, vf_coef=hp.vf_coef, max_grad_norm=hp.max_grad_norm,
                        normalize_obs=config.normalize_obs, scale_rewards=config.scale_rewards)

    def _desync(self, key: jax.Array, obs: Any, env_state: Any) -> tuple[Any, Any]:
        """Advance env i by k_i ~ U{0, .., horizon-1} intervals of the warm-up action (the task default).

        Envs reset together would stay in lockstep, so every rollout would cover the same phase
        of every episode (a sawtooth in the training reward, biased batches). One horizon of
        masked steps at the start spreads them over the episode; it costs one episode of steps.
        """
        horizon = int(self.env_params.max_steps_in_episode)
        k_len, k_steps = jax.random.split(key)
        lengths = jax.random.randint(k_len, (self.config.num_envs,), 0, horizon)
        actions = jnp.broadcast_to(jnp.asarray(self._warmup), (self.config.num_envs, len(self.nvec)))

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
        # flax annotates Module.apply's result as "outputs or (outputs, variables)"; it is the
        # latter only with mutable=, so the casts below name the outputs.
        apply = self.network.apply

        def step(carry, k):
            env_state, raw_obs, returns, seen = carry
            seen = seen.update(raw_obs)
            k_act, k_env = jax.random.split(k)
            obs = self._norm(runner.obs_stats, raw_obs)
            logits, value = cast(tuple[jax.Array, jax.Array], apply(runner.params, obs))
            action = sample_actions(k_act, logits)
            log_prob = policy_distribution(logits).log_prob(action)
            next_obs, env_state, reward, terminated, truncated, info = self._env_step(
                k_env, env_state, self.layout.to_env(action))
            final = self._norm(runner.obs_stats, self._flat(info["final_observation"]))
            next_value = cast(jax.Array, apply(runner.params, final, method=ActorCritic.value))
            done = terminated | truncated
            returns = returns * hp.gamma + reward
            transition = Transition(obs, action, log_prob, value, next_value, reward, terminated, done, returns)
            returns = jnp.where(done, 0.0, returns)
            return (env_state, self._flat(next_obs), returns, seen), transition

        seen = RunningStats(jnp.zeros_like(runner.obs_stats.mean), jnp.zeros_like(runner.obs_stats.var),
                            jnp.float32(0.0))
        carry = (runner.env_state, runner.obs, runner.returns, seen)
        (env_state, obs, returns, seen), traj = jax.lax.scan(
            step, carry, jax.random.split(key, self.config.num_steps))
        return dataclasses.replace(runner, env_state=env_state, obs=obs, returns=returns), traj, seen

    def loss(self, params: Any, batch: Transition, advantages: jax.Array, targets: jax.Array,
             hp: HParams) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Clipped PPO loss of a minibatch (leading axis = samples) and its diagnostics."""
        logits, value = cast(tuple[jax.Array, jax.Array], self.network.apply(params, batch.obs))
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
        def flat(x: jax.Array) -> jax.Array:
            return x.reshape(config.batch_size, *x.shape[2:])

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
        runner = dataclasses.replace(runner, params=params, opt_state=opt_state, obs_stats=obs_stats,
                                     ret_stats=ret_stats, key=key, update=runner.update + 1)
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

    def policy(self, params: Any, obs_stats: RunningStats, deterministic: bool = True) -> TrainedPolicy:
        """`policy(key, obs, env_params) -> action` for evaluation, with frozen normaliser.

        The action is in the action space of `self.env` (int32 (K,), 0 on masked entries): run
        it on `self.env` (for the serving tasks, the env in its setup's action layout). The
        policy is a pytree whose leaves are the weights and the normaliser, so evaluating
        another checkpoint of the same trainer compiles nothing new.
        """
        return TrainedPolicy(params, obs_stats, self, bool(deterministic))


@struct.dataclass
class TrainedPolicy:
    """A trainer's evaluation policy as a pytree (`Trainer.policy`).

    Attributes:
      params: the actor-critic's weights (float32 leaves).
      obs_stats: RunningStats, the observation normaliser, frozen.
      trainer: the Trainer (static: its network, env and action layout).
      deterministic: static; True: the mode of each knob's categorical, False: a sample.
    """

    params: Any
    obs_stats: RunningStats
    trainer: Trainer = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, key: jax.Array, obs: Any, env_params: Any) -> jax.Array:
        trainer = self.trainer
        x = trainer._norm(self.obs_stats, trainer.env.flatten_observation(obs, env_params))
        logits = cast(jax.Array, trainer.network.apply(self.params, x, method=ActorCritic.logits))
        action = policy_distribution(logits).mode() if self.deterministic else sample_actions(key, logits)
        return trainer.layout.to_env(action)


def _action(action: Any, nvec: tuple[int, ...], name: str) -> np.ndarray:
    """int32 (K,) host copy of an action of the space nvec; ValueError naming it if it is not in it."""
    value = np.asarray(action)
    fits = value.shape == (len(nvec),) and np.issubdtype(value.dtype, np.integer)
    if not (fits and np.all((value >= 0) & (value < np.asarray(nvec)))):
        raise ValueError(f"{name} = {value.tolist()} is not an int vector in the env's action space nvec={nvec}")
    return value.astype(np.int32)


def make_train(config: PPOConfig, env: Any, env_params: Any = None, *, initial_action: Any = None,
               initial_logit: float = 0.0, warmup_action: Any = None, teacher: Teacher | None = None,
               env_config: EnvConfig | None = None) -> Trainer:
    """The PPO program of `config` on `env` (gymnax call shape) with `env_params` (None: its
    `default_params`); the keyword arguments are `Trainer`'s. `make_train(config, env).train` is
    the PureJaxRL `train(key, hparams=None)`; jit it, or vmap it over keys and HParams for a sweep.

    A configs/train file (a serving task, its wrappers, prior and teacher) is built by
    `inferencegym_jax.training_setup.make_train`, which calls this.
    """
    if env is None or isinstance(env, (str, int)):
        raise ValueError(f"make_train needs the env to train on, got {env!r}: a configs/train file's task is built "
                         "by the serving setup (inferencegym_jax.training_setup.make_train)")
    params = env.default_params if env_params is None else env_params
    return Trainer(config, env, params, initial_action=initial_action, initial_logit=initial_logit,
                   warmup_action=warmup_action, teacher=teacher, env_config=env_config)
