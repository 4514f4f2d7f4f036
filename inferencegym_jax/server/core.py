"""What the server does, without the web framework: sessions, steps, tasks, grading, baselines.

`ServerCore` owns one `pool.TaskPool` per served task (capacity `max_sessions` each), the
`sessions.SessionStore` and the `sessions.Batcher`. Both front ends use it: the OpenEnv
environment (`openenv_env`, one session per WebSocket, pinned) and the HTTP session routes
(`routes`, sessions by id, evicted least recently used). `warm_up` compiles every program a
request can run (the pool programs, one grader per task, each baseline's evaluation), so no
request compiles.

A step's result (`StepResult`) gives the observation in its fields' units, the reward and its
components, the interval's serving metrics, the knobs applied and which of them were clipped
or masked; the session keeps one grader record per interval (`log_record`), which is what
`POST /grader` takes back.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import baselines, evaluate, graders, tasks, validation
from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.evaluate import Policy
from inferencegym_jax.server.pool import GIVEN_ACTION, TaskPool
from inferencegym_jax.server.sessions import Batcher, EpisodeDone, Session, SessionStore
from inferencegym_jax.traffic import sampling

# Longest episode log /grader takes [intervals]; logs are padded to it (one program per task).
MAX_LOG_INTERVALS = 4096
# /baseline evaluates this many episodes per jitted call, so every episode count shares a program.
BASELINE_BATCH = evaluate.BATCH_MULTIPLE
MAX_BASELINE_EPISODES = 256
MAX_SEED = sampling.MAX_SEED
# Name of the policy a checkpoint given to `serve` adds.
CHECKPOINT_POLICY = "ppo"


@dataclasses.dataclass
class StepResult:
    """The outcome of a reset or a step of one session (host side, Python numbers).

    Attributes:
      observation: field -> value in the field's unit (observation.FEATURES; lists for vectors).
      reward: the interval's reward in [-1, 1] (None after a reset).
      reward_components: term -> value (reward.reward's components; empty after a reset).
      done: the episode reached its horizon.
      metrics: serving.IntervalMetrics field -> value (empty after a reset).
      applied_action: knob -> value applied [knob units] (empty after a reset).
      clipped: knobs the env clipped, snapped or masked in this step.
      step_count: [intervals] stepped in the episode.
    """

    observation: dict[str, Any]
    reward: float | None
    reward_components: dict[str, float]
    done: bool
    metrics: dict[str, Any]
    applied_action: dict[str, float]
    clipped: list[str]
    step_count: int


def log_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The grader's record of one interval (schemas.IntervalRecord's fields) from a pool row."""
    return {
        "metrics": {name: row["metrics"][name] for name in graders.METRIC_FIELDS},
        "action": dict(zip(KNOBS, row["applied"])),
        "offered_tokens": row["offered_tokens"],
    }


def _result(row: Mapping[str, Any], session: Session, reset: bool) -> StepResult:
    return StepResult(
        observation=row["obs"],
        reward=None if reset else row["reward"],
        reward_components={} if reset else row["reward_components"],
        done=session.done,
        metrics={} if reset else row["metrics"],
        applied_action={} if reset else dict(zip(KNOBS, row["applied"])),
        clipped=[] if reset else [k for k, c in zip(KNOBS, row["clipped"]) if c],
        step_count=session.step_count,
    )


def checkpoint_policy(directory: str, task_id: str, params: Any) -> Policy:
    """The trained policy of a checkpoint as a policy of the serving env (grid indices out);
    ValueError for a missing or corrupt checkpoint, another task, or other env params."""
    from inferencegym_jax import env as env_module
    from inferencegym_jax import wrappers
    from inferencegym_jax.training_setup import make_train, read_config
    from training.checkpoint import load_checkpoint

    try:
        config = read_config(directory)
    except ValueError as err:
        raise ValueError(f"--checkpoint {directory!r}: {err}") from None
    if config.task != task_id:
        raise ValueError(f"--checkpoint {directory!r}: trained on {config.task}, not {task_id}")
    trainer = make_train(config)
    if env_module.params_fingerprint(trainer.env_params) != env_module.params_fingerprint(params):
        raise ValueError(f"--checkpoint {directory!r}: trained with other env params than {task_id}'s defaults")
    runner = load_checkpoint(directory, trainer)
    policy = trainer.policy(runner.params, runner.obs_stats, config.deterministic_eval)
    try:
        return wrappers.base_action_policy(trainer.env, policy)
    except ValueError as err:  # a stateful policy (history_windows) has no per-interval form
        raise ValueError(f"--checkpoint {directory!r}: {err}") from None


class ServerCore:
    """Sessions and the stateless services of the server (module docstring).

    Args:
      task_ids: the tasks served (ids, gymnasium ids or numbers; tasks.resolve_id).
      max_sessions: sessions at once over all tasks (SessionStore), >= 1.
      batching: step concurrent sessions together (False: one program run per request).
      checkpoints: task id -> checkpoint folder whose trained policy sessions may step with
        (policy "ppo").
    """

    def __init__(self, task_ids: Sequence[str], max_sessions: int = 64, batching: bool = True,
                 checkpoints: Mapping[str, str] | None = None):
        ids = [tasks.resolve_id(t, key="--task ") for t in task_ids]
        if not ids:
            raise ValueError("--task: serve at least one task")
        self.task_ids = tuple(dict.fromkeys(ids))
        checkpoints = {tasks.resolve_id(t, key="--checkpoint task "): d for t, d in (checkpoints or {}).items()}
        for task_id in checkpoints:
            if task_id not in self.task_ids:
                raise ValueError(f"--checkpoint for {task_id}: that task is not served (--task {list(self.task_ids)})")
        self.pools: dict[str, TaskPool] = {}
        for task_id in self.task_ids:
            env, params = tasks.make(task_id)
            policies = dict(baselines.baseline_policies(env, params, task_id))
            if task_id in checkpoints:
                policies[CHECKPOINT_POLICY] = checkpoint_policy(checkpoints[task_id], task_id, params)
            self.pools[task_id] = TaskPool(task_id, max_sessions, policies)
        self.store = SessionStore(self.pools, max_sessions)
        self.batcher = Batcher(self.pools, batching)
        self._graders = {t: self._grader_program(t) for t in self.task_ids}
        self._baseline_lock = threading.Lock()
        self.ready = False

    # ------------------------------------------------------------------ start-up

    def warm_up(self) -> None:
        """Compile every program a request can run; then `ready` is True."""
        for task_id, pool in self.pools.items():
            pool.warm_up()
            self.grade(task_id, [])
            self.baseline(task_id, seed=0, episodes=1)
        self.ready = True

    def resolve_task(self, task_id: Any) -> str:
        """A served task's id; ValueError naming the served ones."""
        resolved = tasks.resolve_id(task_id, key="task_id=")
        if resolved not in self.pools:
            raise ValueError(f"task_id={task_id!r}: this server serves {list(self.task_ids)}")
        return resolved

    # ------------------------------------------------------------------ sessions

    def _reset_op(self, session: Session, seed: int | None, episode: int, episode_id: str | None) -> dict[str, Any]:
        seed = secrets.randbelow(MAX_SEED + 1) if seed is None else sampling.check_seed(seed)
        if isinstance(episode, bool) or not isinstance(episode, int) or not 0 <= episode <= 2**31 - 1:
            raise ValueError(f"episode={episode!r}: must be an integer in [0, {2**31 - 1}]")
        session.seed, session.episode = seed, episode
        session.episode_id = episode_id or session.id
        return {"slot": session.slot, "reset": True, "seed": session.seed, "episode": episode}

    def _after_reset(self, session: Session, row: Mapping[str, Any]) -> StepResult:
        session.started, session.step_count, session.done, session.cumulative_reward = True, 0, False, 0.0
        session.log = []
        return _result(row, session, reset=True)

    def _step_op(self, session: Session, action: Mapping[str, float] | None, policy: str | None) -> dict[str, Any]:
        if session.done:
            raise EpisodeDone(f"session {session.id}: the episode ended after {session.step_count} intervals; "
                              "reset it to start another")
        if not session.started:
            raise EpisodeDone(f"session {session.id}: reset it before stepping")
        pool = self.pools[session.task_id]
        action = {k: v for k, v in (action or {}).items() if v is not None}
        if policy is not None:
            if action:
                raise ValueError(f"give either knob values or policy={policy!r}, not both")
            return {"slot": session.slot, "policy": pool.policy_index(policy)}
        unknown = sorted(set(action) - set(KNOBS))
        if unknown:
            raise ValueError(f"action: unknown knobs {unknown}; knobs are {list(KNOBS)}")
        default = np.asarray(pool.params.default_action.as_vector(), np.float32).tolist()
        values = [action.get(knob, value) for knob, value in zip(KNOBS, default)]
        validation.check_action(ServingAction(*values))  # the env's own check: type and range, NaN refused
        return {"slot": session.slot, "policy": GIVEN_ACTION, "action": np.asarray(values, np.float32)}

    def _after_step(self, session: Session, row: Mapping[str, Any]) -> StepResult:
        session.step_count += 1
        session.done = bool(row["truncated"]) or session.step_count >= session.horizon
        session.cumulative_reward += row["reward"]
        session.log.append(log_record(row))
        return _result(row, session, reset=False)

    async def reset(self, session: Session, seed: int | None = None, episode: int = 0,
                    episode_id: str | None = None) -> StepResult:
        """Start an episode in `session` (seed None: a fresh random seed, kept in the session).
        A session's operations run one at a time, in the order they arrive."""
        async with session.lock:
            op = self._reset_op(session, seed, episode, episode_id)
            return self._after_reset(session, await self.batcher.run(session, op))

    async def step(self, session: Session, action: Mapping[str, float] | None = None,
                   policy: str | None = None) -> StepResult:
        """One interval with `action` (knob -> value; missing knobs at the task default) or with
        one of the server's policies; EpisodeDone after the horizon."""
        async with session.lock:
            op = self._step_op(session, action, policy)
            return self._after_step(session, await self.batcher.run(session, op))

    def reset_now(self, session: Session, seed: int | None = None, episode: int = 0,
                  episode_id: str | None = None) -> StepResult:
        """`reset` on the calling thread (no event loop)."""
        op = self._reset_op(session, seed, episode, episode_id)
        return self._after_reset(session, self.batcher.run_now(session, op))

    def step_now(self, session: Session, action: Mapping[str, float] | None = None,
                 policy: str | None = None) -> StepResult:
        """`step` on the calling thread (no event loop)."""
        op = self._step_op(session, action, policy)
        return self._after_step(session, self.batcher.run_now(session, op))

    # ------------------------------------------------------------------ grading

    def _grader_program(self, task_id: str) -> Any:
        params = self.pools[task_id].params
        scale = graders.scale_constants(task_id)
        name = graders.grader_name(task_id)
        return jax.jit(lambda traj: graders.grade_episodes(traj, params, name, *scale))

    def grade(self, task_id: str, intervals: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Score, breakdown and feedback line of one episode log (log_record dicts, at most
        MAX_LOG_INTERVALS); the same log always gives the same answer."""
        if len(intervals) > MAX_LOG_INTERVALS:
            raise ValueError(f"intervals: {len(intervals)} records, at most {MAX_LOG_INTERVALS}")
        n = len(intervals)

        def column(get: Any) -> jnp.ndarray:
            values = np.zeros((1, MAX_LOG_INTERVALS), np.float32)
            values[0, :n] = [get(r) for r in intervals]
            return jnp.asarray(values)

        traj = {
            "metrics": {f: column(lambda r, f=f: r["metrics"][f]) for f in graders.METRIC_FIELDS},
            "action": {k: column(lambda r, k=k: r["action"][k]) for k in KNOBS},
            "offered_tokens": column(lambda r: r["offered_tokens"]),
            "valid": jnp.asarray(np.arange(MAX_LOG_INTERVALS)[None] < n),
        }
        grade = jax.tree_util.tree_map(np.asarray, self._graders[task_id](traj))
        return {
            "task_id": task_id,
            "intervals": n,
            "score": float(grade.score[0]),
            "breakdown": {k: float(v[0]) for k, v in grade.breakdown.items()},
            "served_fraction": float(grade.served_fraction[0]),
            "slo_attainment": float(grade.slo_attainment[0]),
            "oom_free": float(grade.oom_free[0]),
            "cost_per_1k": float(grade.cost_per_1k[0]),
            "knob_changes": int(grade.knob_changes[0]),
            "feedback": graders.feedback(grade, task_id)[0],
        }

    # ------------------------------------------------------------------ baselines

    def baseline(self, task_id: str, seed: int = 0, episodes: int = 16) -> list[dict[str, Any]]:
        """Every policy of the task (baselines, and the checkpoint's) on episodes 0 .. episodes-1
        of evaluate.evaluation_key(seed): one row per policy (evaluate.summarize's columns)."""
        seed = sampling.check_seed(seed)
        if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= MAX_BASELINE_EPISODES:
            raise ValueError(f"episodes={episodes!r}: must be an integer in [1, {MAX_BASELINE_EPISODES}]")
        pool = self.pools[task_id]
        key = evaluate.evaluation_key(seed)
        with self._baseline_lock:
            results = {
                name: evaluate.evaluate(pool.env, pool.params, policy, key, episodes, task_id,
                                        batch_size=BASELINE_BATCH)
                for name, policy in zip(pool.policy_names, pool.policies)
            }
        frame = evaluate.summarize(results)
        return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                for row in frame.reset_index().to_dict(orient="records")]

    # ------------------------------------------------------------------ descriptions

    @functools.cached_property
    def task_table(self) -> list[dict[str, Any]]:
        """One entry per served task: id, name, difficulty, horizon, knobs, SLOs, policies."""
        rows = []
        for task_id, pool in self.pools.items():
            config = tasks.task_config(task_id)
            params = pool.params
            rows.append({
                "id": task_id,
                "name": config.name,
                "difficulty": config.difficulty,
                "gpu": config.gpu,
                "model": config.model,
                "horizon_intervals": pool.horizon,
                "interval_s": float(params.server.dt_s),
                "active_knobs": [k for k, a in zip(KNOBS, params.active_knobs) if a],
                "default_action": dict(zip(KNOBS, np.asarray(params.default_action.as_vector()).tolist())),
                "ttft_slo_s": np.asarray(params.server.ttft_slo_s).tolist(),
                "tpot_slo_s": np.asarray(params.server.tpot_slo_s).tolist(),
                "policies": list(pool.policy_names),
            })
        return rows
