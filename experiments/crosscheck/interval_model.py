"""Interval model study (issue 41, item 1): a fixed-shape, per-control-interval engine model of a vLLM V1
worker with chunked prefill, written in NumPy over a leading batch axis of episodes so that it ports to
jax.numpy line for line, checked against the exact per-iteration scheduler (`iteration_sim.simulate`) and
AISimulate (`reference.json`) on the very same request streams (`reference.draw_requests`).

Model (per environment; every array has a leading axis E of episodes; no per-request loops, no
data-dependent shapes; the scan over S sub-steps of h = dt / S is the only loop):

* Arrivals: per sub-step and prompt-length class, counts (S, K) per interval. The env draws Poisson
  counts per interval and class; given the count the instants are uniform, so the split over sub-steps
  is multinomial (`--split random`, here the request stream's own instants binned: the same
  distribution, common random numbers with the exact scheduler) or the expected split n / S
  (`--split even`, deterministic), or sampled totals per sub-step carrying the interval's class mix
  (`--split random-total`: what an env that draws class counts per interval and one split would give).
* Queue: NB FCFS buckets by arrival sub-step (bucket 0 the newest; the oldest absorbs overflow), each
  with counts per class (NB, K) and the arrival window [lo, hi] of its remaining requests.
* Running pool, exact output lengths: every running request decodes one token per iteration, so a
  request whose first token came at cumulative iteration J0 finishes at J0 + o - 1. Per output class j
  (class-mean length o_j) a ring of L Lagrangian cells, each the requests admitted while the global
  iteration counter was in [lo, hi] (uniform there); a cell's completed fraction at counter J is
  clip((J - o_j + 1 - lo) / (hi - lo), 0, 1). A cell closes after o_j / (L - 2) iterations.
* Engine per sub-step: B decoders (the running pool, <= cap), chunk budget Cb = 2048 - B. The FCFS
  queue is admitted up to the free slots (cap - running + completions expected in the sub-step) and the
  tokens full iterations could prefill (X_h = h / T_full * Cb). The X tokens admitted take n_mix mixed
  iterations: at least X / Cb, and m (1 - exp(-n_adm / m)) when the admissions come one by one (each
  iteration prefills what was admitted since the last: Poisson thinning). m, the iterations in the
  sub-step, solves h = m Dec(B) + n_mix Pre(X / n_mix) (a few fixed-point steps); the composition
  Dec + Pre (`additive`) is a swappable function.
* Debt: work committed past the end of a sub-step (a mixed iteration that does not fit) is carried to the
  next one, whose time for new work it takes.
* TTFT per (bucket, class) admitted: a mixture of uniforms. Queue delay from the fluid FCFS service at the
  sub-step's engine time per admitted token (T_full / Cb when full) after the debt and the tokens ahead
  (the bucket's arrival window against its service window; a request does not wait for its own work);
  the requests that find no queue wait the residual of the iteration in flight (a decode step, or another
  admission's mixed iteration) and their own iteration, Dec + Pre(min(Cb, p_k + co-batched tokens)); a
  prompt longer than the chunk its full chunks first.
* TPOT per request, vLLM's (e2e - TTFT) / (o - 1): every decoding request is in every iteration, so the
  sum over requests of TPOT is the integral over time of W = sum over running of 1 / (o - 1); the mean is
  that over the completions.

    .venv-test/bin/python experiments/crosscheck/interval_model.py --point a100-sxm-80gb/64/fixed
    .venv-test/bin/python experiments/crosscheck/interval_model.py            # all points, writes the JSON
    .venv-test/bin/python experiments/crosscheck/interval_model.py --report
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from iteration_sim import (  # noqa: E402  (the exact scheduler's kernels, reused)
    MAX_BATCHED_TOKENS,
    TARGETS,
    ProjectSteps,
    ReferenceSteps,
    label,
    point_of,
    rel,
)
from reference import LENGTHS, draw_requests  # noqa: E402

DEFAULT_OUT = HERE / "interval_model.json"
EPS = 1e-9


# --------------------------------------------------------------------------------------------------
# Kernels: the two halves of the additive composition, vectorised over episodes


class Kernels:
    """Vectorised step-time pieces [s]: `pre(tokens, pairs, chunks)` (a prefill pass over chunk tokens with
    `pairs` causal attention pairs) and `dec(batch, ctx_sum)` (a decode step); `mixed` composes them."""

    def __init__(self, steps: Any, composition: str = "additive") -> None:
        self.steps = steps
        self.composition = composition
        if isinstance(steps, ReferenceSteps):
            self.kind = "reference"
        elif isinstance(steps, ProjectSteps):
            self.kind = "project"
        else:
            raise ValueError(f"steps: unknown kernel model {type(steps).__name__}")

    def pre(self, x: np.ndarray, pairs: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        if self.kind == "reference":
            s = self.steps
            slope = (s.g_y[-1] - s.g_y[-2]) / (s.g_x[-1] - s.g_x[-2])
            g = np.where(x > s.g_x[-1], s.g_y[-1] + slope * (x - s.g_x[-1]), np.interp(x, s.g_x, s.g_y))
            t = g + s.gamma * pairs
        else:
            s = self.steps
            n = np.maximum(chunks, 1.0)
            t = s.forward(s.p, x, x, s.attn * pairs, n) + s.overhead  # fresh chunks read what they write
        return np.where(x > 0.5, t, 0.0)

    def dec(self, b: np.ndarray, ctx_sum: np.ndarray) -> np.ndarray:
        b = np.asarray(b, np.float64)
        bb = np.maximum(b, 1.0)
        if self.kind == "reference":
            t = self.steps.decode_table(bb, ctx_sum / bb)
        else:
            s = self.steps
            t = s.forward(s.p, bb, ctx_sum, s.attn * ctx_sum, bb) + s.overhead
        return np.where(b > 0.5, t, 0.0)

    def mixed(self, b: np.ndarray, ctx_sum: np.ndarray, x: np.ndarray, pairs: np.ndarray,
              chunks: np.ndarray) -> np.ndarray:
        """One iteration: additive (prefill pass + decode step, AISimulate's) is the only composition
        implemented here; a one-forward composition would replace this function alone."""
        if self.composition != "additive":
            raise ValueError(f"composition {self.composition!r}: only 'additive' is implemented")
        return self.pre(x, pairs, chunks) + self.dec(b, ctx_sum)


# --------------------------------------------------------------------------------------------------
# Length classes


@dataclass(frozen=True)
class Classes:
    """Length classes of a workload: prompt classes (K,) with their mean lengths [tokens] and log-spaced
    edges, output classes (J,) with mean lengths [tokens] and probabilities."""

    prompt_mean: np.ndarray
    prompt_edges: np.ndarray
    output_mean: np.ndarray
    output_prob: np.ndarray
    output_edges: np.ndarray


def length_classes(lengths: str, k: int, j: int, samples: int = 400_000, seed: int = 12345) -> Classes:
    """K prompt and J output classes, log-spaced over [low, high] (the README's study: >= 8), each carrying
    the conditional mean of the distribution there (from a fixed large sample: what a task file's table
    gives, not the evaluated stream); a fixed length is one class."""
    pd, od = LENGTHS[lengths]
    rng = np.random.default_rng(seed)

    def one(d: Any, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if d.kind == "fixed":
            return np.array([float(d.median)]), np.array([1.0]), np.array([d.low, d.high + 1.0])
        x = d.sample(rng, samples).astype(np.float64)
        edges = np.geomspace(d.low, d.high + 1, n + 1)
        idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, n - 1)
        cnt = np.bincount(idx, minlength=n).astype(np.float64)
        mean = np.bincount(idx, weights=x, minlength=n) / np.maximum(cnt, 1.0)
        mean = np.where(cnt > 0, mean, np.sqrt(edges[:-1] * edges[1:]))
        return mean, cnt / cnt.sum(), edges

    pm, _, pe = one(pd, k)
    om, op, oe = one(od, j)
    return Classes(pm, pe, om, op, oe)


def class_of(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)


# --------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class Config:
    """Static settings of the interval model.

    Attributes:
      cap: vLLM max_num_seqs [sequences].
      substeps: S, sub-steps per control interval.
      dt: control interval [s].
      buckets: NB, FCFS queue buckets (sub-steps of arrival; the oldest absorbs the overflow).
      cells: L, Lagrangian cells per output class in the running pool.
      budget: max_num_batched_tokens [tokens].
      fixed_point: iterations of the m (iterations per sub-step) fixed point.
      others: who else's mixed iteration a fresh arrival can find in flight: "sampled" (the other n_adm - 1
        of its own sub-step: the arrivals are a multinomial split) or "poisson" (the fluid's whole mixed
        time, PASTA: for the even split, whose sub-step counts are expectations).
    """

    cap: int
    substeps: int = 16
    dt: float = 1.0
    buckets: int = 48
    cells: int = 8
    budget: int = MAX_BATCHED_TOKENS
    fixed_point: int = 3
    others: str = "sampled"


def init_state(e: int, cfg: Config, cl: Classes) -> dict[str, np.ndarray]:
    """A fresh engine: empty queue and pool. Shapes: queue (E, NB, K) and (E, NB); pool (E, J, L); (E,)."""
    k, j, nb, lc = len(cl.prompt_mean), len(cl.output_mean), cfg.buckets, cfg.cells
    z = np.zeros
    return {
        "qn": z((e, nb, k)), "qlo": z((e, nb)), "qhi": z((e, nb)),
        "rn": z((e, j, lc)), "rdone": z((e, j, lc)), "rlo": z((e, j, lc)), "rhi": z((e, j, lc)),
        "ptr": np.zeros((e, j), np.int64),
        "ctx": z(e), "psum": z(e), "jc": z(e), "tit": np.full(e, 0.02), "debt": z(e),
    }


def enqueue(st: dict[str, np.ndarray], arr: np.ndarray, t0: float, h: float) -> None:
    """Shift the buckets one sub-step older (the two oldest merge) and put the arrivals (E, K) in bucket 0,
    their arrival window [t0, t0 + h]."""
    qn, lo, hi = st["qn"], st["qlo"], st["qhi"]
    last_n = qn[:, -1].sum(1)
    merged_lo = np.where(last_n > EPS, lo[:, -1], lo[:, -2])
    st["qn"] = np.concatenate([arr[:, None, :], qn[:, :-2], (qn[:, -2] + qn[:, -1])[:, None]], axis=1)
    st["qlo"] = np.concatenate([np.full((len(arr), 1), t0), lo[:, :-2], merged_lo[:, None]], axis=1)
    st["qhi"] = np.concatenate([np.full((len(arr), 1), t0 + h), hi[:, :-2], hi[:, -2:-1]], axis=1)


def done_fraction(st: dict[str, np.ndarray], jc: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Completed fraction of every cell (E, J, L) once the iteration counter reaches jc (E,)."""
    width = np.maximum(st["rhi"] - st["rlo"], 1e-6)
    x = (jc[:, None, None] - (out[None, :, None] - 1.0) - st["rlo"]) / width
    return np.clip(x, 0.0, 1.0)


def admit(st: dict[str, np.ndarray], slots: np.ndarray, x_cap: np.ndarray, pk: np.ndarray) -> dict[str, np.ndarray]:
    """FCFS admission, oldest bucket first, up to `slots` requests and `x_cap` tokens (E,); within a bucket the
    classes in proportion. Returns per-bucket admitted counts (E, NB, K), the fraction f (E, NB), and the
    requests and tokens admitted ahead of each bucket (E, NB)."""
    qn = st["qn"]
    cnt = qn.sum(2)
    tok = qn @ pk
    # oldest first: reverse cumulative sums over the bucket axis (bucket NB-1 is the oldest)
    before_n = np.cumsum(cnt[:, ::-1], axis=1)[:, ::-1] - cnt
    before_t = np.cumsum(tok[:, ::-1], axis=1)[:, ::-1] - tok
    fn = np.clip((slots[:, None] - before_n) / np.maximum(cnt, EPS), 0.0, 1.0)
    ft = np.clip((x_cap[:, None] - before_t) / np.maximum(tok, EPS), 0.0, 1.0)
    f = np.where(cnt > EPS, np.minimum(fn, ft), 0.0)
    return {"adm": f[:, :, None] * qn, "f": f, "before_n": np.minimum(before_n, slots[:, None]),
            "before_t": np.minimum(before_t, x_cap[:, None]), "cnt": cnt, "tok": tok}


def iterations(ker: Kernels, b: np.ndarray, dec: np.ndarray, x: np.ndarray, pairs: np.ndarray,
               n_adm: np.ndarray, cb: np.ndarray, h: float, debt: np.ndarray, full: np.ndarray,
               fp: int) -> tuple[np.ndarray, ...]:
    """The sub-step's iterations. The X tokens admitted take n_mix mixed iterations: at least X / Cb, and as
    many as the distinct iterations n_adm admissions fall into among the m of the sub-step
    (m (1 - (1 - 1 / m)^n_adm)); exactly X / Cb (full chunks) where the chunk budget, not the arrivals,
    limited admission (`full`: a backlog). Mixed iterations take n_mix Dec + P, P = n_mix Pre(X / n_mix); the time
    left of h after the engine's debt (work committed past the last sub-step's end) runs decode-only
    iterations; work beyond it is the next debt. Returns (m, n_mix, P [s], next debt [s])."""
    busy = b > 0.5
    avail = np.maximum(h - debt, 0.0)
    m = np.maximum(avail / np.maximum(dec, EPS), 1.0)
    nmix = np.zeros_like(m)
    p = np.zeros_like(m)
    for _ in range(fp):
        mc = np.maximum(m, 1.0)
        thin = mc * (1.0 - (1.0 - 1.0 / mc) ** n_adm)  # distinct iterations hit by n_adm admissions
        nmix = np.where(full, x / cb, np.maximum(x / cb, np.minimum(thin, n_adm)))
        nm = np.maximum(nmix, EPS)
        p = nmix * ker.pre(x / nm, pairs / nm, n_adm / nm)
        m = np.where(busy, nmix + np.maximum(avail - nmix * dec - p, 0.0) / np.maximum(dec, EPS), nmix)
    debt_next = np.maximum(debt + nmix * dec + p - h, 0.0)
    return m, nmix, p, debt_next


def sub_step(st: dict[str, np.ndarray], arr: np.ndarray, t0: float, cfg: Config, cl: Classes,
             ker: Kernels) -> dict[str, np.ndarray]:
    """Advance every episode by one sub-step of h = dt / S [s] with arrivals arr (E, K); returns what the
    sub-step produced (completions, output tokens, the TPOT integral, the TTFT mixture components)."""
    h = cfg.dt / cfg.substeps
    pk, oj, wj = cl.prompt_mean, cl.output_mean, cl.output_prob
    enqueue(st, arr, t0, h)
    alive = st["rn"] - st["rdone"]
    b = alive.sum((1, 2))
    dec = ker.dec(b, st["ctx"])
    cb = np.maximum(cfg.budget - b, 1.0)
    # the queue's token-weighted half prompt (causal pairs per prefilled token) and mean prompt
    qtok = st["qn"].sum(1) @ pk
    qsq = st["qn"].sum(1) @ (pk * pk)
    qcnt = st["qn"].sum((1, 2))
    p_mean = float(pk @ np.ones_like(pk) / len(pk))
    pair_tok = 0.5 * np.where(qtok > EPS, qsq / np.maximum(qtok, EPS), p_mean)
    mean_p = np.where(qcnt > EPS, qtok / np.maximum(qcnt, EPS), p_mean)
    t_full = ker.mixed(b, st["ctx"], cb, cb * pair_tok, np.maximum(cb / mean_p, 1.0))
    # prefill tokens the sub-step may admit: what full iterations prefill in the time left after the debt,
    # and at least one chunk while the engine is free at some point of the sub-step
    x_cap = np.maximum(np.maximum(h - st["debt"], 0.0) / t_full * cb, np.where(st["debt"] < h, cb, 0.0))
    # free slots: the cap less the running, plus the completions expected in the sub-step
    m_est = h / np.maximum(st["tit"], 1e-4)
    comp_est = np.maximum(st["rn"] * done_fraction(st, st["jc"] + m_est, oj) - st["rdone"], 0.0).sum((1, 2))
    slots = np.maximum(cfg.cap - b + comp_est, 0.0)
    ad = admit(st, slots, x_cap, pk)
    adm = ad["adm"]
    n_adm = adm.sum((1, 2))
    x = (adm.sum(1) @ pk)
    pairs = 0.5 * (adm.sum(1) @ (pk * pk))
    full = x >= 0.999 * x_cap
    m, nmix, p_time, debt_next = iterations(ker, b, dec, x, pairs, n_adm, cb, h, st["debt"], full, cfg.fixed_point)
    jc_new = st["jc"] + m
    # TTFT components (before the state moves on)
    comps = ttft_components(st, ad, t0, h, b, dec, cb, t_full, x, n_adm, nmix, m, p_time, slots, pk, ker,
                            cfg.others == "poisson")
    # completions (exact output lengths: the cells' counter windows)
    w_run = (alive.sum(2) / np.maximum(oj - 1.0, 1.0) * (oj > 1.0)).sum(1)
    frac = done_fraction(st, jc_new, oj)
    comp = np.maximum(st["rn"] * frac - st["rdone"], 0.0)
    st["rdone"] = st["rdone"] + comp
    comp_j = comp.sum(2)
    n_comp = comp_j.sum(1)
    pm_run = st["psum"] / np.maximum(b, EPS)
    st["ctx"] = np.maximum(st["ctx"] + b * m + x + n_adm - (comp_j @ oj) - n_comp * pm_run, 0.0)
    st["psum"] = np.maximum(st["psum"] + x - n_comp * pm_run, 0.0)
    empty = (st["rn"] - st["rdone"] <= 1e-9)
    for key in ("rn", "rdone"):
        st[key] = np.where(empty, 0.0, st[key])
    insert(st, n_adm, st["jc"], jc_new, oj, wj, cfg.cells)
    st["jc"] = jc_new
    st["tit"] = np.where(b > 0.5, h / np.maximum(m, EPS), st["tit"])
    st["debt"] = debt_next
    # the queue after admission: the admitted part of a bucket is its earliest arrivals
    st["qn"] = st["qn"] - adm
    st["qlo"] = st["qlo"] + ad["f"] * (st["qhi"] - st["qlo"])
    return {"completed": n_comp, "tokens": comp_j @ oj, "tpot_integral": h * w_run, "ttft": comps,
            "admitted": n_adm, "iterations": m, "running": b}


def insert(st: dict[str, np.ndarray], n_adm: np.ndarray, j0: np.ndarray, j1: np.ndarray, oj: np.ndarray,
           wj: np.ndarray, lc: int) -> None:
    """Admitted requests (E,) into each output class's open cell, counter window [j0, j1]. The open cell is
    closed first when the window would stretch it beyond o_j / (L - 3) iterations, unless the next cell of
    the ring is still alive (then the open cell stretches: a merge into an old cell would smear that cell's
    completions)."""
    width = (oj / max(lc - 3, 1))[None, :]
    oh = np.arange(lc)[None, None, :] == st["ptr"][:, :, None]  # (E, J, L)
    open_n = (st["rn"] * oh).sum(2)
    open_lo = (st["rlo"] * oh).sum(2)
    nxt = np.arange(lc)[None, None, :] == ((st["ptr"] + 1) % lc)[:, :, None]
    next_free = ((st["rn"] - st["rdone"]) * nxt).sum(2) <= 1e-9
    # never onto a cell still alive (a merge would smear old requests' completions): stretch the open one
    close = (open_n > 1e-9) & (j1[:, None] - open_lo > width) & (n_adm[:, None] > 0) & next_free
    st["ptr"] = np.where(close, (st["ptr"] + 1) % lc, st["ptr"])
    oh = np.arange(lc)[None, None, :] == st["ptr"][:, :, None]
    new = n_adm[:, None, None] * wj[None, :, None] * oh
    fresh = oh & (st["rn"] <= 1e-9) & (new > 0)
    st["rlo"] = np.where(fresh, j0[:, None, None], st["rlo"])
    st["rhi"] = np.where(oh & (new > 0), j1[:, None, None], st["rhi"])
    st["rn"] = st["rn"] + new


def own_time(ker: Kernels, b: np.ndarray, ctx: np.ndarray, dec: np.ndarray, cb: np.ndarray, pk: np.ndarray,
             x_oth: np.ndarray, pair_oth: np.ndarray) -> np.ndarray:
    """Prefill-to-first-token of a class-k prompt (E, K) [s]: its full chunks, then the iteration with its
    last chunk beside the co-batched tokens x_oth (E,) (a full chunk as the queue grows)."""
    cbk = cb[:, None]
    n_full = np.maximum(np.ceil(pk[None, :] / cbk) - 1.0, 0.0)
    rem = pk[None, :] - n_full * cbk
    last_x = np.minimum(rem + x_oth[:, None], cbk)
    pairs = 0.5 * pk[None, :] ** 2 + pair_oth[:, None]
    full = n_full * (dec[:, None] + ker.pre(cbk, 0.0 * cbk, 1.0 + 0.0 * cbk))
    return full + dec[:, None] + ker.pre(last_x, pairs, 1.0 + x_oth[:, None] / np.maximum(pk.mean(), 1.0))


def ttft_components(st: dict[str, np.ndarray], ad: dict[str, np.ndarray], t0: float, h: float, b: np.ndarray,
                    dec: np.ndarray, cb: np.ndarray, t_full: np.ndarray, x: np.ndarray, n_adm: np.ndarray,
                    nmix: np.ndarray, m: np.ndarray, p_time: np.ndarray, slots: np.ndarray, pk: np.ndarray,
                    ker: Kernels, pasta: bool = False) -> dict[str, np.ndarray]:
    """TTFT of the requests admitted in the sub-step, per (bucket, class): four uniforms (E, NB, K, 4) [s]
    (module docstring) and each bucket's arrival start (E, NB)."""
    adm, f = ad["adm"], ad["f"]
    adm_n = adm.sum(2)
    adm_t = adm @ pk
    # engine time per admitted token (its mixed iterations), the busy rate's inverse T_full / Cb when full
    w_tok = np.where(x > EPS, (nmix * dec + p_time) / np.maximum(x, EPS), t_full / cb)[:, None]
    t_start = t0 + st["debt"][:, None]
    a0 = st["qlo"]
    a1 = st["qlo"] + f * (st["qhi"] - st["qlo"])
    waiting = ad["cnt"].sum(1)
    slot_bound = (waiting > slots + 1e-6)[:, None]
    sl = np.maximum(slots, EPS)[:, None]
    s0 = np.maximum(t_start + ad["before_t"] * w_tok, t0 + np.where(slot_bound, h * ad["before_n"] / sl, 0.0))
    # the work ahead of a bucket's last admitted request: the bucket's other n - 1 (a request does not wait
    # for itself; with the even split's expected counts, the fluid's n)
    own_share = 1.0 if pasta else np.clip((adm_n - 1.0) / np.maximum(adm_n, EPS), 0.0, 1.0)
    s1 = np.maximum(t_start + (ad["before_t"] + adm_t * own_share) * w_tok,
                    t0 + np.where(slot_bound, h * (ad["before_n"] + adm_n) / sl, 0.0))
    d0, d1 = s0 - a0, s1 - a1
    both = (d0 > 0) & (d1 > 0)
    some = (d0 > 0) | (d1 > 0)
    dmax = np.maximum(d0, d1)
    frac_del = np.where(both, 1.0, np.where(some, dmax / np.maximum(np.abs(d0) + np.abs(d1), EPS), 0.0))
    dlo = np.where(both, np.minimum(d0, d1), 0.0)
    x_oth = np.maximum(x / np.maximum(nmix, EPS) - x / np.maximum(n_adm, EPS), 0.0)
    pair_adm = np.where(x > EPS, 0.5 * (adm.sum(1) @ (pk * pk)) / np.maximum(x, EPS), 0.0)
    own_l = own_time(ker, b, st["ctx"], dec, cb, pk, x_oth, x_oth * pair_adm)  # (E, K)
    own_d = own_l[:, None, :] + 0.0 * adm  # (E, NB, K)
    # the iteration in flight when a request arrives: a decode step, another request's mixed iteration, or
    # none (idle); its own admission's iteration is not in flight (others: n_adm - 1 of the admitted)
    others = 1.0 if pasta else np.clip((n_adm - 1.0) / np.maximum(n_adm, EPS), 0.0, 1.0)
    q_mix = np.clip((nmix * dec + p_time) / h, 0.0, 1.0) * others
    q_dec = np.where(b > 0.5, 1.0 - q_mix, 0.0)
    q_idle = 1.0 - q_dec - q_mix
    t_mix = dec + p_time / np.maximum(nmix, EPS)
    ol = own_d
    zero = adm * (1.0 - frac_del)[:, :, None]
    w = np.stack([adm * frac_del[:, :, None], zero * q_dec[:, None, None], zero * q_mix[:, None, None],
                  zero * q_idle[:, None, None]], axis=-1)
    lo = np.stack([dlo[:, :, None] + own_d, ol, ol, ol], axis=-1)
    hi = np.stack([dmax[:, :, None] + own_d, ol + dec[:, None, None], ol + t_mix[:, None, None], ol], axis=-1)
    return {"w": w, "lo": lo, "hi": np.maximum(hi, lo), "arrival": a0}


# --------------------------------------------------------------------------------------------------
# Driver: the reference's request streams through the model, statistics as iteration_sim reports them


def mixture_stats(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> dict[str, float]:
    """p50/p90/p99/mean of a mixture of uniforms [lo, hi] with weights w (bisection on the CDF)."""
    tot = w.sum()
    width = hi - lo

    def cdf(t: float) -> float:
        inside = np.where(width > 1e-12, np.clip((t - lo) / np.maximum(width, 1e-12), 0.0, 1.0), (t >= lo) * 1.0)
        return float((w * inside).sum() / tot)

    out = {}
    for q, name in ((0.5, "ttft_p50_s"), (0.9, "ttft_p90_s"), (0.99, "ttft_p99_s")):
        a, b = 0.0, float(hi.max()) + 1e-9
        for _ in range(50):
            mid = 0.5 * (a + b)
            a, b = (mid, b) if cdf(mid) < q else (a, mid)
        out[name] = 0.5 * (a + b)
    out["ttft_mean_s"] = float((w * 0.5 * (lo + hi)).sum() / tot)
    return out


HIST_EDGES = np.concatenate([[0.0], np.geomspace(0.004, 60.0, 48)])  # [s] the fixed-edge histogram tried


def histogram_stats(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, edges: np.ndarray = HIST_EDGES) -> dict[str, float]:
    """The same statistics from a fixed-edge histogram of the mixture (what a JAX state would hold): mass per
    bin exact, quantiles linear inside a bin, the mean from the bin centres."""
    cdf = np.zeros(len(edges))
    for i in range(0, len(w), 200_000):
        ww, ll, hh = w[i:i + 200_000], lo[i:i + 200_000], hi[i:i + 200_000]
        width = np.maximum(hh - ll, 1e-12)
        cdf += (ww[:, None] * np.clip((edges[None, :] - ll[:, None]) / width[:, None], 0.0, 1.0)).sum(0)
    cdf /= w.sum()
    out = {}
    for q, name in ((0.5, "ttft_p50_s"), (0.9, "ttft_p90_s"), (0.99, "ttft_p99_s")):
        out[name] = float(np.interp(q, cdf, edges))
    mass = np.diff(cdf)
    out["ttft_mean_s"] = float((mass * 0.5 * (edges[1:] + edges[:-1])).sum())
    return out


def arrival_counts(arrivals_s: list[np.ndarray], prompts: list[np.ndarray], cl: Classes, cfg: Config,
                   n_sub: int, split: str) -> np.ndarray:
    """Arrivals per (sub-step, episode, prompt class), (n_sub, E, K): the stream's instants binned
    (`random`: the multinomial split) or each interval's count spread evenly (`even`)."""
    k = len(cl.prompt_mean)
    out = np.zeros((n_sub, len(arrivals_s), k))
    h = cfg.dt / cfg.substeps
    for e, (t, p) in enumerate(zip(arrivals_s, prompts)):
        c = class_of(p, cl.prompt_edges)
        if split == "random":
            s = np.minimum((t / h).astype(np.int64), n_sub - 1)
            np.add.at(out[:, e, :], (s, c), 1.0)
        elif split == "random-total":  # sub-step totals sampled, each carrying its interval's class mix
            s = np.minimum((t / h).astype(np.int64), n_sub - 1)
            tot = np.bincount(s, minlength=n_sub).astype(np.float64)
            iv = (t / cfg.dt).astype(np.int64)
            per = np.zeros((n_sub // cfg.substeps + 1, k))
            np.add.at(per, (iv, c), 1.0)
            mix = per / np.maximum(per.sum(1, keepdims=True), 1.0)
            out[:, e, :] = tot[:, None] * np.repeat(mix, cfg.substeps, axis=0)[:n_sub]
        else:
            iv = (t / cfg.dt).astype(np.int64)
            per = np.zeros((n_sub // cfg.substeps + 1, k))
            np.add.at(per, (iv, c), 1.0)
            out[:, e, :] = np.repeat(per, cfg.substeps, axis=0)[:n_sub] / cfg.substeps
    return out


def run_model(arr: np.ndarray, cfg: Config, cl: Classes, ker: Kernels, warmup: float, window_end: float,
              measure_end: float) -> dict[str, Any]:
    """Run the sub-steps of arr (n_sub, E, K); TTFT of arrivals after warmup, completions and output tokens
    in [warmup, window_end), TPOT over [warmup, measure_end)."""
    n_sub, e, _ = arr.shape
    h = cfg.dt / cfg.substeps
    st = init_state(e, cfg, cl)
    ws, los, his = [], [], []
    comp_win = tok_win = comp_tp = tp_int = 0.0
    peak_run = 0.0
    for s in range(n_sub):
        t0 = s * h
        o = sub_step(st, arr[s], t0, cfg, cl, ker)
        peak_run = max(peak_run, float(o["running"].max()))
        c = o["ttft"]
        keep = (c["w"] > 1e-12) & (c["arrival"][:, :, None, None] >= warmup)
        if keep.any():
            ws.append(c["w"][keep])
            los.append(c["lo"][keep])
            his.append(c["hi"][keep])
        if warmup <= t0 < window_end:
            comp_win += float(o["completed"].sum())
            tok_win += float(o["tokens"].sum())
        if warmup <= t0 < measure_end:
            comp_tp += float(o["completed"].sum())
            tp_int += float(o["tpot_integral"].sum())
    win = (window_end - warmup) * e
    res: dict[str, Any] = {
        "requests_per_s": comp_win / win,
        "output_tokens_per_s": tok_win / win,
        "tpot_mean_s": tp_int / max(comp_tp, EPS),
        "peak_running": peak_run,
        "queue_left": float(st["qn"].sum()),
    }
    if ws:
        w, lo, hi = np.concatenate(ws), np.concatenate(los), np.concatenate(his)
        res.update(mixture_stats(w, lo, hi))
        res["histogram"] = histogram_stats(w, lo, hi)
    return res


@dataclass(frozen=True)
class Study:
    """Run settings: reference.py's (600 s of arrivals per seed, seeds 0-2, 60 s warm-up) plus a drain."""

    seconds: float = 600.0
    warmup: float = 60.0
    seeds: tuple[int, ...] = (0, 1, 2)
    drain: float = 60.0
    split: str = "random"
    classes: int = 8


def kernels_for(p: dict[str, Any], static: dict[str, Any], mode: str) -> Kernels:
    if mode == "reference":
        return Kernels(ReferenceSteps(static, p["gpu"], p["dtype"], additive=True))
    if mode == "project-additive":
        return Kernels(ProjectSteps(p["project"]["gpu"], p["project"]["quant_tier"], additive=True))
    raise ValueError(f"mode {mode!r}: expected 'reference' or 'project-additive'")


def model_rate(p: dict[str, Any], rate: float, ker: Kernels, cfg: Config, cl: Classes, sd: Study,
               saturation: bool) -> dict[str, Any]:
    """One row: the reference's streams (seeds, or 20000 + seed on the saturation stream) through the model."""
    point = point_of(p)
    seeds = [20_000 + s for s in sd.seeds] if saturation else list(sd.seeds)
    arrs, prompts = [], []
    for seed in seeds:
        a_ms, pr, _ = draw_requests(point, rate, None, sd.seconds, seed)
        arrs.append(a_ms / 1000.0)
        prompts.append(pr)
    end = sd.seconds if saturation else sd.seconds + sd.drain
    n_sub = int(round(end / cfg.dt * cfg.substeps))
    arr = arrival_counts(arrs, prompts, cl, cfg, n_sub, sd.split)
    return run_model(arr, cfg, cl, ker, sd.warmup, sd.seconds, end)


QS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s", "tpot_mean_s", "requests_per_s")


def run_point(p: dict[str, Any], static: dict[str, Any], exact: dict[tuple[str, str, Any], dict[str, Any]],
              mode: str, cfg_kw: dict[str, Any], sd: Study, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Saturation and the four loads of one point: the model against the exact scheduler and AISimulate."""
    ker = kernels_for(p, static, mode)
    cfg = Config(cap=p["batch_cap"], **cfg_kw)
    cl = length_classes(p["lengths"], sd.classes, sd.classes)
    rows = []
    loads: list[tuple[Any, float, dict[str, Any]]] = [("saturation", p["saturation"]["rate"], p["saturation"])]
    loads += [(r["rate"], r["rate"], r) for r in p["rates"]]
    for key, rate, refrow in loads:
        t0 = time.process_time()
        sim = model_rate(p, rate, ker, cfg, cl, sd, key == "saturation")
        ex = exact.get((label(p), mode, key))
        qs = ("requests_per_s", "tpot_mean_s") if key == "saturation" else QS
        row = {
            "point": label(p), "mode": mode, "rate": key,
            "load_fraction": refrow.get("load_fraction", "saturation"),
            "model": {q: sim[q] for q in qs}, "model_histogram": sim.get("histogram"),
            "exact": {q: ex[q] for q in qs} if ex else None,
            "aisimulate": {q: refrow[q] for q in qs},
            "diagnostics": {"peak_running": sim["peak_running"], "queue_left": sim["queue_left"],
                            "cpu_s": time.process_time() - t0},
        }
        row["err_vs_exact"] = {q: rel(sim[q], ex[q]) for q in qs} if ex else None
        row["err_vs_aisimulate"] = {q: rel(sim[q], refrow[q]) for q in qs}
        rows.append(row)
        e = row["err_vs_exact"] or {}
        scale = {q: 1e3 if ("ttft" in q or "tpot" in q) else 1.0 for q in qs}
        log(f"{label(p)} [{mode}] {key}: " + " ".join(
            f"{q.replace('_s', '')} {sim[q] * scale[q]:.1f} ({e.get(q, float('nan')):+.0%})" for q in qs))
    return rows


def exact_rows(path: Path) -> dict[tuple[str, str, Any], dict[str, Any]]:
    doc = json.loads(path.read_text())
    return {(r["point"], r["mode"], r["rate"]): r["sim"] for r in doc["rows"]}


def summarise(rows: list[dict[str, Any]], against: str) -> dict[str, Any]:
    """Per mode and criterion, rows within the issue's targets and median / max |error| against `against`
    ('exact' or 'aisimulate'); also TTFT p99 at loads <= 75 %."""
    out: dict[str, Any] = {}
    key = f"err_vs_{against}"
    for mode in sorted({r["mode"] for r in rows}):
        rs = [r for r in rows if r["mode"] == mode and r[key]]
        crit: dict[str, Any] = {}
        for name, target in TARGETS.items():
            if name == "saturation_requests_per_s":
                errs = [r[key]["requests_per_s"] for r in rs if r["rate"] == "saturation"]
            elif name == "tpot_mean_s":
                errs = [r[key]["tpot_mean_s"] for r in rs]
            else:
                errs = [r[key][name] for r in rs if r["rate"] != "saturation"]
            a = np.abs(errs)
            crit[name] = {"target": target, "rows": len(a), "within": int((a <= target).sum()),
                          "median_abs": float(np.median(a)), "max_abs": float(a.max())}
        le = [abs(r[key]["ttft_p99_s"]) for r in rs if r["rate"] != "saturation" and r["load_fraction"] <= 0.75]
        crit["ttft_p99_s_loads_le_75"] = {"target": TARGETS["ttft_p99_s"], "rows": len(le),
                                          "within": int(sum(x <= 0.25 for x in le)),
                                          "median_abs": float(np.median(le)), "max_abs": float(max(le))}
        out[mode] = crit
    return out


def histogram_error(rows: list[dict[str, Any]]) -> dict[str, float]:
    """How far the fixed-edge histogram's statistics are from the exact mixture's (max |relative|)."""
    out = {}
    for q in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s"):
        e = [abs(rel(r["model_histogram"][q], r["model"][q])) for r in rows
             if r.get("model_histogram") and r["rate"] != "saturation"]
        out[q] = float(max(e)) if e else float("nan")
    return out


def speed(cfg_kw: dict[str, Any], envs: int, intervals: int, lengths: str,
          log: Callable[[str], None]) -> dict[str, Any]:
    """NumPy wall time per env-step (one control interval of S sub-steps) at `envs` episodes, reference
    kernels of A100 cap 64, Poisson arrivals at ~75 % load, without the TTFT bookkeeping of the driver."""
    ref = json.loads((HERE / "reference.json").read_text())
    p = next(q for q in ref["points"] if q["gpu"] == "a100-sxm-80gb" and q["batch_cap"] == 64
             and q["lengths"] == lengths)
    ker = kernels_for(p, ref["static"], "reference")
    cfg = Config(cap=64, **cfg_kw)
    cl = length_classes(lengths, 8, 8)
    rng = np.random.default_rng(0)
    pk_prob = np.bincount(class_of(LENGTHS[lengths][0].sample(rng, 100_000), cl.prompt_edges),
                          minlength=len(cl.prompt_mean)) / 100_000
    lam = p["rates"][2]["rate"] * pk_prob / cfg.substeps
    st = init_state(envs, cfg, cl)
    arr = rng.poisson(lam[None, None, :], size=(cfg.substeps * intervals, envs, len(lam))).astype(np.float64)
    t0 = time.perf_counter()
    for s in range(cfg.substeps * intervals):
        sub_step(st, arr[s], s / cfg.substeps, cfg, cl, ker)
    wall = time.perf_counter() - t0
    per = wall / (envs * intervals)
    log(f"speed {cfg_kw} {lengths}: {per * 1e6:.2f} us per env-step at {envs} envs ({1 / per:.0f} env-steps/s, NumPy)")
    return {"config": cfg_kw, "lengths": lengths, "envs": envs, "intervals": intervals, "wall_s": wall,
            "us_per_env_step": per * 1e6, "env_steps_per_s": 1.0 / per}


def op_count(s: int, nb: int, k: int, j: int, lc: int, g: int, ttft_per_substep: bool = True,
             class_free_queue: bool = False) -> dict[str, float]:
    """Rough float operations per env-step (one interval of s sub-steps), counted from the code's array shapes
    (one per element-wise operation, ~10 for exp / pow, ~20 for a kernel evaluation): the queue's
    (NB, K) arrays, the pool's (J, L) cells, the per-class own times, the scalars, and the TTFT histogram
    deposit of the 4 NB K uniforms of a sub-step into g edges (3 operations an edge), per sub-step or (the
    compact alternative) once per interval from 3 K moment-matched uniforms. A class-free queue (count,
    tokens, squared tokens, arrival window per bucket; own times from the static class mix, computed once per
    interval) is ~60 operations a bucket."""
    queue = 60 * nb if class_free_queue else 24 * nb * k + 55 * nb
    pool = 35 * j * lc
    own = 100 * k / s if class_free_queue else 100 * k
    scalars = 250.0
    per_sub = queue + pool + own + scalars
    hist = (4 * nb * k * g * 3) * s if ttft_per_substep else 3 * k * g * 3
    return {"queue": queue * s, "pool": pool * s, "own_times": own * s, "scalars": scalars * s,
            "histogram": float(hist), "total": per_sub * s + hist}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--modes", default="reference,project-additive")
    ap.add_argument("--point", default="", help="only points whose label contains this")
    ap.add_argument("--seconds", type=float, default=Study.seconds)
    ap.add_argument("--split", default="random", choices=("random", "random-total", "even"))
    ap.add_argument("--config", default="{}", help="JSON overrides of Config (substeps, buckets, cells)")
    ap.add_argument("--variants", default="", help="JSON list of extra {config, split, label} runs (reference mode)")
    ap.add_argument("--speed", action="store_true", help="only the speed benchmark")
    ap.add_argument("--report", action="store_true", help="print the README tables from --out")
    args = ap.parse_args(argv)
    if args.report:
        print(report(json.loads(args.out.read_text())))
        return 0

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cfg_kw = json.loads(args.config)
    if args.speed:
        for kw in (cfg_kw, {"substeps": 8, "buckets": 24}, {"substeps": 4, "buckets": 12}):
            speed(kw, 4096, 3, "lognormal-sharegpt", log)
        return 0
    wall0, cpu0 = time.time(), time.process_time()
    ref = json.loads((HERE / "reference.json").read_text())
    exact = exact_rows(HERE / "iteration_sim.json")
    sd = Study(seconds=args.seconds, split=args.split)
    rows: list[dict[str, Any]] = []
    for mode in args.modes.split(","):
        for p in ref["points"]:
            if args.point in label(p):
                rows += run_point(p, ref["static"], exact, mode, cfg_kw, sd, log)
    variants: list[dict[str, Any]] = []
    doc = {
        "schema": "inferencegym-crosscheck-interval-model/1",
        "generated_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
        "settings": {"config": {**Config(cap=0).__dict__, **cfg_kw, "cap": "per point"}, "split": args.split,
                     "seconds": args.seconds, "warmup": sd.warmup, "seeds": list(sd.seeds), "drain": sd.drain,
                     "length_classes": sd.classes, "targets": TARGETS,
                     "exact": "iteration_sim.json rows of the same mode (same requests, same kernels)"},
        "summary_vs_exact": summarise(rows, "exact"),
        "summary_vs_aisimulate": summarise(rows, "aisimulate"),
        "histogram_edges_s": HIST_EDGES.tolist(),
        "histogram_vs_mixture_max_abs": histogram_error(rows),
        "rows": rows,
        "variants": variants,
        "speed": [speed(kw, 4096, 3, "lognormal-sharegpt", log)
                  for kw in (cfg_kw, {"substeps": 8, "buckets": 24}, {"substeps": 4, "buckets": 12})],
    }

    def write() -> None:
        doc["wall_s"], doc["cpu_s"] = time.time() - wall0, time.process_time() - cpu0
        tmp = args.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        tmp.replace(args.out)

    write()  # the main modes first; each variant rewrites the file with itself added
    for v in json.loads(args.variants or "[]"):
        vs = Study(seconds=args.seconds, split=v.get("split", "random"))
        vrows = [r for p in ref["points"] if args.point in label(p)
                 for r in run_point(p, ref["static"], exact, "reference", v.get("config", {}), vs, log)]
        variants.append({"label": v["label"], "config": v.get("config", {}), "split": vs.split,
                         "summary_vs_exact": summarise(vrows, "exact")["reference"], "rows": vrows})
        write()
    log(f"wrote {args.out} ({doc['wall_s']:.0f} s wall)")
    return 0


def report(doc: dict[str, Any]) -> str:
    """Markdown tables of interval_model.json."""
    lines = ["| mode | against | saturation (3 %) | TTFT p50 (15 %) | TTFT mean (15 %) | TTFT p99 (25 %) |"
             " TTFT p99, loads <= 75 % | TPOT mean (10 %) |", "|---|---|---|---|---|---|---|---|"]

    def cells(s: dict[str, Any]) -> list[str]:
        c = [f"{s[k]['within']}/{s[k]['rows']} ({s[k]['median_abs'] * 100:.1f} / {s[k]['max_abs'] * 100:.1f} %)"
             for k in ("saturation_requests_per_s", "ttft_p50_s", "ttft_mean_s", "ttft_p99_s",
                       "ttft_p99_s_loads_le_75", "tpot_mean_s")]
        return c

    for against in ("exact", "aisimulate"):
        for mode, s in doc[f"summary_vs_{against}"].items():
            lines.append(f"| `{mode}` | {against} | " + " | ".join(cells(s)) + " |")
    for v in doc.get("variants", []):
        lines.append(f"| `reference`, {v['label']} | exact | " + " | ".join(cells(v["summary_vs_exact"])) + " |")
    for mode in dict.fromkeys(r["mode"] for r in doc["rows"]):
        lines.append(f"\nPer point, mode `{mode}`, model / exact scheduler - 1 (loads 25 / 50 / 75 / 90 %):\n")
        lines.append("| point | saturation | TPOT at sat. | TTFT p50 | TTFT mean | TTFT p99 | TPOT mean |")
        lines.append("|---|---|---|---|---|---|---|")
        for point in dict.fromkeys(r["point"] for r in doc["rows"]):
            rs = [r for r in doc["rows"] if r["point"] == point and r["mode"] == mode and r["err_vs_exact"]]
            if not rs:
                continue
            sat = next(r for r in rs if r["rate"] == "saturation")
            loads = [r for r in rs if r["rate"] != "saturation"]

            def col(q: str, loads: list[dict[str, Any]] = loads) -> str:
                return " / ".join(f"{r['err_vs_exact'][q] * 100:+.0f}" for r in loads)

            lines.append(f"| {point} | {sat['err_vs_exact']['requests_per_s'] * 100:+.1f} % "
                         f"({sat['model']['requests_per_s']:.2f} vs {sat['exact']['requests_per_s']:.2f}) | "
                         f"{sat['err_vs_exact']['tpot_mean_s'] * 100:+.1f} % | {col('ttft_p50_s')} | "
                         f"{col('ttft_mean_s')} | {col('ttft_p99_s')} | {col('tpot_mean_s')} |")
    lines.append("\nRough float operations per env-step (`op_count`; K = J = 8 classes):\n")
    lines.append("| design | S | NB | J x L | histogram | queue | pool | own times | scalars | histogram ops | total |")
    lines.append("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for name, a, per in (("prototype (this study)", (16, 48, 8, 8, 8, 49), True),
                         ("prototype, NB 16", (16, 16, 8, 8, 8, 49), True),
                         ("prototype, S 8, NB 24", (8, 24, 8, 8, 8, 49), True),
                         ("compact (untested): class-free queue NB 16, J x L 4 x 6, histogram per interval",
                          (16, 16, 8, 4, 6, 33), False),
                         ("compact (untested), S 8", (8, 16, 8, 4, 6, 33), False),
                         ("compact (untested), S 4, NB 8", (4, 8, 8, 4, 6, 33), False)):
        c = op_count(*a, ttft_per_substep=per, class_free_queue=not per)
        lines.append(f"| {name} | {a[0]} | {a[1]} | {a[3]} x {a[4]} | {a[5]} edges, "
                     f"{'per sub-step' if per else 'per interval'} | {c['queue']:.0f} | {c['pool']:.0f} | "
                     f"{c['own_times']:.0f} | {c['scalars']:.0f} | {c['histogram']:.0f} | {c['total']:.0f} |")
    lines.append("\nSpeed (NumPy, this machine's shared cores, reference kernels, lognormal lengths, 75 % load):\n")
    lines.append("| config | envs | us per env-step | env-steps/s |")
    lines.append("|---|---:|---:|---:|")
    for s in doc.get("speed", []):
        lines.append(f"| {json.dumps(s['config'])} | {s['envs']} | {s['us_per_env_step']:.1f} | "
                     f"{s['env_steps_per_s']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
