"""What the server does, without the web framework: sessions, steps, tasks, grading, baselines.

`ServerCore` owns one `pool.TaskPool` per served task (capacity `max_sessions` each), the
`sessions.SessionStore` and the `sessions.Batcher`. Both front ends use it: the OpenEnv
environment (`openenv_env`, one session per WebSocket, pinned) and the HTTP session routes
(`routes`, sessions by id, evicted least recently used). `warm_up` compiles every program a
session or /grader request can run (the pool programs, each task's grader in float32 and
float64), so none of them compiles; each baseline's evaluation compiles right after, in the
background (a /baseline waits for its task's; then the day tasks', DayCore.baseline), so that a
restart from JAX's persistent compilation cache opens the port in seconds (BENCHMARKS.md, "Server
start-up and memory").

A step's result (`StepResult`) gives the observation in its fields' units, the reward and its
components, the interval's serving metrics, the knobs applied and which of them were clipped
or masked; the session keeps one grader record per interval (`log_record`), which is what
`POST /grader` takes back.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import dataclasses
import functools
import itertools
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from inferencegym_jax import baselines, evaluate, graders, tasks, validation
from inferencegym_jax.actions import KNOBS, ServingAction
from inferencegym_jax.evaluate import Policy
from inferencegym_jax.server import day_tasks
from inferencegym_jax.server.day_sessions import DayCore
from inferencegym_jax.server.pool import GIVEN_ACTION, TaskPool
from inferencegym_jax.server.sessions import HELD_OUT, PLAIN, Batcher, EpisodeDone, Session, SessionStore
from inferencegym_jax.traffic import sampling

# Longest episode log /grader takes [intervals]; logs are padded to it (one program per task).
MAX_LOG_INTERVALS = 4096
# A log whose metrics and offered_tokens add up to at most this is graded in float32 (the
# library's program): no float32 sum of it can overflow. Larger: float64 (ServerCore.grade).
FLOAT32_SAFE_TOTAL = float(np.finfo(np.float32).max) / 4
# Past this float64 total, ServerCore.grade scales the ratio columns by 2**-16 so that their
# float64 sums (at most MAX_LOG_INTERVALS values of at most 1.8e308 each) stay finite.
FLOAT64_SCALE_ABOVE = 1e300
# /baseline evaluates this many episodes per jitted call, so every episode count shares a program.
BASELINE_BATCH = evaluate.BATCH_MULTIPLE
# /baseline's episodes of a serving task: at most, and without `episodes` (a day task's: day_tasks.BASELINE_EPISODES).
MAX_BASELINE_EPISODES, DEFAULT_BASELINE_EPISODES = 256, 16
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
    return {"metrics": {name: row["metrics"][name] for name in graders.METRIC_FIELDS},
            "action": dict(zip(KNOBS, row["applied"])), "offered_tokens": row["offered_tokens"]}


# JAX's compilation-cache events (jax.monitoring), counted for ServerCore.warm_up_report.
_CACHE_ASKED, _CACHE_HITS = "/jax/compilation_cache/compile_requests_use_cache", "/jax/compilation_cache/cache_hits"
_CACHE_EVENTS: collections.Counter[str] = collections.Counter()
jax.monitoring.register_event_listener(
    lambda event, **_: _CACHE_EVENTS.update([event]) if event in (_CACHE_ASKED, _CACHE_HITS) else None)


def _release_freed_memory() -> None:
    """Give back the heap memory compiling freed (glibc's malloc_trim, if any: ~5-10 % of RSS after warm-up)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


# Columns of a log whose statistics are ratios of their sums (ServerCore.grade may scale them).
_RATIO_COLUMNS = tuple(f for f in graders.METRIC_FIELDS if f != "oom") + ("offered_tokens",)


def _log_columns(intervals: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """A log's metrics, knobs and offered_tokens as float64 (n,) columns; ValueError naming
    the first negative, NaN or infinite value (intervals[i].metrics.field)."""
    places = [("metrics", f) for f in graders.METRIC_FIELDS] + [("action", k) for k in KNOBS]
    columns = {}
    for group, name in [*places, ("", "offered_tokens")]:
        values = [r[name] if not group else r[group][name] for r in intervals]
        columns[name] = np.asarray(values, np.float64).reshape(len(intervals))
        bad = np.flatnonzero(~np.isfinite(columns[name]) | (columns[name] < 0))
        if bad.size:
            where = f"{group}.{name}" if group else name
            raise ValueError(f"intervals[{bad[0]}].{where}={columns[name][bad[0]]!r}: must be a finite number >= 0")
    return columns


def _grader_input(columns: Mapping[str, np.ndarray], n: int) -> tuple[bool, dict[str, Any]]:
    """(wide, trajectory) of ServerCore.grade: the log padded to MAX_LOG_INTERVALS, float32
    unless its total passes FLOAT32_SAFE_TOTAL (wide: float64, ratio columns scaled by 2**-16
    past FLOAT64_SCALE_ABOVE); knobs always float32, as the graders compare them."""
    with np.errstate(over="ignore"):
        total = float(sum(np.sum(columns[f]) for f in _RATIO_COLUMNS + ("oom",)))
    wide = total > FLOAT32_SAFE_TOTAL
    scale = 2.0**-16 if total > FLOAT64_SCALE_ABOVE else 1.0

    def padded(name: str, dtype: Any) -> np.ndarray:
        values = np.zeros((1, MAX_LOG_INTERVALS), dtype)
        values[0, :n] = columns[name] * (scale if name in _RATIO_COLUMNS else 1.0)
        return values

    dtype = np.float64 if wide else np.float32
    return wide, {
        "metrics": {f: padded(f, dtype) for f in graders.METRIC_FIELDS},
        "action": {k: padded(k, np.float32) for k in KNOBS},
        "offered_tokens": padded("offered_tokens", dtype),
        "valid": np.arange(MAX_LOG_INTERVALS)[None] < n,
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


def _evaluate_bounded(pool: TaskPool, policy: Policy, key: jax.Array, episodes: int) -> evaluate.EvalResult:
    """evaluate.evaluate(pool.env, pool.params, policy, key, episodes, task, batch_size=
    BASELINE_BATCH), bit for bit, in bounded memory: each batch of BASELINE_BATCH episodes is
    run (the same jitted program) and graded on its own, so at most one batch's trajectory is
    held, and grading, whose eager operations compile one program per array shape, sees one
    shape per task (a batch) instead of one per episode count (1 to 256: ~50 programs each,
    ~90 MB per count measured). Graded per batch, an episode grades as in any batch of a multiple
    of 8 episodes (XLA:CPU's vector width, evaluate.BATCH_MULTIPLE) or any ragged one but a lone
    episode, whose grade rounds differently: one episode is graded alone, as evaluate does
    (tests/test_server_startup.py compares episode counts 1 to 17 with evaluate.evaluate)."""
    if episodes == 1:
        return evaluate.evaluate(pool.env, pool.params, policy, key, 1, pool.task_id, batch_size=BASELINE_BATCH)
    steps = int(pool.params.max_steps_in_episode)
    parts = []
    for start in range(0, episodes, BASELINE_BATCH):
        keys = evaluate.episode_keys(key, start, BASELINE_BATCH)
        traj, ttft = evaluate._run_batch(pool.env, pool.params, policy, keys, steps, True)  # run_episodes' program
        graded = evaluate.grade_trajectory(traj, pool.params, pool.task_id, ttft)
        count = min(BASELINE_BATCH, episodes - start)
        parts.append(jax.tree_util.tree_map(lambda x, count=count: np.asarray(x)[:count],
                                            (graded.scores, graded.breakdown, graded.metrics)))
        parts[-1] += (graded.feedback[:count],)
    scores, breakdown, metrics = (jax.tree_util.tree_map(lambda *x: np.concatenate(x), *[p[i] for p in parts])
                                  for i in range(3))
    return evaluate.EvalResult(scores, breakdown, metrics, feedback=[line for p in parts for line in p[3]])


class ServerCore:
    """Sessions and the stateless services of the server (module docstring).

    Args:
      task_ids: the tasks served (ids or numbers; tasks.resolve_id): serving tasks (`task_ids`), and fleet
        and reservation tasks, whose sessions `day` runs (day_sessions.DayCore); `served_ids`: both, in order.
      max_sessions: sessions at once over all tasks (SessionStore), >= 1.
      batching: step concurrent sessions together (False: one program run per request).
      checkpoints: task id -> checkpoint folder whose trained policy sessions may step with
        (policy "ppo").
    """

    def __init__(self, task_ids: Sequence[str], max_sessions: int = 64, batching: bool = True,
                 checkpoints: Mapping[str, str] | None = None):
        served = [day_tasks.day_task_id(t) or tasks.resolve_id(t, key="--task ") for t in task_ids]
        if not served:
            raise ValueError("--task: serve at least one task")
        self.served_ids = tuple(dict.fromkeys(served))  # every served task, serving and day, in order
        self.task_ids = tuple(t for t in self.served_ids if day_tasks.day_task_id(t) is None)  # serving tasks
        self.day = DayCore([t for t in self.served_ids if t not in self.task_ids], max_sessions)
        self.default_task = self.served_ids[0]  # what a reset without task_id starts
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
        self._baselines_warm = {t: threading.Event() for t in self.task_ids}  # set: nothing to wait for
        for event in self._baselines_warm.values():
            event.set()
        self.warm_up_report = "not warmed up"
        self._exiting = threading.Event()
        self._warm_thread: threading.Thread | None = None
        self.ready = False

    # ------------------------------------------------------------------ start-up

    def warm_up(self, baselines_in_background: bool = True) -> None:
        """Compile every program a session or a /grader request runs (from JAX's persistent
        compilation cache where it has them); then `ready` is True and `warm_up_report` says
        how many programs were compiled and how many loaded. /baseline's programs (four
        scanned episodes per task: over half of a warm restart's time and of a task's memory)
        compile next, in a background thread unless `baselines_in_background` is False; a
        /baseline waits for its task's. Heap memory compiling freed goes back to the system."""
        events = dict(_CACHE_EVENTS)
        self.day.warm_up()  # the day tasks' adapter programs (day_sessions)
        for task_id, pool in self.pools.items():
            pool.warm_up()
            self.grade(task_id, [])  # the float32 program
            huge = {"metrics": {f: 1e39 for f in graders.METRIC_FIELDS}, "offered_tokens": 1e39,
                    "action": dict(zip(KNOBS, np.asarray(pool.params.default_action.as_vector()).tolist()))}
            self.grade(task_id, [huge])  # the float64 one
        asked, loaded = (_CACHE_EVENTS[e] - events.get(e, 0) for e in (_CACHE_ASKED, _CACHE_HITS))
        self.warm_up_report = (f"{asked - loaded} programs compiled, {loaded} loaded from JAX's compilation cache"
                               if asked else "JAX's compilation cache is off: every program compiled")
        if baselines_in_background:
            for event in [*self._baselines_warm.values(), *self.day.baselines_warm.values()]:
                event.clear()
            self._warm_thread = threading.Thread(target=self._warm_baselines, name="warm-baselines", daemon=True)
            self._warm_thread.start()
            atexit.register(self._stop_warming)
        else:
            self._warm_baselines()
        _release_freed_memory()
        self.ready = True

    def _warm_baselines(self) -> None:
        """Compile /baseline's programs, task by task and policy by policy: one episode (graded alone)
        and a batch (`_evaluate_bounded`); then the day tasks'. Stops between programs at exit."""
        key = evaluate.evaluation_key(0)
        try:
            for task_id, warm in self._baselines_warm.items():
                pool = self.pools[task_id]
                for policy, episodes in itertools.product(pool.policies, (1, 2)):
                    if self._exiting.is_set():
                        return
                    with self._baseline_lock:
                        _evaluate_bounded(pool, policy, key, episodes)
                warm.set()
            self.day.warm_baselines(self._exiting)
        finally:  # every task's: a failure here shows again, and is answered, at the first /baseline
            for event in [*self._baselines_warm.values(), *self.day.baselines_warm.values()]:
                event.set()
        _release_freed_memory()

    def _stop_warming(self) -> None:
        """At exit: let the background compilation finish its program and stop (one compiling as
        the interpreter ends could crash it)."""
        self._exiting.set()
        if self._warm_thread is not None:
            self._warm_thread.join(timeout=300)
        for event in [*self._baselines_warm.values(), *self.day.baselines_warm.values()]:
            event.set()

    def resolve_task(self, task_id: Any) -> str:
        """A served serving task's id; ValueError naming the served ones (or for a day task)."""
        day = self.day.resolve(task_id, self.served_ids)
        if day is not None:
            raise ValueError(f"task_id={task_id!r}: a {self.day.tasks[day].family} task; this operation is for "
                             f"the serving tasks {list(self.task_ids)}")
        resolved = tasks.resolve_id(task_id, key="task_id=")
        if resolved not in self.pools:
            raise ValueError(f"task_id={task_id!r}: this server serves {list(self.served_ids)}")
        return resolved

    def resolve_any(self, task_id: Any) -> tuple[str, bool]:
        """(id, is a day task) of a served task of either kind; ValueError naming the served ones."""
        day = self.day.resolve(task_id, self.served_ids)
        return (day, True) if day is not None else (self.resolve_task(task_id), False)

    # ------------------------------------------------------------------ sessions

    def _reset_op(self, session: Session, seed: int | None, episode: int, episode_id: str | None,
                  held_out: bool) -> dict[str, Any]:
        seed = secrets.randbelow(MAX_SEED + 1) if seed is None else sampling.check_seed(seed)
        if isinstance(episode, bool) or not isinstance(episode, int) or not 0 <= episode <= 2**31 - 1:
            raise ValueError(f"episode={episode!r}: must be an integer in [0, {2**31 - 1}]")
        session.seed, session.episode = seed, episode
        session.stream = HELD_OUT if held_out else PLAIN
        session.episode_id = episode_id or session.id
        return {"slot": session.slot, "reset": True, "seed": session.seed, "episode": episode,
                "held_out": bool(held_out)}

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
                    episode_id: str | None = None, held_out: bool = False) -> StepResult:
        """Start episode `episode` of seed `seed`'s stream in `session` (seed None: a fresh random
        seed, kept in the session): the stream jax.random.key(seed), or with `held_out` the
        held-out stream evaluate.evaluation_key(seed) (pool module docstring). A session's
        operations run one at a time, in the order they arrive."""
        async with session.lock:
            op = self._reset_op(session, seed, episode, episode_id, held_out)
            return self._after_reset(session, await self.batcher.run(session, op))

    async def step(self, session: Session, action: Mapping[str, float] | None = None,
                   policy: str | None = None) -> StepResult:
        """One interval with `action` (knob -> value; missing knobs at the task default) or with
        one of the server's policies; EpisodeDone after the horizon."""
        async with session.lock:
            op = self._step_op(session, action, policy)
            return self._after_step(session, await self.batcher.run(session, op))

    def reset_now(self, session: Session, seed: int | None = None, episode: int = 0,
                  episode_id: str | None = None, held_out: bool = False) -> StepResult:
        """`reset` on the calling thread (no event loop)."""
        op = self._reset_op(session, seed, episode, episode_id, held_out)
        return self._after_reset(session, self.batcher.run_now(session, op))

    def step_now(self, session: Session, action: Mapping[str, float] | None = None,
                 policy: str | None = None) -> StepResult:
        """`step` on the calling thread (no event loop)."""
        op = self._step_op(session, action, policy)
        return self._after_step(session, self.batcher.run_now(session, op))

    # ------------------------------------------------------------------ grading

    def _grader_program(self, task_id: str) -> Any:
        """The task's jitted grader (graders.grade_episodes) over a padded log; `grade` runs it
        on float32 columns (the library's program) or, under jax.enable_x64, on float64 ones."""
        params = self.pools[task_id].params
        scale = graders.scale_constants(task_id)
        name = graders.grader_name(task_id)
        return jax.jit(lambda traj: graders.grade_episodes(traj, params, name, *scale))

    def grade(self, task_id: str, intervals: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Score, breakdown and feedback line of one episode log (log_record dicts, at most
        MAX_LOG_INTERVALS); the same log always gives the same answer, and never NaN.

        A log whose numbers float32 holds with room to add them up (the total of its metrics
        and offered_tokens <= FLOAT32_SAFE_TOTAL: every log a server writes, by orders of
        magnitude) is graded by the library's float32 program, so it scores bit for bit as
        graders.grade scores the same intervals. Any other log (a value above float32's
        maximum, 3.4e38, or values whose float32 sums would overflow) is graded by the same
        function, graders.grade_episodes, in float64 (jax.enable_x64): sums and ratios of the
        numbers given, not of infinities (before, their NaN score was answered as null). Every
        statistic of a grade is a ratio of two sums of one kind (good/offered tokens,
        violations/decided requests, cost/tokens), so when the log's float64 total passes
        FLOAT64_SCALE_ABOVE those columns are scaled by 2**-16 (exact in binary floating point)
        and their sums stay finite too; `oom` (over the interval count) is not scaled, and an
        infinite sum of it only gives oom_free 0. Negative, NaN or infinite values are refused
        (ValueError naming the field; the HTTP schema refuses them first).
        """
        if len(intervals) > MAX_LOG_INTERVALS:
            raise ValueError(f"intervals: {len(intervals)} records, at most {MAX_LOG_INTERVALS}")
        columns = _log_columns(intervals)
        wide, traj = _grader_input(columns, len(intervals))
        with jax.enable_x64(wide):  # thread-local: only this call computes in float64
            grade = jax.tree_util.tree_map(np.asarray, self._graders[task_id](traj))
        return {
            "task_id": task_id,
            "intervals": len(intervals),
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

    def baseline(self, task_id: str, seed: int = 0, episodes: int | None = None) -> list[dict[str, Any]]:
        """Every policy of the task (baselines, and the checkpoint's) on episodes 0 .. episodes-1
        of evaluate.evaluation_key(seed): one row per policy (evaluate.summarize's columns), bit
        for bit evaluate.evaluate's (`_evaluate_bounded`); a day task's: DayCore.baseline."""
        if task_id in self.day.tasks:
            return self.day.baseline(task_id, seed, episodes)
        seed, episodes = sampling.check_seed(seed), DEFAULT_BASELINE_EPISODES if episodes is None else episodes
        if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= MAX_BASELINE_EPISODES:
            raise ValueError(f"episodes={episodes!r}: must be an integer in [1, {MAX_BASELINE_EPISODES}]")
        self._baselines_warm[task_id].wait()
        return self._baseline_rows(task_id, seed, episodes)

    def _baseline_rows(self, task_id: str, seed: int, episodes: int) -> list[dict[str, Any]]:
        pool = self.pools[task_id]
        key = evaluate.evaluation_key(seed)
        with self._baseline_lock:
            results = {name: _evaluate_bounded(pool, policy, key, episodes)
                       for name, policy in zip(pool.policy_names, pool.policies)}
        return day_tasks.json_rows(evaluate.summarize(results))

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
