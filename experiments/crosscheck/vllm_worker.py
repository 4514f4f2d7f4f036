"""One vLLM worker's per-iteration scheduler, resumable: the exact scheduler of iteration_sim.py, fed
requests as they arrive so that a router in front of several workers can see their state (fleet_routing.py).

The scheduler (vLLM V1, as AISimulate models it; iteration_sim.py's docstring): every iteration has a
budget of `budget_tokens`. Running requests first, in admission order: a decode takes 1 token, a partly
prefilled prompt its next chunk min(remaining, budget). Then waiting requests FCFS, while running < cap
and budget remains, each taking min(prompt, budget) (the last one cut). A request's first token comes at
the end of the iteration that finishes its prompt; every later iteration it is in adds one token; it
leaves after exactly its output length. Admission waits for KV room (the whole prompt reserved).

`Worker.run_until(t)` runs every iteration that starts before t (an iteration is atomic: the worker's
clock may end past t) with the requests queued so far; `Worker.add` queues a request (arrivals in
time order). A request queued at its arrival time a before `run_until(t)` for t > a is scheduled as a
worker that knew it all along would schedule it: iterations that started before a could not include it.
Pure-decode stretches (nothing to prefill and either the batch full or nobody waiting) are stepped in
one vectorised block up to the next completion, the next queued arrival or t; that is exact.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class Worker:
    """One worker: `cap` running slots, a KV capacity [tokens] and a step model (iteration_sim.StepModel).

    Per-request results go to the caller's arrays `first` and `finish` [s] (NaN until reached), indexed by
    the global request ids passed to `add`.
    """

    def __init__(self, cap: int, steps: Any, kv_capacity: float, budget_tokens: int,
                 first: np.ndarray, finish: np.ndarray) -> None:
        self.cap, self.steps, self.kv_capacity, self.budget_tokens = cap, steps, kv_capacity, budget_tokens
        self.first, self.finish = first, finish
        self.queue_id: list[int] = []  # global ids, FCFS by arrival
        self.queue_arrival: list[float] = []
        self.queue_prompt: list[int] = []
        self.queue_output: list[int] = []
        self.rid = np.full(cap, -1, np.int64)
        self.prompt = np.zeros(cap, np.int64)
        self.done_pre = np.zeros(cap, np.int64)
        self.out = np.zeros(cap, np.int64)
        self.gen = np.zeros(cap, np.int64)
        self.active = np.zeros(cap, bool)
        self.partial = -1  # the slot whose prompt is partly prefilled (at most one: the last admitted)
        self.nxt = 0  # next waiting request in the queue
        self.now = 0.0
        self.resident = 0.0
        self.peak = 0.0
        self.iterations = self.blocks = self.kv_waits = 0
        self.n_active = 0
        self.left_at_now = 0  # requests that left at the end of the last block (at self.now)

    def add(self, rid: int, arrival_s: float, prompt: int, output: int) -> None:
        """Queue request `rid` (arrivals in time order)."""
        self.queue_id.append(rid)
        self.queue_arrival.append(arrival_s)
        self.queue_prompt.append(prompt)
        self.queue_output.append(output)

    def in_system(self, t_s: float) -> int:
        """Requests queued here and not finished at t_s (waiting or running), after `run_until(t_s)`:
        the last iteration may end past t_s, and the requests it finished were still in at t_s."""
        late = self.left_at_now if self.now > t_s else 0
        return len(self.queue_id) - self.nxt + self.n_active + late

    def run_until(self, t_s: float = math.inf) -> None:
        """Run every iteration that starts before t_s with the requests queued so far."""
        while self.now < t_s:
            if self.n_active == 0:
                if self.nxt >= len(self.queue_id):
                    return
                self.now = max(self.now, self.queue_arrival[self.nxt])
                if self.now >= t_s:
                    return
            dec = self.active & (self.done_pre >= self.prompt)
            n_dec = int(dec.sum())
            waiting = self.nxt < len(self.queue_id) and self.queue_arrival[self.nxt] <= self.now
            if self.partial < 0 and (self.n_active == self.cap or not waiting) and n_dec > 0:
                self._decode_stretch(dec, n_dec, t_s)
            else:
                self._mixed_iteration(dec, n_dec)
            self.peak = max(self.peak, self.resident)
            self._retire()

    def _decode_stretch(self, dec: np.ndarray, n_dec: int, t_s: float) -> None:
        """Pure decodes up to the next completion, or the step that starts after the next arrival or t_s."""
        remaining = self.out[dec] - self.gen[dec]
        k_max = int(remaining.min())
        ctx_sum = float((self.prompt[dec] + self.gen[dec]).sum())
        times = self.steps.decode_run(n_dec, ctx_sum, k_max)
        limit = t_s
        if self.n_active < self.cap and self.nxt < len(self.queue_id):
            limit = min(limit, self.queue_arrival[self.nxt])
        k = k_max
        if limit < math.inf:
            starts = self.now + np.concatenate([[0.0], np.cumsum(times[:-1])])
            k = min(max(1, int(np.searchsorted(starts, limit, side="left"))), k_max)
        self.now += float(times[:k].sum())
        self.gen[dec] += k
        self.resident += k * n_dec
        self.iterations += k
        self.blocks += 1

    def _mixed_iteration(self, dec: np.ndarray, n_dec: int) -> None:
        """One iteration: the partial prompt's next chunk, new prompts FCFS, and the decodes."""
        budget = self.budget_tokens - n_dec
        ks: list[int] = []
        ss: list[int] = []
        slots: list[int] = []
        if self.partial >= 0 and budget > 0:
            k = int(min(self.prompt[self.partial] - self.done_pre[self.partial], budget))
            ks.append(k)
            ss.append(int(self.done_pre[self.partial]))
            slots.append(self.partial)
            budget -= k
        while (budget > 0 and self.n_active < self.cap and self.nxt < len(self.queue_id)
               and self.queue_arrival[self.nxt] <= self.now):
            p = int(self.queue_prompt[self.nxt])
            if self.resident + p + n_dec > self.kv_capacity:
                self.kv_waits += 1
                break
            slot = int(np.flatnonzero(~self.active)[0])
            self.rid[slot], self.prompt[slot], self.done_pre[slot] = self.queue_id[self.nxt], p, 0
            self.out[slot], self.gen[slot] = int(self.queue_output[self.nxt]), 0
            self.active[slot] = True
            self.n_active += 1
            k = min(p, budget)
            ks.append(k)
            ss.append(0)
            slots.append(slot)
            budget -= k
            self.resident += p  # reserve the whole prompt at admission (it is written within a few iterations)
            self.nxt += 1
        ctx_sum = float((self.prompt[dec] + self.gen[dec]).sum()) if n_dec else 0.0
        self.now += self.steps.mixed(ks, ss, n_dec, ctx_sum)
        self.gen[dec] += 1
        self.resident += n_dec
        self.partial = -1
        for slot, k in zip(slots, ks):
            self.done_pre[slot] += k
            if self.done_pre[slot] >= self.prompt[slot]:
                self.first[self.rid[slot]] = self.now
                self.gen[slot] = 1
            else:
                self.partial = slot
        self.iterations += 1
        self.blocks += 1

    def _retire(self) -> None:
        """Finished requests leave (their finish time recorded, their KV freed)."""
        finished = self.active & (self.gen >= self.out) & (self.done_pre >= self.prompt)
        self.left_at_now = int(finished.sum())
        if finished.any():
            idx = np.flatnonzero(finished)
            self.finish[self.rid[idx]] = self.now
            self.resident -= float((self.prompt[idx] + self.gen[idx] - 1).sum())
            self.active[idx] = False
            self.rid[idx] = -1
            self.n_active -= len(idx)
