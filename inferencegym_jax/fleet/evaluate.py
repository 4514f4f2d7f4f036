"""Key-seeded evaluation of fleet controllers (issue 42): episodes, the graded score, the table.

    episodes = run_fleet_episodes(env, params, controller, evaluation_key(0), 25)
    table, results = graded_table(env, params, fleet_baselines(env, params), evaluation_key(0), 25)

A controller is a `protocols.Controller` (init / act / update; the HPA's stabilisation window is
its memory) or a plain policy `(key, obs, params) -> action`, wrapped by `evaluate.as_controller`.
An action is int32 (2,) [target replicas, routing rule] (`fleet.env.FleetEnv.step`).

Keys and windows: episode i runs with `evaluate.episode_keys(key, i, 1)` (fold_in(key, i)) split
as `evaluate.stream_episode_keys` splits it, and, with `cover_starts` (the default), on the
window `params.curve.starts[i % K]` of the K windows of the split: episodes 0..K-1 replay each
window once, in order, so a result does not depend on the batch, and held-out days (`make_fleet(id,
split="heldout")`) are replayed whole rather than drawn at random.

Grading: an episode's cost is J = -return (`fleet.env`: GPU-time fraction + slo_weight x missed
fraction). Its score is (J_zero - J) / (J_zero - J_one), paired on the same episode (same key,
same window): 0 is the `zero` reference (static provisioning for the peak), 1 the `one` (the
clairvoyant oracle, a bound, not a causal policy).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from inferencegym_jax import evaluate
from inferencegym_jax.fleet.env import FleetEnv, FleetParams
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.protocols import Controller, Seen, StepOutput

SECONDS_PER_HOUR = 3600.0  # [s/h]
# Student's t two-sided 95 % quantile is used for the paired CIs (scipy.stats.t.ppf(0.975, n - 1)).
CI_LEVEL = 0.95


@struct.dataclass
class FleetEpisodes:
    """A batch of N fleet episodes of T control intervals (jax arrays; leading axis episodes).

    Per episode, float32 (N,):
      gpu_hours: [GPU h] held by serving, warming and draining replicas over the episode.
      slo_attainment: 1 - missed / judged over the episode (1 when nothing was judged).
      missed: [requests] that missed an SLO or were refused or dropped.
      judged: [requests] whose SLO outcome was decided.
      arrived: [requests] that arrived.
      lost: [requests] refused (no replica serving) or dropped by a retired replica.
      cost_usd: [$] GPU cost.
      episode_cost: J = -(sum of the rewards) (`fleet.env`: GPU-time fraction + slo_weight x missed
        fraction); lower is better.
      start_minute: int32 (N,) [min], the trace minute the episode began at.
    Per interval, float32 (N, T):
      arrival_rate: [req/s] arrivals over the interval.
      target: [replicas] the target the controller applied.
      serving, warming: [replicas] at the end of the interval.
      attainment: 1 - violations / judged in the interval (1 when none was judged).
      gpu_seconds: [GPU s] in the interval.
      curve_rate: [req/s] the day curve's mean rate of the interval's first minute.
    """

    gpu_hours: jax.Array
    slo_attainment: jax.Array
    missed: jax.Array
    judged: jax.Array
    arrived: jax.Array
    lost: jax.Array
    cost_usd: jax.Array
    episode_cost: jax.Array
    start_minute: jax.Array
    arrival_rate: jax.Array
    target: jax.Array
    serving: jax.Array
    warming: jax.Array
    attainment: jax.Array
    gpu_seconds: jax.Array
    curve_rate: jax.Array


def window_params(params: FleetParams, index: jax.Array) -> FleetParams:
    """`params` whose episodes all start at window `index % K` of `params.curve.starts` (K,)."""
    starts = params.curve.starts
    one = jax.lax.dynamic_slice(starts, (jnp.mod(index, starts.shape[0]),), (1,))
    return dataclasses.replace(params, curve=dataclasses.replace(params.curve, starts=one))


def _record(seen: Seen, step: StepOutput, params: FleetParams) -> dict[str, jax.Array]:
    """One interval's record (float32 () leaves)."""
    tot = step.info["totals"]
    control_min = params.control_interval_s / 60.0
    minute = seen.state.start_minute + jnp.floor(seen.t.astype(jnp.float32) * control_min).astype(jnp.int32)
    return {
        "reward": step.reward, "arrived": tot.arrived, "lost": tot.lost, "judged": tot.judged,
        "missed": tot.slo_violations, "gpu_seconds": tot.gpu_seconds, "cost_usd": tot.cost_usd,
        "serving": tot.serving, "warming": tot.warming,
        "target": step.info["applied_action"][0].astype(jnp.float32),
        "curve_rate": params.curve.rate[jnp.clip(minute, 0, params.curve.rate.shape[0] - 1)],
    }


def play_fleet_episode(env: FleetEnv, params: FleetParams, controller: Any, key: jax.Array, num_steps: int
                       ) -> tuple[Seen, dict[str, jax.Array]]:
    """One fleet episode of `num_steps` intervals of `controller` (a Controller or a policy) from a
    reset with `key`: the package's one episode loop, `evaluate.play_episode` ((k_reset, k_env,
    k_policy) = split(key, 3), interval t steps with fold_in(k_env, t) and asks the controller with
    fold_in(k_policy, t)), recording `_record` of each interval.

    Returns (what the controller would be shown after the last interval, the per-interval records:
    a dict of float32 (T,) arrays, `_record`'s keys)."""
    # play_episode is typed for the serving env; it calls only what FleetEnv has too (reset_env, step_env).
    last, records, _ = evaluate.play_episode(cast(Any, env), cast(Any, params), controller, key, num_steps,
                                             lambda seen, memory, step: _record(seen, step, params))
    return last, records


def _episodes_of(records: dict[str, jax.Array], start_minute: jax.Array, interval_s: jax.Array) -> FleetEpisodes:
    """FleetEpisodes of one episode's records (T,) (vmapped over episodes by the caller)."""
    s = {k: jnp.sum(v, axis=-1) for k, v in records.items()}
    return FleetEpisodes(
        gpu_hours=s["gpu_seconds"] / SECONDS_PER_HOUR,
        slo_attainment=1.0 - safe_div(s["missed"], s["judged"]),
        missed=s["missed"], judged=s["judged"], arrived=s["arrived"], lost=s["lost"], cost_usd=s["cost_usd"],
        episode_cost=-s["reward"], start_minute=start_minute,
        arrival_rate=records["arrived"] / interval_s, target=records["target"], serving=records["serving"],
        warming=records["warming"], attainment=1.0 - safe_div(records["missed"], records["judged"]),
        gpu_seconds=records["gpu_seconds"], curve_rate=records["curve_rate"],
    )


def one_episode(env: FleetEnv, params: FleetParams, controller: Any, key: jax.Array, index: jax.Array,
                num_steps: int, cover_starts: bool) -> FleetEpisodes:
    """Episode `index` (window starts[index % K] with `cover_starts`) of `controller` with `key`."""
    p = window_params(params, index) if cover_starts else params
    last, records = play_fleet_episode(env, p, controller, key, num_steps)
    return _episodes_of(records, last.state.start_minute, p.control_interval_s)


@functools.partial(jax.jit, static_argnames=("env", "num_steps", "cover_starts"))
def _run_batch(env: FleetEnv, params: FleetParams, controller: Any, keys: jax.Array, first: jax.Array,
               num_steps: int, cover_starts: bool) -> FleetEpisodes:
    index = first + jnp.arange(keys.shape[0])
    return jax.vmap(lambda k, i: one_episode(env, params, controller, k, i, num_steps, cover_starts))(keys, index)


def run_fleet_episodes(env: FleetEnv, params: FleetParams, controller: Controller | Any, key: jax.Array,
                       num_episodes: int, *, num_steps: int | None = None, batch_size: int | None = None,
                       cover_starts: bool = True) -> FleetEpisodes:
    """Episodes 0..num_episodes-1 of `controller`, episode i from fold_in(key, i) on window
    starts[i % K] (`cover_starts`; else the window its reset key draws): their FleetEpisodes.

    Args:
      num_steps: control intervals per episode (default: the task's horizon).
      batch_size: episodes per jitted call (default: all); batches are padded to a multiple of
        `evaluate.BATCH_MULTIPLE` episodes, so a result does not depend on the batch size.

    Raises:
      ValueError: num_episodes, num_steps or batch_size below 1.
    """
    for name, value in (("num_episodes", num_episodes), ("num_steps", num_steps), ("batch_size", batch_size)):
        if value is not None and int(value) < 1:
            raise ValueError(f"{name}={value} must be >= 1")
    steps = int(num_steps or int(params.max_steps_in_episode))
    controller = evaluate.as_controller(controller)

    def run_batch(keys: jax.Array, start: int, count: int) -> FleetEpisodes:
        return _run_batch(env, params, controller, keys, jnp.int32(start), steps, cover_starts)

    return evaluate.in_batches(run_batch, key, int(num_episodes), int(batch_size or num_episodes))


# ----------------------------------------------------------------------------- grading


def grade(results: dict[str, FleetEpisodes], zero: str = "static_for_peak", one: str = "oracle"
          ) -> dict[str, np.ndarray]:
    """Per-episode scores (J_zero - J) / (J_zero - J_one), float64 (N,) per policy, paired by
    episode (every entry of `results` must come from the same keys and windows).

    Raises:
      ValueError: `zero` or `one` not in `results`, or episode counts that differ.
    """
    for name in (zero, one):
        if name not in results:
            raise ValueError(f"reference {name!r} is not one of the results {sorted(results)}")
    j0 = np.asarray(results[zero].episode_cost, np.float64)
    j1 = np.asarray(results[one].episode_cost, np.float64)
    gap = j0 - j1
    gap = np.where(np.abs(gap) > 1e-12, gap, np.nan)  # an undefined score where the references tie
    out = {}
    for name, r in results.items():
        j = np.asarray(r.episode_cost, np.float64)
        if j.shape != j0.shape:
            raise ValueError(f"results[{name!r}] has {j.shape[0]} episodes; {zero!r} has {j0.shape[0]}")
        out[name] = (j0 - j) / gap
    return out


def paired_ci95(a: Any, b: Any) -> tuple[float, float]:
    """(mean of a - b, half-width of its Student-t 95 % CI) over paired episodes; NaN half-width
    with fewer than 2 pairs."""
    from scipy import stats

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return float(np.mean(d)) if d.size else float("nan"), float("nan")
    half = stats.t.ppf(0.5 + CI_LEVEL / 2, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean()), float(half)


def table_of(results: dict[str, FleetEpisodes], scores: dict[str, np.ndarray],
             references: tuple[str, ...] = ("static_for_peak", "hpa")) -> Any:
    """The graded table (pandas, one row per policy): score mean and 95 % CI (Student t over
    episodes), GPU-hours, SLO attainment, cost [$], J, and for each reference present the paired
    difference in GPU-hours and score with its 95 % CI (`paired_ci95`)."""
    import pandas as pd

    rows = []
    for name, r in results.items():
        s = scores[name]
        mean, half = paired_ci95(s, np.zeros_like(s))
        row = {"policy": name + (" (clairvoyant bound)" if name == "oracle" else ""),
               "episodes": int(np.size(s)), "score": mean, "score_ci95": half,
               "gpu_hours": float(np.mean(r.gpu_hours)), "slo_attainment": float(np.mean(r.slo_attainment)),
               "min_attainment": float(np.min(r.slo_attainment)), "cost_usd": float(np.mean(r.cost_usd)),
               "J": float(np.mean(r.episode_cost))}
        for ref in references:
            if ref in results:
                row[f"d_gpu_h_vs_{ref}"], row[f"d_gpu_h_vs_{ref}_ci95"] = paired_ci95(
                    r.gpu_hours, results[ref].gpu_hours)
                row[f"d_score_vs_{ref}"], row[f"d_score_vs_{ref}_ci95"] = paired_ci95(s, scores[ref])
        rows.append(row)
    return pd.DataFrame(rows).set_index("policy")


def graded_table(env: FleetEnv, params: FleetParams, controllers: dict[str, Any], key: jax.Array,
                 num_episodes: int) -> tuple[Any, dict[str, FleetEpisodes]]:
    """Run every controller on episodes 0..num_episodes-1 of `key` (the same keys and windows for
    all) and grade them between "static_for_peak" (0) and "oracle" (1): (the `table_of` DataFrame,
    {name: FleetEpisodes}).

    Raises:
      ValueError: `controllers` without "static_for_peak" or "oracle".
    """
    for ref in ("static_for_peak", "oracle"):
        if ref not in controllers:
            raise ValueError(f"controllers must include {ref!r} (the grade's reference); got {sorted(controllers)}")
    results = {name: run_fleet_episodes(env, params, c, key, num_episodes) for name, c in controllers.items()}
    return table_of(results, grade(results)), results
