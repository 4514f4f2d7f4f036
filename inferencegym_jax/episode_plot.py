"""One episode of a policy over time: per-interval arrays in physical units, and their figure.

    env, params = ig.make("InferenceGym-Task2-v0")
    episode = collect_episode(env, params, baselines.heuristic_policy(env), "InferenceGym-Task2-v0", "heuristic")
    figure = plot_episode(episode, params, "episode.png")   # a matplotlib Figure, also written as PNG

`collect_episode` runs episode 0 of `evaluate.run_episodes(env, params, policy,
evaluation_key(seed), 1)`, the jitted, vmapped scan of `env.step_env` that `evaluate.evaluate`
and `inferencegym eval --eval-seed SEED` run (padded to `evaluate.BATCH_MULTIPLE` episodes), so
its numbers are bit-identical to episode 0 of their evaluation, and its score is that
episode's grader score. A policy acts on the env it is given (a trained policy on its action
wrapper); the knobs drawn are those the serving env applied (`info["applied_action"]`).

`episode_series` turns the record into named (T,) arrays whose names carry their units, and
`episode_limits` gives the task's SLOs and limits they are drawn against. The figure is drawn
on a `matplotlib.figure.Figure` without pyplot (no global state, any backend, also inline in a
notebook) and written with `files.atomic_write_bytes`.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import jax
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.actions import BATCH_SIZES, KNOBS
from inferencegym_jax.env import EnvParams
from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.profiles import QUANT_TIERS, SPEC_LENGTHS

# Each knob's panel label, with its unit, in `actions.KNOBS` order.
KNOB_LABELS: dict[str, str] = {
    "kv_budget": "KV budget\n[fraction of free HBM]",
    "spec_length": "draft length\n[tokens / step]",
    "batch_size": "batch size\n[sequences]",
    "prefill_disagg": "prefill on a\n2nd GPU",
    "quant_tier": "weight\nprecision",
}
# Unit of every array `episode_series` returns.
SERIES_UNITS: dict[str, str] = {
    "time_s": "s",
    **{name: unit for name, unit in zip(KNOBS, ("fraction", "tokens", "sequences", "off/on", "tier"))},
    "queue_depth": "requests",
    "ttft_p50_s": "s",
    "ttft_p99_s": "s",
    "tpot_ms": "ms",
    "tokens_per_s": "tokens/s",
    "offered_tokens_per_s": "tokens/s",
    "memory_gb": "GB",
    "cost_usd": "$",
    "budget_usd": "$",
    "stall_s": "s",
    "oom": "0/1",
    "reward": "reward",
}
CLASS_NAMES = ("class 0", "class 1", "class 2")
PANEL_HEIGHT_IN = 1.45  # [in] height of one panel of the taller column


@dataclasses.dataclass(frozen=True)
class Episode:
    """One evaluation episode of a policy (host-side numpy).

    Attributes:
      trajectory: `evaluate.Trajectory` of the episode, leaves (T,) (metrics.class_share (T, 3),
        clipped (T, 5)), T = the task horizon in intervals.
      score: the episode's grader score, in [0, 1].
      breakdown: the grader's components, each in [0, 1].
      task_id: the registered id it was graded as.
      policy_name: the policy's name, for titles.
      seed: the evaluation seed; the episode is fold_in(evaluation_key(seed), 0).
    """

    trajectory: evaluate.Trajectory
    score: float
    breakdown: dict[str, float]
    task_id: str
    policy_name: str
    seed: int


def collect_episode(env: Any, params: EnvParams, policy: evaluate.Policy, task_id: str, policy_name: str,
                    seed: int = 0) -> Episode:
    """Episode 0 of evaluation_key(seed) under `policy` on `env` (a serving env or a wrapper of
    one), graded for `task_id`. One compiled program per env, policy structure and horizon."""
    trajectory = evaluate.run_episodes(env, params, policy, evaluate.evaluation_key(seed), 1)
    graded = evaluate.grade_trajectory(trajectory, params, task_id)
    first = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], trajectory)
    return Episode(
        trajectory=first,
        score=float(graded.scores[0]),
        breakdown={name: float(value[0]) for name, value in graded.breakdown.items()},
        task_id=task_id,
        policy_name=policy_name,
        seed=seed,
    )


def episode_series(episode: Episode, params: EnvParams) -> dict[str, np.ndarray]:
    """The plotted quantities, float64 (T,) each, in the units of SERIES_UNITS.

    time_s is the end of each interval; the knobs are those applied in the interval;
    offered_tokens_per_s is the output tokens of the requests that arrived, per second;
    memory_gb is in use on the decode GPU; cost_usd is the cumulative spend and budget_usd the
    cumulative spend the task's budget allows for the output tokens produced so far.
    """
    traj, dt = episode.trajectory, float(params.server.dt_s)
    m = traj.metrics
    steps = np.arange(1, np.shape(traj.reward)[0] + 1, dtype=np.float64)
    tokens_so_far = np.cumsum(np.asarray(m.output_tokens, np.float64))
    out = {
        "time_s": steps * dt,
        **{name: np.asarray(getattr(traj.action, name), np.float64) for name in KNOBS},
        "queue_depth": m.queue_depth,
        "ttft_p50_s": m.ttft_p50_s,
        "ttft_p99_s": m.ttft_p99_s,
        "tpot_ms": 1e3 * np.asarray(m.tpot_s, np.float64),
        "tokens_per_s": m.tokens_per_s,
        "offered_tokens_per_s": np.asarray(traj.offered_tokens, np.float64) / dt,
        "memory_gb": np.asarray(m.gpu_memory_bytes, np.float64) / 1e9,
        "cost_usd": np.cumsum(np.asarray(m.cost_usd, np.float64)),
        "budget_usd": float(params.reward.cost_budget_per_1k) * tokens_so_far / 1e3,
        "stall_s": m.stall_s,
        "oom": m.oom,
        "reward": traj.reward,
    }
    return {name: np.asarray(value, np.float64) for name, value in out.items()}


def episode_limits(params: EnvParams) -> dict[str, Any]:
    """What the series are drawn against (host floats).

    Returns ttft_slo_s: {class name: [s]} for the classes with traffic (class_mix or
    burst_class_mix > 0);
    tpot_slo_ms: {class name: [ms]}, the same classes; memory_limit_gb [GB]; dt_s [s];
    active_knobs, the names of the knobs the task lets the policy set.
    """
    mix = np.maximum(np.asarray(params.workload.class_mix), np.asarray(params.workload.burst_class_mix))
    slos = np.asarray(params.server.ttft_slo_s)
    return {
        "ttft_slo_s": {CLASS_NAMES[c]: float(slos[c]) for c in range(len(slos)) if mix[c] > 0},
        "tpot_slo_ms": {CLASS_NAMES[c]: 1e3 * float(np.asarray(params.server.tpot_slo_s)[c])
                        for c in range(len(slos)) if mix[c] > 0},
        "memory_limit_gb": float(params.server.memory_limit_bytes) / 1e9,
        "dt_s": float(params.server.dt_s),
        "active_knobs": [name for name, on in zip(KNOBS, params.active_knobs) if on],
    }


# ----------------------------------------------------------------------------- drawing


def _step(ax: Any, t: np.ndarray, y: np.ndarray, **kwargs: Any) -> None:
    """A per-interval value as a step over its interval (t is each interval's end)."""
    ax.step(t, y, where="pre", lw=1.2, **kwargs)


def _legend(ax: Any) -> None:
    """The panel's legend, outside it on the right (it never hides a curve)."""
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, handlelength=1.8)


def _batch_axis(ax: Any, batch: np.ndarray) -> None:
    """Log2 axis labelled with the batch sizes played (up to 5 of them), else with the powers of
    2 in their range (every other one beyond 6)."""
    from matplotlib.ticker import NullLocator

    used = np.unique(batch)
    powers = [b for b in BATCH_SIZES if b & (b - 1) == 0 and used[0] <= b <= used[-1]]
    ticks = used if used.size <= 5 else powers if len(powers) <= 6 else powers[::2]
    ax.set_yscale("log", base=2)
    ax.set_yticks(ticks, [f"{b:.0f}" for b in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(used[0] / 1.6, used[-1] * 1.6)


def _draw_knob(ax: Any, name: str, s: dict[str, np.ndarray]) -> None:
    """One knob in force over time, with its grid's labels where they are names."""
    _step(ax, s["time_s"], s[name], color="tab:blue")
    ax.set_ylabel(KNOB_LABELS[name])
    if name == "batch_size":
        _batch_axis(ax, s[name])
    elif name == "kv_budget":
        ax.set_ylim(0.0, 1.08)
    elif name == "spec_length":
        ax.set_yticks(SPEC_LENGTHS)
        ax.set_ylim(-0.5, max(SPEC_LENGTHS) + 0.5)
    elif name == "prefill_disagg":
        ax.set_yticks([0, 1], ["off", "on"])
        ax.set_ylim(-0.3, 1.3)
    elif name == "quant_tier":
        ax.set_yticks(range(len(QUANT_TIERS)), [t.upper() for t in QUANT_TIERS])
        ax.set_ylim(-0.4, len(QUANT_TIERS) - 0.6)


def _draw_queue(ax: Any, s: dict[str, np.ndarray]) -> None:
    _step(ax, s["time_s"], s["queue_depth"], color="tab:purple")
    ax.set_ylabel("queue depth\n[requests]")
    ax.set_ylim(bottom=0)


def _draw_ttft(ax: Any, s: dict[str, np.ndarray], limits: dict[str, Any]) -> None:
    """TTFT p50 and p99 on a log scale, each traffic class's SLO as a dashed line."""
    t = s["time_s"]
    _step(ax, t, s["ttft_p99_s"], color="tab:red", label="p99")
    _step(ax, t, s["ttft_p50_s"], color="tab:orange", label="p50")
    for (name, slo), style in zip(limits["ttft_slo_s"].items(), ("--", "-.", ":")):
        ax.axhline(slo, color="k", ls=style, lw=0.9, label=f"SLO {name} ({slo:g} s)")
    ax.set_yscale("log")
    positive = np.concatenate([s["ttft_p50_s"], s["ttft_p99_s"], list(limits["ttft_slo_s"].values())])
    positive = positive[positive > 0]
    ax.set_ylim(positive.min() / 1.5 if positive.size else 1e-2, positive.max() * 1.5 if positive.size else 10)
    ax.set_ylabel("TTFT [s]")
    _legend(ax)


def _draw_tpot(ax: Any, s: dict[str, np.ndarray], limits: dict[str, Any]) -> None:
    """TPOT, each traffic class's SLO as a dashed line (one line where the classes share it)."""
    _step(ax, s["time_s"], s["tpot_ms"], color="tab:green", label="TPOT")
    slos: dict[float, list[str]] = {}
    for name, slo in limits["tpot_slo_ms"].items():
        slos.setdefault(slo, []).append(name)
    for (slo, names), style in zip(slos.items(), ("--", "-.", ":")):
        who = "" if len(slos) == 1 else f"{', '.join(names)} "
        ax.axhline(slo, color="k", ls=style, lw=0.9, label=f"SLO {who}({slo:g} ms)")
    ax.set_ylabel("TPOT [ms]")
    ax.set_ylim(0, max([float(np.percentile(s["tpot_ms"], 99)), *slos]) * 1.25)
    _legend(ax)


def _draw_tokens(ax: Any, s: dict[str, np.ndarray]) -> None:
    t = s["time_s"]
    _step(ax, t, s["offered_tokens_per_s"], color="0.6", label="offered\n(arrivals' output)")
    _step(ax, t, s["tokens_per_s"], color="tab:blue", label="generated")
    ax.set_ylabel("output\n[tokens/s]")
    ax.set_ylim(bottom=0)
    _legend(ax)


def _draw_memory(ax: Any, s: dict[str, np.ndarray], limits: dict[str, Any]) -> None:
    """Memory in use against the limit; out-of-memory restarts as red marks."""
    t = s["time_s"]
    _step(ax, t, s["memory_gb"], color="tab:brown", label="in use")
    ax.axhline(limits["memory_limit_gb"], color="k", ls="--", lw=0.9, label=f"limit ({limits['memory_limit_gb']:g} GB)")
    ooms = s["oom"] > 0
    if ooms.any():
        ax.plot(t[ooms], s["memory_gb"][ooms], "rv", ms=5, label="out of memory")
    ax.set_ylabel("GPU memory\n[GB]")
    ax.set_ylim(0, max(s["memory_gb"].max(), limits["memory_limit_gb"]) * 1.3)
    _legend(ax)


def _draw_cost(ax: Any, s: dict[str, np.ndarray]) -> None:
    t = s["time_s"]
    ax.plot(t, s["cost_usd"], color="tab:olive", lw=1.2, label="spent")
    ax.plot(t, s["budget_usd"], color="k", ls="--", lw=0.9, label="budget for the\ntokens generated")
    ax.set_ylabel("cumulative\ncost [$]")
    ax.set_ylim(bottom=0)
    _legend(ax)


def _shade_stalls(axes: list[Any], s: dict[str, np.ndarray], dt: float) -> None:
    """Grey spans over the intervals in which the engine stalled (weight reload or restart)."""
    stalled = s["stall_s"] > 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], stalled.astype(int), [0]])))
    for start, stop in zip(edges[::2], edges[1::2]):
        for ax in axes:
            ax.axvspan(s["time_s"][start] - dt, s["time_s"][stop - 1], color="0.85", lw=0, zorder=0)


def _title(episode: Episode, s: dict[str, np.ndarray], limits: dict[str, Any]) -> str:
    breakdown = ", ".join(f"{k} {v:.2f}" for k, v in episode.breakdown.items())
    stalls = "; grey: engine stalled (weight reload or restart)" if np.any(s["stall_s"] > 0) else ""
    return (f"{episode.task_id}: {episode.policy_name}, held-out episode 0 of evaluation_key({episode.seed})\n"
            f"score {episode.score:.3f} ({breakdown}); mean reward {s['reward'].mean():+.3f} per interval{stalls}")


def plot_episode(episode: Episode, params: EnvParams, path: str | Path | None = None) -> Any:
    """Draw the episode: left the knobs in force and the queue, right TTFT, TPOT, tokens/s,
    memory and cost, over time. Returns the matplotlib Figure; with `path`, also writes it as a
    PNG (atomically)."""
    from matplotlib.figure import Figure

    s, limits = episode_series(episode, params), episode_limits(params)
    knobs = limits["active_knobs"]
    rows = max(len(knobs) + 1, 5)
    figure = Figure(figsize=(12, 1.0 + PANEL_HEIGHT_IN * rows), layout="constrained")
    left_fig, right_fig = figure.subfigures(1, 2, wspace=0.02, squeeze=False)[0]
    left = list(left_fig.subplots(len(knobs) + 1, 1, sharex=True, squeeze=False)[:, 0])
    right = list(right_fig.subplots(5, 1, sharex=True, squeeze=False)[:, 0])
    for ax, name in zip(left, knobs):
        _draw_knob(ax, name, s)
    _draw_queue(left[-1], s)
    _draw_ttft(right[0], s, limits)
    _draw_tpot(right[1], s, limits)
    _draw_tokens(right[2], s)
    _draw_memory(right[3], s, limits)
    _draw_cost(right[4], s)
    left[0].set_title("knobs in force", fontsize=10)
    right[0].set_title("service", fontsize=10)
    _shade_stalls(left + right, s, limits["dt_s"])
    for ax in left + right:
        ax.grid(alpha=0.3)
        ax.set_xlim(0, s["time_s"][-1])
    for ax in (left[-1], right[-1]):
        ax.set_xlabel(f"time [s] (one control interval = {limits['dt_s']:g} s)")
    figure.suptitle(_title(episode, s, limits), fontsize=10)
    if path is not None:
        write_png(figure, path)
    return figure


def write_png(figure: Any, path: str | Path, dpi: int = 110) -> Path:
    """Write `figure` as a PNG to `path` atomically (creating its folder); returns the path."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())


__all__ = ["Episode", "collect_episode", "episode_limits", "episode_series", "plot_episode",
           "write_png"]
