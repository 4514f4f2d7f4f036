"""Gymnasium adapters: the serving env as a `gymnasium.Env` and as a jitted `gymnasium.vector.VectorEnv`.

    import gymnasium
    import inferencegym_jax.interop.gymnasium_env  # registers InferenceGym/Task1-v0 .. InferenceGym/Task4-v0

    env = gymnasium.make("InferenceGym/Task1-v0")
    obs, info = env.reset(seed=0)                     # float32 (21,), entries in [0, 1]
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    envs = gymnasium.make_vec("InferenceGym/Task1-v0", num_envs=8)   # one jit(vmap) step for all 8

Ids. Task "InferenceGym-TaskN-v0" of `inferencegym_jax.registered_envs()` is registered as
"InferenceGym/TaskN-v0" (gymnasium namespace "InferenceGym", name "TaskN", version 0: the first
"-" becomes "/"; `gymnasium_id` and `task_id_of` map the two spellings). Importing this module
registers them (`register_envs`), so `gymnasium.make("inferencegym_jax.interop.gymnasium_env:InferenceGym/Task1-v0")`
works without an import of your own. Each id has a `vector_entry_point`: `gymnasium.make_vec` uses
`GymnasiumVectorEnv` (one jitted, vmapped step) unless told `vectorization_mode="sync"`.

Spaces. Observations are `env.flatten_observation`: float32 (OBS_SIZE,) = (21,), each entry in
[0, 1] (`observation.flat_observation_space`). Actions are int grid indices (`actions.KNOBS` order:
kv_budget, spec_length, batch_size, prefill_disagg, quant_tier), `gymnasium.spaces.MultiDiscrete`
of the task's `env.action_space(params).nvec`; a knob the task masks has nvec 1 (index 0).

Keys. `reset(seed=s)` starts the stream root = `jax.random.key(s)` (s an int in [0, 2**32 - 1]: a
key keeps 32 bits) at episode 0, and each `reset()` without a seed starts the stream's next
episode. Episode e of a stream, in plain JAX (`tests/test_gymnasium_env.py` checks it):

    k_reset, k_env, _ = jax.random.split(jax.random.fold_in(root, e), 3)
    obs, state = env.reset_env(k_reset, params)
    obs, state, reward, terminated, truncated, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)

for intervals t = 0, 1, ...; these are `evaluate.run_episode`'s keys, so episode e of a stream is
episode e of `evaluate.run_episodes(env, params, policy, root, ...)` given the same actions.
`reset(options={"key": k, "episode": e})` starts episode e of the stream of any root key k (such
as `evaluate.evaluation_key(0)`, the held-out episodes of the README's tables). A first `reset()`
without a seed draws s = `np_random.integers(2**32)` from gymnasium's `np_random` (itself seeded
from OS entropy). `GymnasiumVectorEnv` gives sub-env i its own stream, exactly as
`SyncVectorEnv` over `GymnasiumEnv`s does: `reset(seed=s)` seeds env i with s + i.

Tasks. Both adapters take a task id (or its gymnasium id, or a task number) and either
`params=` (EnvParams, e.g. `params.replace(max_steps_in_episode=jnp.int32(5))`) or task overrides
as `inferencegym_jax.make` takes them (`max_steps=5`, `workload={"base_rate": 20.0}`). Reset and
step are jitted once per task: the compiled programs are keyed by the task's env, and params are
their arguments, so another horizon or rate compiles nothing new.

Episodes end only at the horizon, `params.max_steps_in_episode` intervals (task 1: 200):
`terminated` is always False and `truncated` True on the last interval. Step info (reset info is
{}), plain Python scalars and NumPy arrays:
  reward_components: {throughput, latency, violations, cost, stability: float}, the reward's terms.
  metrics: every field of `serving.IntervalMetrics` (float, units there; class_share float32 (3,)).
  applied_action: {knob: float}, the configuration applied, in knob units.
  clipped: bool (5,), knobs the env clipped or masked to the task default.
  offered_tokens: float [tokens], output tokens of the requests that arrived in the interval.
  timestep: int [intervals] since the episode began.

Modules. This one is the front door (import from here; it registers the ids); the adapters are
split by concept: `gym_single` (`GymnasiumEnv`), `gym_vector` (`GymnasiumVectorEnv`),
`gym_grading` (`stack_infos`, `trajectory_from_infos`, `evaluate_policy`), `gym_host` (ids, argument
checks, info conversion, shared by both adapters) and `gym_programs` (the jitted programs).
"""

from __future__ import annotations

try:
    import gymnasium
except ImportError as error:  # the adapter is an optional extra
    raise ImportError(
        'inferencegym_jax.interop.gymnasium_env needs gymnasium: pip install "inferencegym_jax[gymnasium]"'
    ) from error

from inferencegym_jax import tasks
from inferencegym_jax.interop.fleet_gym import register_fleet_envs
from inferencegym_jax.interop.gym_grading import evaluate_policy, stack_infos, trajectory_from_infos
from inferencegym_jax.interop.gym_host import (
    MAX_SEED,
    NAMESPACE,
    RENDER_MODES,
    RESET_OPTIONS,
    check_actions,
    gymnasium_id,
    task_id_of,
)
from inferencegym_jax.interop.gym_programs import METRIC_NAMES
from inferencegym_jax.interop.gym_single import GymnasiumEnv
from inferencegym_jax.interop.gym_vector import GymnasiumVectorEnv
from inferencegym_jax.interop.reservation_gym import register_reservation_envs

__all__ = ["ENTRY_POINT", "GymnasiumEnv", "GymnasiumVectorEnv", "MAX_SEED", "METRIC_NAMES", "NAMESPACE",
           "RENDER_MODES", "RESET_OPTIONS", "VECTOR_ENTRY_POINT", "check_actions", "evaluate_policy",
           "gymnasium_id", "register_envs", "stack_infos", "task_id_of", "trajectory_from_infos"]

ENTRY_POINT = "inferencegym_jax.interop.gymnasium_env:GymnasiumEnv"
VECTOR_ENTRY_POINT = "inferencegym_jax.interop.gymnasium_env:GymnasiumVectorEnv"


def register_envs() -> list[str]:
    """Register one gymnasium id per task (see the module docstring); returns the ids.

    Idempotent: ids already registered are left as they are. The fleet tasks' and the reservation
    tasks' ids are registered too (`fleet_gym.register_fleet_envs`,
    `reservation_gym.register_reservation_envs`, which return them).
    """
    ids = []
    for env_id in tasks.registered_envs():
        gym_id = gymnasium_id(env_id)
        if gym_id not in gymnasium.registry:
            gymnasium.register(gym_id, entry_point=ENTRY_POINT, vector_entry_point=VECTOR_ENTRY_POINT,
                               kwargs={"task_id": env_id})
        ids.append(gym_id)
    register_fleet_envs()
    register_reservation_envs()
    return ids


register_envs()
