"""Sessions: a bounded store of episodes by id, and the batcher that steps them together.

`SessionStore` holds at most `max_sessions` sessions. Creating one more evicts the least
recently used session that no WebSocket holds (its slot is freed; its id then answers
`SessionGone`, HTTP 410, for as long as the last `GONE_MEMORY` evicted ids are remembered, and
`SessionNotFound`, 404, afterwards, like an id never issued). When every session is held by a
WebSocket, creating one more raises `CapacityError` (HTTP 503).

`Batcher` runs the operations that arrive while the previous batch computes as one batch: each
request awaits its own future; a worker task per task pool takes everything pending (one
operation per slot; a second operation on the same slot waits for the next batch), runs it on a
worker thread, and resolves the futures. With `batching=False` each operation runs alone (the
load test's baseline).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from inferencegym_jax.server.pool import TaskPool

# Evicted ids remembered, so that they answer 410 Gone rather than 404.
GONE_MEMORY = 4096
# A session's key stream (Session.stream): root jax.random.key(seed), or the held-out
# evaluate.evaluation_key(seed), whose episodes evaluate.evaluate grades (pool module docstring).
Stream = Literal["plain", "held_out"]
PLAIN: Stream = "plain"
HELD_OUT: Stream = "held_out"


class SessionNotFound(KeyError):
    """No session has this id (never issued, closed, or evicted long ago): HTTP 404."""


class SessionGone(KeyError):
    """The session was evicted to make room for a newer one: HTTP 410."""


class CapacityError(RuntimeError):
    """Every session slot is held by a connection: HTTP 503."""


class EpisodeDone(RuntimeError):
    """A step after the episode's last interval: HTTP 409 (reset the session first)."""


@dataclasses.dataclass
class SessionRecord:
    """What every session kind keeps of its episode (host-side bookkeeping; `Session` and
    `day_sessions.DaySession` add their own fields).

    Attributes:
      id: the session id (URL-safe, 22 characters).
      task_id: the task's id.
      pinned: held by a WebSocket connection (never evicted; closed with the connection).
      started: an episode has been reset in it; closed: evicted or closed (what it held is freed).
      seed: [0, 2**32 - 1] seed of the episode's stream; episode: the episode of that stream.
      episode_id: a label the client chose (or the session id).
      step_count: [steps] stepped in this episode; horizon: [steps] per episode.
      done: the episode reached its horizon.
      cumulative_reward: sum of the episode's rewards.
      log: one record per step (the subclass says what it holds).
      last_used: time.monotonic() of the last request.
      lock: held while an operation of the session runs (two requests on one session at once
        run one after the other, each seeing the other's result).
    """

    id: str
    task_id: str
    pinned: bool
    started: bool = False
    closed: bool = False
    seed: int = 0
    episode: int = 0
    episode_id: str = ""
    step_count: int = 0
    horizon: int = 0
    done: bool = False
    cumulative_reward: float = 0.0
    log: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock, repr=False, compare=False)


@dataclasses.dataclass
class Session(SessionRecord):
    """One episode of one serving task on the server (`SessionRecord`'s fields, steps being
    [intervals] and the log one grader record per interval, `schemas.IntervalRecord` fields).

    Attributes:
      slot: its slot in the task's TaskPool (freed when the session closes).
      stream: PLAIN (root jax.random.key(seed)) or HELD_OUT (root evaluate.evaluation_key(seed)).
    """

    slot: int = dataclasses.field(kw_only=True)
    stream: Stream = PLAIN


class LruStore:
    """At most `max_sessions` sessions by id, the least recently used first; the last GONE_MEMORY
    evicted ids are remembered, so that `get` answers SessionGone for them (module docstring).
    Subclasses add `create` and release a dropped session's resources in `_release`; `label`
    names their sessions in messages. Sessions have `id`, `pinned`, `closed` and `last_used`."""

    label = "sessions"

    def __init__(self, max_sessions: int):
        if max_sessions < 1:
            raise ValueError(f"max_sessions={max_sessions} must be >= 1")
        self.max_sessions = max_sessions
        self._sessions: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._gone: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def _evict_first(self, evictable: Callable[[Any], bool]) -> None:
        """Close the least recently used unpinned session for which `evictable` holds (under the
        lock); CapacityError when there is none."""
        for sid, session in self._sessions.items():  # oldest first
            if not session.pinned and evictable(session):
                self._drop(sid)
                self._gone[sid] = None
                while len(self._gone) > GONE_MEMORY:
                    self._gone.popitem(last=False)
                self.evictions += 1
                return
        raise CapacityError(f"all {len(self._sessions)} {self.label} are held by open connections "
                            f"(--max-sessions {self.max_sessions}); close one or raise the limit")

    def _drop(self, sid: str) -> None:
        session = self._sessions.pop(sid)
        session.closed = True
        self._release(session)

    def _release(self, session: Any) -> None:
        """Free what a closed session held (nothing by default)."""

    def has(self, sid: str) -> bool:
        """Whether `sid` is an open session or one evicted recently (so `get` answers for it)."""
        with self._lock:
            return sid in self._sessions or sid in self._gone

    def get(self, sid: str) -> Any:
        """The session `sid`, marked most recently used; SessionGone / SessionNotFound."""
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                if sid in self._gone:
                    raise SessionGone(f"session {sid!r} was evicted (the least recently used of "
                                      f"{self.max_sessions} {self.label}) to make room for a new one")
                raise SessionNotFound(f"no session {sid!r} (unknown or closed)")
            self._sessions.move_to_end(sid)
            session.last_used = time.monotonic()
            return session

    def close(self, sid: str) -> None:
        """Close a session and free what it held; SessionGone / SessionNotFound as `get`."""
        self.get(sid)
        with self._lock:
            self._drop(sid)


class SessionStore(LruStore):
    """At most `max_sessions` sessions over the task pools (module docstring: eviction)."""

    def __init__(self, pools: dict[str, TaskPool], max_sessions: int):
        super().__init__(max_sessions)
        self.pools = pools

    def create(self, task_id: str, pinned: bool = False) -> Session:
        """A new session of `task_id` with a free slot (evicting as the module docstring says)."""
        pool = self.pools[task_id]
        with self._lock:
            if len(self._sessions) >= self.max_sessions or pool.free_slots == 0:
                self._evict_one(task_id)
            slot = pool.allocate()
            if slot is None:  # pragma: no cover - _evict_one freed one of this task or raised
                raise CapacityError(f"no free slot for {task_id}")
            session = Session(id=secrets.token_urlsafe(16), task_id=task_id, slot=slot, pinned=pinned,
                              horizon=pool.horizon)
            self._sessions[session.id] = session
            return session

    def _evict_one(self, task_id: str) -> None:
        """Close the least recently used unpinned session (of `task_id` when the store has
        room but that task's pool is full); CapacityError when there is none."""
        full = len(self._sessions) >= self.max_sessions
        self._evict_first(lambda session: full or session.task_id == task_id)

    def _release(self, session: Session) -> None:
        self.pools[session.task_id].release(session.slot)

    def get(self, sid: str) -> Session:
        """The session `sid`, marked most recently used; SessionGone / SessionNotFound."""
        session: Session = super().get(sid)
        return session


class Batcher:
    """Batches the operations on each task pool (module docstring)."""

    def __init__(self, pools: dict[str, TaskPool], batching: bool = True):
        self.pools = pools
        self.batching = batching
        self.batches = 0  # program runs
        self.operations = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferencegym-pool")
        self._pending: dict[str, list[tuple[dict[str, Any], asyncio.Future, Session]]] = {t: [] for t in pools}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: list[asyncio.Task] = []

    def start(self) -> None:
        """Start a worker per pool on the running event loop."""
        for task_id in self.pools:
            self._wake[task_id] = asyncio.Event()
            self._workers.append(asyncio.get_running_loop().create_task(self._work(task_id)))

    async def stop(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, session: Session, op: dict[str, Any]) -> dict[str, Any]:
        """Apply one operation (TaskPool.advance's dict) on `session`'s slot in the next batch."""
        future = asyncio.get_running_loop().create_future()
        self._pending[session.task_id].append((op, future, session))
        self._wake[session.task_id].set()
        return await future

    def run_now(self, session: Session, op: dict[str, Any]) -> dict[str, Any]:
        """Apply one operation at once, on the calling thread (outside an event loop)."""
        if session.closed:
            raise SessionGone(f"session {session.id!r} was closed")
        return self.pools[session.task_id].advance([op])[0]

    def _take(self, task_id: str) -> list[tuple[dict[str, Any], asyncio.Future, Session]]:
        """The next batch: pending operations on distinct slots, up to the largest batch size.
        An operation whose session was closed meanwhile (its slot may be another's now) fails."""
        batch: list[tuple[dict[str, Any], asyncio.Future, Session]] = []
        pending, rest, slots = self._pending[task_id], [], set()
        limit = self.pools[task_id].batch_sizes[-1] if self.batching else 1
        for item in pending:
            op, future, session = item
            if future.cancelled():
                continue
            if session.closed:
                future.set_exception(SessionGone(f"session {session.id!r} was closed before its step ran"))
            elif len(batch) < limit and op["slot"] not in slots:
                batch.append(item)
                slots.add(op["slot"])
            else:
                rest.append(item)
        self._pending[task_id] = rest
        return batch

    async def _work(self, task_id: str) -> None:
        loop = asyncio.get_running_loop()
        pool = self.pools[task_id]
        while True:
            await self._wake[task_id].wait()
            self._wake[task_id].clear()
            await asyncio.sleep(0)  # requests already read by this loop iteration join the batch
            while batch := self._take(task_id):
                ops = [op for op, _, _ in batch]
                try:
                    results = await loop.run_in_executor(self._executor, pool.advance, ops)
                except Exception as err:  # noqa: BLE001 - reported to each request, the server lives on
                    for _, future, _ in batch:
                        if not future.done():
                            future.set_exception(err)
                    continue
                self.batches += 1
                self.operations += len(ops)
                for (_, future, _), result in zip(batch, results):
                    if not future.done():
                        future.set_result(result)
