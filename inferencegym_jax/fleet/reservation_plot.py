"""A reservation episode over its days: demand, reserved and on-demand replicas, misses, and its figure.

    env, params = ig.make("InferenceGym-Reserve1-v1", split="heldout")
    series = reservation_episode_series(env, params, week_peak, jax.random.key(0))
    plot_reservation_episode(series, "reserve.png", title="week peak")

`reservation_episode_series` plays one episode of a policy `(key, obs, params) -> action` or a
`protocols.Controller` (the clairvoyant oracle is one) with the keys of a graded episode
(`evaluate.stream_episode_keys` of episode 0 of `key`, as `fleet.reservation_baselines` runs
them) and returns per-window host arrays (`ReservationSeries`). `plot_reservation_episode` draws
two panels on a `matplotlib.figure.Figure` (no pyplot; matplotlib imported only when drawing) and
writes a PNG atomically.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.fleet.reservation import ReservationEnv, ReservationParams
from inferencegym_jax.fleet.reservation_day import DAY_WINDOWS, WINDOW_S, WINDOWS_PER_HOUR, windows_outcome
from inferencegym_jax.protocols import Seen, StepOutput

PANEL_HEIGHT_IN = 2.0  # [in] height of one panel
DPI = 110  # [dots/in] of the written PNG


@dataclasses.dataclass(frozen=True)
class ReservationSeries:
    """One episode, per 10-min window of its committed days (host numpy, float64 (W,) each).

    Attributes:
      time_d: [days] since the first committed day began, at each window's start.
      demand: [replicas] the window's rate over the autoscaler's target (what it would run).
      reserved: [replicas] reserved in the window's hour.
      serving: [replicas] reserved plus on-demand serving (time-averaged over the window).
      missed: [requests] beyond the serving replicas' capacity.
      cost_usd: [$] the episode's cost (float).
      attainment: 1 - missed / arrived requests over the episode (float).
    """

    time_d: np.ndarray
    demand: np.ndarray
    reserved: np.ndarray
    serving: np.ndarray
    missed: np.ndarray
    cost_usd: float
    attainment: float


def _day_detail(state: Any, reserved: jax.Array, params: ReservationParams) -> tuple[jax.Array, ...]:
    """(rate, serving, missed) (DAY_WINDOWS,) of the state's next day under `reserved`, as the env plays it."""
    first = (params.first_day + state.day) * DAY_WINDOWS
    rate = jax.lax.dynamic_slice(state.rate, (first,), (DAY_WINDOWS,))
    observed = jnp.concatenate([state.rate[first - 1][None], rate[:-1]])
    reserved_w = jnp.repeat(reserved.astype(jnp.float32), WINDOWS_PER_HOUR)
    missed, _, serving = windows_outcome(rate, observed, reserved_w, state.wanted_tail, params.prices)
    return rate, serving, missed


def reservation_episode_series(env: ReservationEnv, params: ReservationParams, policy: Any, key: jax.Array
                               ) -> ReservationSeries:
    """Episode 0 of `key` under `policy`, window by window (module docstring)."""
    controller = evaluate.as_controller(policy)
    k_reset, k_env, k_policy = jax.random.split(evaluate.episode_keys(key, 0, 1)[0], 3)
    obs, state = env.reset_env(k_reset, params)
    memory = controller.init(key, Seen(jnp.int32(0), obs, state), params)
    days, totals = [], None
    for t in range(params.decision_days):
        seen = Seen(jnp.int32(t), obs, state)
        action, memory = controller.act(memory, jax.random.fold_in(k_policy, t), seen, params)
        reserved = jnp.clip(jnp.asarray(action, jnp.int32), 0, params.max_reserved)
        days.append((*_day_detail(state, reserved, params), jnp.repeat(reserved, WINDOWS_PER_HOUR)))
        obs, nxt, reward, _, _, info = env.step_env(jax.random.fold_in(k_env, t), state, action, params)
        memory = controller.update(memory, StepOutput(jnp.int32(t), state, obs, nxt, reward, info), params)
        state, totals = nxt, nxt.episode
    rate, serving, missed, reserved_w = (np.concatenate([np.asarray(d[i], np.float64) for d in days]) for i in range(4))
    target = float(params.prices.hpa_target)
    assert totals is not None
    return ReservationSeries(
        time_d=np.arange(rate.size) * WINDOW_S / 86400.0, demand=rate / target, reserved=reserved_w,
        serving=serving, missed=missed, cost_usd=float(totals.cost_usd),
        attainment=1.0 - float(totals.missed) / max(float(totals.arrived), 1.0))


def plot_reservation_episode(series: ReservationSeries, path: str | Path | None = None, title: str = "") -> Any:
    """Two panels (replicas: demand at the target, reserved, serving; misses per window), written
    to `path` as a PNG if given. Returns the matplotlib Figure."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 2 * PANEL_HEIGHT_IN), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    top.plot(series.time_d, series.demand, lw=0.8, color="0.35", label="demand at the target [replicas]")
    top.step(series.time_d, series.reserved, where="post", lw=1.2, color="C0", label="reserved")
    top.plot(series.time_d, series.serving, lw=0.8, color="C1", label="serving (reserved + on-demand)")
    top.set_ylabel("replicas")
    top.legend(loc="upper left", fontsize=7, ncol=3)
    top.set_title(f"{title}  ${series.cost_usd:,.0f}, SLO attainment {series.attainment:.4f}", fontsize=9)
    bottom.bar(series.time_d, series.missed, width=WINDOW_S / 86400.0, color="C3", align="edge")
    bottom.set_ylabel("missed\n[requests]")
    bottom.set_xlabel("days since the first commitment")
    if path is not None:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI)
        atomic_write_bytes(path, buffer.getvalue())
    return fig
