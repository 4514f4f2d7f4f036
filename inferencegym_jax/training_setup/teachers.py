"""Imitation teachers of the serving tasks: a controller's episodes as `training.imitation.Demonstrations`.

On task 2-v1 the causal MPC (`inferencegym_jax.control.mpc`: plans with the simulator from the
traffic belief, never from the episode's future) beats the best static configuration by reacting
for an interval or two at a time, and PPO started on the best static configuration does not find
those reactions; so a run with `imitation_episodes > 0` (`ServingSetup`) starts PPO from a policy
fitted to a teacher's choices (`training.imitation`: the fit and the DAgger rounds):

* `mpc_teacher`: the causal MPC, `imitation_horizon` intervals ahead over `imitation_samples`
  futures, its default candidates. A fair teacher: it sees the server's true state (a policy sees
  its observation's summaries) and the arrivals so far, nothing of the future;
* `rule_teacher`: the causal switching rule (`inferencegym_jax.control.switch_rule`) the baseline
  selects for the task, which sees the arrivals only.

Either is a `protocols.Controller`; `ControllerTeacher` plays `episodes` of its episodes in the env
PPO acts in (wrappers included) with the package's one episode loop (`evaluate.play_episode`), on
keys of the run's own training stream, recording the flat observation the policy would have seen
and the controller's choice at each interval; in a DAgger round the learner plays (`Labelled`) and
the controller's choices in the states it reached are only recorded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from inferencegym_jax import evaluate
from inferencegym_jax.control import mpc, switch_rule
from inferencegym_jax.control.mpc_config import MPCConfig
from inferencegym_jax.evaluate import Policy
from inferencegym_jax.protocols import Controller, Seen, StepOutput
from training.imitation import Demonstrations

# Episodes the teacher plays at once (vmapped); the rest go in sequence (`lax.map`), which bounds
# memory: each holds candidates x samples rolled-out env states.
TEACHER_BATCH = 8


@dataclasses.dataclass(frozen=True, eq=False)
class Labelled:
    """A controller that plays `learner`'s action (None: the teacher's) and remembers the
    teacher's choice beside the teacher's memory: memory (teacher's memory, int32 (K,) its last choice).

    Attributes:
      teacher: the `protocols.Controller` whose choices label the intervals.
      learner: None, or a policy `learner(key, obs, params)` asked with the interval's policy key.
      width: K, entries of an action (the choice's shape before the first interval).
    """

    teacher: Controller
    learner: Policy | None
    width: int

    def init(self, key: jax.Array, seen: Seen, params: Any) -> tuple[Any, jax.Array]:
        return self.teacher.init(key, seen, params), jnp.zeros(self.width, jnp.int32)

    def act(self, memory: tuple[Any, jax.Array], key: jax.Array, seen: Seen,
            params: Any) -> tuple[jax.Array, tuple[Any, jax.Array]]:
        choice, inner = self.teacher.act(memory[0], key, seen, params)
        action = choice if self.learner is None else self.learner(key, seen.obs, params)
        return action, (inner, choice)

    def update(self, memory: tuple[Any, jax.Array], step: StepOutput, params: Any) -> tuple[Any, jax.Array]:
        return self.teacher.update(memory[0], step, params), memory[1]


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: it holds arrays (the controller's)
class ControllerTeacher:
    """A controller as a source of demonstrations, a `training.imitation.Teacher`:
    `teacher(key, act=None) -> Demonstrations` of `episodes` episodes from split(key, episodes),
    TEACHER_BATCH of them at a time.

    Attributes:
      env: the env PPO acts in (a serving env in the absolute layout, possibly wrapped by memory
        wrappers); the controller is shown its observation and state.
      params: its EnvParams.
      episodes: N, episodes per call.
      controller: the `protocols.Controller` whose choices label each interval.
    """

    env: Any
    params: Any
    episodes: int
    controller: Controller

    def __call__(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        keys = jax.random.split(key, self.episodes)
        return jax.lax.map(lambda k: self.episode(k, act), keys, batch_size=min(TEACHER_BATCH, self.episodes))

    def episode(self, key: jax.Array, act: Policy | None = None) -> Demonstrations:
        """One episode from `key` (`evaluate.play_episode`'s keys), each interval labelled with the
        controller's choice from the state reached; leaves without the N axis.

        Args:
          act: None: the controller's choices are played (its own episode); else this policy of
            `env` (`act(key, obs, params)`, asked with the key `evaluate.run_episode` gives a
            policy, so the episode is run_episode's) plays (the learner, for DAgger) and the
            controller's choices are only recorded.
        """
        env, params = self.env, self.params
        width = len(env.action_space(params).nvec)

        def record(seen: Seen, memory: tuple[Any, jax.Array], step: StepOutput) -> tuple[jax.Array, ...]:
            return env.flatten_observation(seen.obs, params), memory[1], step.reward

        last, (flats, choices, rewards), _ = evaluate.play_episode(
            env, params, Labelled(self.controller, act, width), key, int(params.max_steps_in_episode), record)
        return Demonstrations(flats, env.flatten_observation(last.obs, params), choices, rewards)


def mpc_teacher(env: Any, params: Any, task_id: str, episodes: int, horizon: int, samples: int) -> ControllerTeacher:
    """The causal MPC of `task_id` (its default candidates, `horizon` intervals ahead over `samples`
    futures, `mpc.controller`) on the serving env under `env`, as a teacher in `env`."""
    base = getattr(env, "unwrapped", env)
    ctrl = mpc.controller(base, params, task_id, MPCConfig(horizon=horizon, samples=samples))
    return ControllerTeacher(env, params, episodes, ctrl)


def rule_teacher(env: Any, params: Any, task_id: str, episodes: int) -> ControllerTeacher:
    """The baseline's switching rule of `task_id` (`switch_rule.select` with its defaults: 128
    episodes of its own training stream, seed 0, the same for every run of the task) as a teacher
    in `env`. Its choice depends on the arrivals alone, so in a DAgger episode it labels the
    learner's states with what it would have chosen in its own."""
    rule, _ = switch_rule.select(getattr(env, "unwrapped", env), params, task_id)
    return ControllerTeacher(env, params, episodes, rule)
