"""The server's session store and batcher, on a stand-in pool (no program runs here):
eviction order, 410 vs 404, pinned sessions and capacity, and how operations are batched."""

from __future__ import annotations

import asyncio

import pytest

from inferencegym_jax.server import sessions
from inferencegym_jax.server.sessions import Batcher, CapacityError, SessionGone, SessionNotFound, SessionStore


class FakePool:
    """The part of pool.TaskPool the store and the batcher use; records every batch."""

    def __init__(self, capacity: int, largest_batch: int = 64):
        self.capacity = capacity
        self.horizon = 5
        self.batch_sizes = (8, largest_batch)
        self._free = list(range(capacity - 1, -1, -1))
        self.batches: list[list[int]] = []

    def allocate(self):
        return self._free.pop() if self._free else None

    def release(self, slot):
        assert slot not in self._free
        self._free.append(slot)

    @property
    def free_slots(self):
        return len(self._free)

    def advance(self, ops):
        slots = [op["slot"] for op in ops]
        assert len(set(slots)) == len(slots), "a batch must not act twice on one slot"
        self.batches.append(slots)
        return [{"slot": s} for s in slots]


def store(capacity=3, tasks=("a",)):
    return SessionStore({t: FakePool(capacity) for t in tasks}, max_sessions=capacity)


def test_the_least_recently_used_session_is_evicted_and_then_answers_gone():
    s = store(3)
    first, second, third = (s.create("a") for _ in range(3))
    s.get(first.id)  # first is now the most recently used: second goes
    fourth = s.create("a")
    assert s.evictions == 1 and len(s) == 3
    with pytest.raises(SessionGone, match="evicted"):
        s.get(second.id)
    assert second.closed and fourth.slot == second.slot
    for kept in (first, third, fourth):
        assert s.get(kept.id) is kept
    with pytest.raises(SessionNotFound):
        s.get("never-issued")


def test_evicted_ids_are_remembered_up_to_a_bound(monkeypatch):
    monkeypatch.setattr(sessions, "GONE_MEMORY", 2)
    s = store(1)
    ids = [s.create("a").id for _ in range(4)]
    with pytest.raises(SessionNotFound):
        s.get(ids[0])  # forgotten: an id like any unknown one
    for sid in ids[1:3]:
        with pytest.raises(SessionGone):
            s.get(sid)


def test_pinned_sessions_are_never_evicted_and_a_full_store_of_them_refuses():
    s = store(2)
    held = [s.create("a", pinned=True) for _ in range(2)]
    with pytest.raises(CapacityError, match="--max-sessions 2"):
        s.create("a")
    s.close(held[0].id)
    s.create("a")
    assert s.get(held[1].id) is held[1]


def test_a_full_pool_of_one_task_evicts_a_session_of_that_task():
    pools = {"a": FakePool(1), "b": FakePool(2)}
    s = SessionStore(pools, max_sessions=3)
    a1, b1 = s.create("a"), s.create("b")
    a2 = s.create("a")  # the store has room, task a's pool has not: a1 goes, b1 stays
    assert a1.closed and not b1.closed and a2.slot == a1.slot


def test_closing_frees_the_slot_and_a_closed_id_is_not_found():
    s = store(2)
    session = s.create("a")
    s.close(session.id)
    with pytest.raises(SessionNotFound):
        s.get(session.id)
    assert s.pools["a"].free_slots == 2


def test_concurrent_operations_run_as_one_batch_and_one_slot_never_twice():
    pool = FakePool(8)
    s = SessionStore({"a": pool}, max_sessions=8)
    batcher = Batcher({"a": pool})
    opened = [s.create("a") for _ in range(5)]

    async def scenario():
        batcher.start()
        ops = [batcher.run(x, {"slot": x.slot}) for x in opened]
        ops.append(batcher.run(opened[0], {"slot": opened[0].slot}))  # a second step of session 0
        results = await asyncio.gather(*ops)
        await batcher.stop()
        return results

    results = asyncio.run(scenario())
    assert [r["slot"] for r in results] == [x.slot for x in opened] + [opened[0].slot]
    assert pool.batches == [[x.slot for x in opened], [opened[0].slot]]
    assert (batcher.batches, batcher.operations) == (2, 6)


def test_without_batching_each_operation_runs_alone():
    pool = FakePool(4)
    s = SessionStore({"a": pool}, max_sessions=4)
    batcher = Batcher({"a": pool}, batching=False)
    opened = [s.create("a") for _ in range(3)]

    async def scenario():
        batcher.start()
        await asyncio.gather(*(batcher.run(x, {"slot": x.slot}) for x in opened))
        await batcher.stop()

    asyncio.run(scenario())
    assert pool.batches == [[x.slot] for x in opened]


def test_an_operation_of_a_session_closed_while_it_waited_fails_and_touches_no_slot():
    pool = FakePool(2)
    s = SessionStore({"a": pool}, max_sessions=2)
    batcher = Batcher({"a": pool})
    gone = s.create("a")

    async def scenario():
        batcher.start()
        pending = asyncio.ensure_future(batcher.run(gone, {"slot": gone.slot}))
        s.close(gone.id)  # before the worker takes the batch
        with pytest.raises(SessionGone):
            await pending
        await batcher.stop()

    asyncio.run(scenario())
    assert pool.batches == []


def test_a_failing_batch_fails_its_requests_and_the_batcher_goes_on():
    pool = FakePool(2)
    s = SessionStore({"a": pool}, max_sessions=2)
    batcher = Batcher({"a": pool})
    x = s.create("a")
    calls = []

    def flaky(ops):
        calls.append(ops)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return [{"slot": op["slot"]} for op in ops]

    pool.advance = flaky

    async def scenario():
        batcher.start()
        with pytest.raises(RuntimeError, match="boom"):
            await batcher.run(x, {"slot": x.slot})
        result = await batcher.run(x, {"slot": x.slot})
        await batcher.stop()
        return result

    assert asyncio.run(scenario()) == {"slot": x.slot}
