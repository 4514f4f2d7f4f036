"""A fleet episode over the day: offered load, replicas, SLO attainment and cost, and its figure.

    env, params = ig.make("InferenceGym-Fleet1-v1", split="heldout")
    series = fleet_episode_series(env, params, static_policy(12), jax.random.key(0))
    figure = plot_fleet_episode(series, "fleet_day.png", title="static 12 replicas")

`fleet_episode_series` plays one episode of a plain policy `(key, obs, params) -> action` (int32
(2,) [target replicas, routing rule]) through the package's episode loop (`evaluate.play_episode`,
jitted; the keys of a graded episode of `fleet.evaluate`) and returns per-interval host arrays
(`FleetSeries`) for figures. `plot_fleet_episode` draws four panels on a `matplotlib.figure.Figure` (no
pyplot, so no global state and any backend; matplotlib is imported only when drawing) and
writes it as a PNG atomically (`files.atomic_write_bytes`).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.fleet.day_traffic import MINUTE_S, rate_at
from inferencegym_jax.fleet.env import FleetEnv, FleetObservation, FleetParams
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.protocols import Seen, StepOutput

Policy = Callable[[jax.Array, FleetObservation, FleetParams], Any]
HOUR_S = 3600.0  # [s]
PANEL_HEIGHT_IN = 1.7  # [in] height of one panel
DPI = 110  # [dots/in] of the written PNG


@dataclasses.dataclass(frozen=True)
class FleetSeries:
    """One fleet episode, per control interval (host numpy, every array float64 (T,)).

    Attributes:
      time_h: [h] since the episode began, at each interval's end.
      arrival_rate: [req/s] offered load: the interval's arrivals over its length.
      curve_rate: [req/s] the day curve's mean rate at the interval's first minute.
      serving, warming, draining: [replicas] at the interval's end.
      attainment: [fraction] of the interval's judged requests that met their SLO (1 when none).
      gpu_seconds: [GPU s] held in the interval (serving, draining and warming replicas).
      cost_usd: [$] of that GPU time.
      start_minute: [min] the trace minute the episode began at (int).
      slo_target: the task's SLO attainment target (a line on the attainment panel).
    """

    time_h: np.ndarray
    arrival_rate: np.ndarray
    curve_rate: np.ndarray
    serving: np.ndarray
    warming: np.ndarray
    draining: np.ndarray
    attainment: np.ndarray
    gpu_seconds: np.ndarray
    cost_usd: np.ndarray
    start_minute: int = 0
    slo_target: float = 0.99

    def __post_init__(self) -> None:
        arrays = [f.name for f in dataclasses.fields(self) if f.type == "np.ndarray"]
        shape = np.shape(self.time_h)
        if len(shape) != 1 or shape[0] < 1:
            raise ValueError(f"time_h has shape {shape}; allowed: (T,) with T >= 1 intervals")
        for name in arrays:
            value = np.asarray(getattr(self, name), np.float64)
            if value.shape != shape or not np.all(np.isfinite(value)):
                raise ValueError(f"{name} must be {shape[0]} finite numbers (shape ({shape[0]},)), "
                                 f"got shape {value.shape}")
            object.__setattr__(self, name, value)


def static_policy(replicas: int, routing: int = 0) -> Policy:
    """A policy that always asks for `replicas` replicas under routing rule `routing`."""
    action = jnp.asarray([replicas, routing], jnp.int32)
    return lambda key, obs, params: action


def _run(env: FleetEnv, params: FleetParams, policy: Policy, key: jax.Array, steps: int) -> dict[str, Any]:
    """The jitted episode behind `fleet_episode_series` (`evaluate.play_episode`, so its keys are
    a graded episode's): per-interval totals, curve rates, start."""
    def record(seen: Seen, memory: Any, step: StepOutput) -> dict[str, jax.Array]:
        totals = step.info["totals"]
        minute = seen.state.start_minute + jnp.floor(seen.t * params.control_interval_s / MINUTE_S).astype(jnp.int32)
        return {"arrived": totals.arrived, "curve_rate": rate_at(params.curve, minute), "serving": totals.serving,
                "warming": totals.warming, "draining": totals.draining,
                "attainment": 1.0 - safe_div(totals.slo_violations, totals.judged),
                "gpu_seconds": totals.gpu_seconds, "cost_usd": totals.cost_usd}

    # play_episode is typed for the serving env; it calls only what FleetEnv has too (reset_env, step_env).
    last, out, _ = evaluate.play_episode(cast(Any, env), cast(Any, params), cast(Any, policy), key, steps, record)
    return {**out, "start_minute": last.state.start_minute}


def fleet_episode_series(env: FleetEnv, params: FleetParams, policy: Policy, key: jax.Array,
                         steps: int | None = None) -> FleetSeries:
    """Play one episode of `policy` (`steps` control intervals, the task's horizon by default)
    and return its `FleetSeries`.

    Raises:
      ValueError: `steps` not an integer in [1, params.max_steps_in_episode].
    """
    horizon = int(params.max_steps_in_episode)
    steps = horizon if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or not 1 <= steps <= horizon:
        raise ValueError(f"steps={steps!r} must be an integer in [1, {horizon}] (control intervals)")
    run = jax.jit(_run, static_argnums=(0, 2, 4))
    out = jax.device_get(run(env, params, policy, key, int(steps)))
    interval_s = float(params.control_interval_s)
    return FleetSeries(
        time_h=np.arange(1, steps + 1) * interval_s / HOUR_S,
        arrival_rate=out["arrived"] / interval_s,
        curve_rate=out["curve_rate"], serving=out["serving"], warming=out["warming"], draining=out["draining"],
        attainment=out["attainment"], gpu_seconds=out["gpu_seconds"], cost_usd=out["cost_usd"],
        start_minute=int(out["start_minute"]), slo_target=float(params.slo_target),
    )


def _draw(axes: list[Any], s: FleetSeries) -> None:
    """The four panels: load, replicas, attainment, cumulative GPU-hours and $."""
    t = s.time_h
    axes[0].plot(t, s.arrival_rate, lw=0.8, alpha=0.7, label="offered (arrivals / interval)")
    axes[0].plot(t, s.curve_rate, lw=0.8, color="black", label="day curve (its minute's mean)")
    axes[0].set_ylabel("load\n[req/s]")
    axes[1].stackplot(t, s.serving, s.warming, s.draining, labels=("serving", "warming", "draining"),
                      colors=("tab:green", "tab:orange", "tab:gray"), alpha=0.8, step="pre")
    axes[1].set_ylabel("replicas")
    axes[2].plot(t, s.attainment, lw=0.8, color="tab:blue", label="per interval")
    axes[2].axhline(s.slo_target, color="tab:red", lw=0.8, ls=":", label=f"target {s.slo_target:g}")
    axes[2].set_ylabel("SLO\nattainment")
    axes[2].set_ylim(max(0.0, float(s.attainment.min()) - 0.05), 1.01)
    axes[3].plot(t, np.cumsum(s.gpu_seconds) / HOUR_S, color="tab:purple", label="GPU-hours")
    axes[3].set_ylabel("cumulative\n[GPU h]")
    dollars = axes[3].twinx()
    dollars.plot(t, np.cumsum(s.cost_usd), color="tab:brown", lw=0.8, ls="--", label="$")
    dollars.set_ylabel("cumulative [$]")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=7)
        ax.set_xlim(0.0, float(t[-1]))
    dollars.legend(loc="lower right", fontsize=7)
    axes[-1].set_xlabel(f"time since the episode began [h] (trace minute {s.start_minute} at 0)")


def plot_fleet_episode(series: FleetSeries, path: str | Path | None = None, title: str = "") -> Any:
    """Draw a fleet episode (module docstring). Returns the matplotlib Figure; with `path`, also
    writes it as a PNG atomically (creating its folder).

    Raises:
      ValueError: `series` is not a FleetSeries.
    """
    if not isinstance(series, FleetSeries):
        raise ValueError(f"series must be a fleet.plot.FleetSeries, got {type(series).__name__}")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 0.8 + 4 * PANEL_HEIGHT_IN), layout="constrained")
    axes = list(figure.subplots(4, 1, sharex=True, squeeze=False)[:, 0])
    _draw(axes, series)
    hours = float(np.sum(series.gpu_seconds)) / HOUR_S
    figure.suptitle(f"{title}{': ' if title else ''}{hours:.1f} GPU-h, ${float(np.sum(series.cost_usd)):.0f}, "
                    f"lowest interval SLO attainment {float(series.attainment.min()):.3f}", fontsize=10)
    if path is not None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI)
        atomic_write_bytes(path, buffer.getvalue())
    return figure


__all__ = ["FleetSeries", "fleet_episode_series", "plot_fleet_episode", "static_policy"]
