"""The current engine (main before issue 41) at the reference's operating points: its errors.

    python experiments/crosscheck/current_engine.py   # ~85 s on 2 cores; rewrites current_engine.json
    python experiments/crosscheck/current_engine.py --keys 2 --steps 120 --drop 20 --json /tmp/cc.json  # smoke

The project side of `crosscheck/README.md`'s "Preliminary comparison", through the package's public API
only, as issue 41 measured it: `ig.make("InferenceGym-Task1-v0", gpu=..., max_steps=660, workload={constant
rate R, every request in class 1, the point's length tables}, server={SLOs out of reach})`, a fixed
`ServingAction(kv_budget=1, spec_length=0, batch_size=cap, prefill_disagg=0, quant_tier=the point's)`,
`lax.scan` over `env.step` for each of 8 keys (`split(key(0), 8)`), the first 60 intervals dropped.
The env exposes per-interval statistics only, so TTFT p50/p99 are the admission-weighted means of each
interval's percentile and TPOT the output-token-weighted mean of `metrics.tpot_s` (not per-request
statistics as the reference's are). Saturation is completions per second at a fixed offered rate about
twice the reference's saturation (`SATURATION_OFFERED`).

The operating points (GPU, batch cap, length tables, quant tier) and the offered rates of the load rows
are read from `reference.json`; `ROWS` names the subset compared. `ISSUE_ROWS` reruns the rates of
issue 41's own table and sets the issue's project column beside them. Nothing here is the new engine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax.profiles import QUANT_TIERS

HERE = pathlib.Path(__file__).resolve().parent
REFERENCE = HERE / "reference.json"
TASK = "InferenceGym-Task1-v0"

# (point name, load fraction of the reference's saturation or "saturation"): the table's rows, in order.
# A point name is "gpu/batch cap/lengths/dtype" in reference.json's terms.
ROWS: list[tuple[str, float | str]] = [
    ("a100-sxm-80gb/64/fixed-512-128/fp16", 0.5),
    ("a100-sxm-80gb/64/fixed-512-128/fp16", 0.9),
    ("a100-sxm-80gb/64/fixed-512-128/fp16", "saturation"),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 0.25),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 0.75),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 0.9),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", "saturation"),
    ("a100-sxm-80gb/256/fixed-512-128/fp16", 0.75),
    ("a100-sxm-80gb/256/fixed-512-128/fp16", "saturation"),
    ("h100-sxm/64/fixed-512-128/fp16", 0.25),
    ("h100-sxm/64/fixed-512-128/fp16", "saturation"),
    ("h100-sxm/256/lognormal-sharegpt/fp16", 0.9),
    ("h100-sxm/256/lognormal-sharegpt/fp16", "saturation"),
]

# Offered rate [req/s] of each saturation row: about 2 x the reference's saturation, so the queue grows.
SATURATION_OFFERED: dict[str, float] = {
    "a100-sxm-80gb/64/fixed-512-128/fp16": 30.0,
    "a100-sxm-80gb/64/lognormal-sharegpt/fp16": 20.0,
    "a100-sxm-80gb/256/fixed-512-128/fp16": 40.0,
    "h100-sxm/64/fixed-512-128/fp16": 70.0,
    "h100-sxm/256/lognormal-sharegpt/fp16": 60.0,
}

# Issue 41's own table (A100, cap 64): (point, offered rate [req/s], the issue's project column:
# TTFT p50 [ms], TTFT p99 [ms], TPOT [ms]; None where the issue gives none).
ISSUE_ROWS: list[tuple[str, float, float | None, float | None, float | None]] = [
    ("a100-sxm-80gb/64/fixed-512-128/fp16", 4.05, 63.7, 88.0, 12.6),
    ("a100-sxm-80gb/64/fixed-512-128/fp16", 8.10, 64.1, 89.0, 16.7),
    ("a100-sxm-80gb/64/fixed-512-128/fp16", 12.15, 65.7, 92.0, 25.1),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 2.35, None, 80.0, None),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 4.69, None, 79.0, None),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 7.04, None, 80.0, None),
    ("a100-sxm-80gb/64/lognormal-sharegpt/fp16", 8.45, None, 164.0, None),
]


def point_name(point: dict[str, Any]) -> str:
    """reference.json point -> "gpu/batch cap/lengths/dtype"."""
    return f"{point['gpu']}/{point['batch_cap']}/{point['lengths']}/{point['dtype']}"


def load_points(path: pathlib.Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The reference's points by name, and the whole file (for its date and command)."""
    reference = json.loads(path.read_text())
    return {point_name(p): p for p in reference["points"]}, reference


def run_engine(project: dict[str, Any], rate: float, keys: int, steps: int, drop: int) -> dict[str, float]:
    """One operating point on the current engine, as the issue measured it.

    Args:
      project: a reference point's `project` block (gpu, quant_tier, batch_size, prompt, output tables).
      rate: offered Poisson rate [req/s], constant, every request in class 1.
      keys: episodes (keys split from `jax.random.key(0)`); steps: 1-s intervals per episode;
      drop: leading intervals left out of every statistic (warm-up).

    Returns: completions [req/s], output tokens [tokens/s], TTFT p50/p99 [s] (admission-weighted means of
      the per-interval percentiles), TPOT [s/token] (output-token-weighted), the queue at the end [requests,
      mean over keys], timeouts [req/s], all over the kept intervals of every key.
    """
    env, params = ig.make(TASK, gpu=project["gpu"], max_steps=steps,
                          workload={"schedule": "constant", "base_rate": rate, "class_mix": [0.0, 1.0, 0.0],
                                    "prompt": project["prompt"], "output": project["output"]},
                          server={"ttft_slo_s": [1000.0] * 3, "tpot_slo_s": [10.0] * 3})
    action = ig.ServingAction(kv_budget=jnp.float32(1.0), spec_length=jnp.float32(0),
                              batch_size=jnp.float32(project["batch_size"]), prefill_disagg=jnp.float32(0),
                              quant_tier=jnp.float32(QUANT_TIERS.index(project["quant_tier"])))

    def episode(key: jax.Array) -> tuple[jax.Array, ...]:
        """One episode's per-interval metrics, each (steps,) in the metric's unit."""
        k0, k1 = jax.random.split(key)
        _, state = env.reset(k0, params)

        def body(state: Any, k: jax.Array) -> tuple[Any, tuple[jax.Array, ...]]:
            """One 1-s interval under the fixed action."""
            _, state, _, _, _, info = env.step(k, state, action, params)
            m = info["metrics"]
            return state, (m.ttft_p50_s, m.ttft_p99_s, m.tpot_s, m.output_tokens, m.admitted, m.completed,
                           m.queue_depth, m.timeouts)

        _, out = jax.lax.scan(body, state, jax.random.split(k1, steps))
        return out

    out = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(0), keys))
    p50, p99, tpot, tok, adm, comp, queue, timeouts = [np.asarray(x)[:, drop:] for x in out]
    weight = adm.sum()
    return {"requests_per_s": float(comp.mean()), "output_tokens_per_s": float(tok.mean()),
            "ttft_p50_s": float((p50 * adm).sum() / weight), "ttft_p99_s": float((p99 * adm).sum() / weight),
            "tpot_mean_s": float((tpot * tok).sum() / tok.sum()), "queue_end": float(queue[:, -1].mean()),
            "timeouts_per_s": float(timeouts.mean())}


def rel(project: float, reference: float) -> float:
    """Relative error of the project against the reference, project / reference - 1 [fraction]."""
    return project / reference - 1.0


def reference_side(point: dict[str, Any], load: float | str) -> tuple[float, dict[str, float]]:
    """The offered rate [req/s] of a row and the reference's values there (s, s/token, req/s)."""
    sat = point["saturation"]
    if load == "saturation":
        return SATURATION_OFFERED[point_name(point)], {
            "requests_per_s": sat["requests_per_s"], "output_tokens_per_s": sat["output_tokens_per_s"],
            "tpot_mean_s": sat["tpot_mean_s"], "closed_loop_requests_per_s": sat["closed_loop"]["requests_per_s"]}
    (row,) = [r for r in point["rates"] if r["load_fraction"] == load]
    keys = ("requests_per_s", "output_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_mean_s")
    return row["rate"], {k: row[k] for k in keys}


def compare_row(point: dict[str, Any], load: float | str, settings: dict[str, int]) -> dict[str, Any]:
    """One row of the table: both sides and the project's relative errors."""
    rate, ref = reference_side(point, load)
    start = time.time()
    proj = run_engine(point["project"], rate, **settings)
    errors = {k: rel(proj[k], v) for k, v in ref.items() if k in proj}
    if load == "saturation":
        errors = {k: errors[k] for k in ("requests_per_s", "tpot_mean_s")}
        errors["requests_per_s_vs_closed_loop"] = rel(proj["requests_per_s"], ref["closed_loop_requests_per_s"])
    else:
        errors = {k: errors[k] for k in ("ttft_p50_s", "ttft_p99_s", "tpot_mean_s")}
    return {"point": point_name(point), "load": load, "offered_rate": rate, "reference": ref,
            "project": proj, "relative_error": errors, "wall_s": round(time.time() - start, 1)}


def pct(x: float) -> str:
    """A relative error as a signed percentage: one decimal below 10 %, none above."""
    return f"{100 * x:+.1f} %" if abs(x) < 0.095 else f"{100 * x:+.0f} %"


def short_name(name: str) -> str:
    """'a100-sxm-80gb/64/fixed-512-128/fp16' -> 'A100 64 fixed' (the dtype appended where it is not fp16)."""
    gpu, cap, lengths, dtype = name.split("/")
    return f"{gpu.split('-')[0].upper()} {cap} {lengths.split('-')[0]}" + ("" if dtype == "fp16" else f" {dtype}")


def label(row: dict[str, Any]) -> str:
    """'A100 64 fixed, 50 %' or 'A100 64 fixed, saturation'."""
    head, load = short_name(row["point"]), row["load"]
    return f"{head}, {load}" if load == "saturation" else f"{head}, {100 * load:.0f} %"


def cell(row: dict[str, Any], key: str, scale: float, fmt: str) -> str:
    """'reference -> project (error)' of one quantity, in the table's unit (`scale` x SI)."""
    if key not in row["relative_error"]:
        return ""
    ref, proj = row["reference"][key] * scale, row["project"][key] * scale
    return f"{ref:{fmt}} -> {proj:{fmt}} ({pct(row['relative_error'][key])})"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The README's table: reference -> project, the project's relative error in brackets."""
    lines = ["| point | offered req/s | TTFT p50 ms | TTFT p99 ms | TPOT ms | throughput req/s |",
             "|---|---:|---|---|---|---|"]
    for row in rows:
        saturated = row["load"] == "saturation"
        offered = f"{row['offered_rate']:g}" if saturated else f"{row['offered_rate']:#.4g}"
        throughput = ""
        if saturated:
            err = row["relative_error"]
            throughput = (f"{row['reference']['requests_per_s']:.2f} -> {row['project']['requests_per_s']:.2f} "
                          f"({pct(err['requests_per_s'])}; {pct(err['requests_per_s_vs_closed_loop'])} against "
                          f"the closed loop's {row['reference']['closed_loop_requests_per_s']:.2f})")
        cells = [label(row), offered, cell(row, "ttft_p50_s", 1e3, ".0f"), cell(row, "ttft_p99_s", 1e3, ".0f"),
                 cell(row, "tpot_mean_s", 1e3, ".1f"), throughput]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def issue_rows(points: dict[str, dict[str, Any]], settings: dict[str, int]) -> list[dict[str, Any]]:
    """The rates of issue 41's table rerun, beside the issue's project column (ms)."""
    out = []
    for name, rate, p50_ms, p99_ms, tpot_ms in ISSUE_ROWS:
        proj = run_engine(points[name]["project"], rate, **settings)
        out.append({"point": name, "offered_rate": rate, "project": proj,
                    "issue_project_ms": {"ttft_p50": p50_ms, "ttft_p99": p99_ms, "tpot": tpot_ms}})
    return out


def issue_table(rows: list[dict[str, Any]]) -> str:
    """Issue 41's rates: the project column the issue gave / the current engine now (ms)."""
    lines = ["| point | offered req/s | TTFT p50 ms, issue / now | TTFT p99 ms, issue / now | TPOT ms, issue / now |",
             "|---|---:|---|---|---|"]
    for row in rows:
        cells = [short_name(row["point"]), f"{row['offered_rate']:.2f}"]
        for key, si in (("ttft_p50", "ttft_p50_s"), ("ttft_p99", "ttft_p99_s"), ("tpot", "tpot_mean_s")):
            issue = row["issue_project_ms"][key]
            cells.append("" if issue is None else f"{issue:g} / {1e3 * row['project'][si]:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def settings_block(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the project side was run with, for the JSON."""
    return {
        "task": TASK, "keys": args.keys, "key_split_from": "jax.random.key(0)", "intervals": args.steps,
        "interval_s": 1.0, "dropped_intervals": args.drop,
        "workload": {"schedule": "constant", "class_mix": [0.0, 1.0, 0.0], "prompt/output": "the point's project"},
        "server": {"ttft_slo_s": [1000.0] * 3, "tpot_slo_s": [10.0] * 3},
        "action": {"kv_budget": 1.0, "spec_length": 0, "batch_size": "the point's cap", "prefill_disagg": 0,
                   "quant_tier": "the point's (fp16 = 0)"},
        "ttft": "admission-weighted mean over kept intervals and keys of each interval's percentile",
        "tpot": "output-token-weighted mean of metrics.tpot_s (wall time per token of the running pool)",
        "saturation": "completions per second at SATURATION_OFFERED (about 2 x the reference's saturation)",
        "saturation_offered_req_per_s": SATURATION_OFFERED,
        "relative_error": "project / reference - 1",
        "engine": "the current engine (main before issue 41), not the new one",
    }


def main() -> None:
    """Run the rows, write the JSON, print the two tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=8, help="episodes per row")
    parser.add_argument("--steps", type=int, default=660, help="1-s intervals per episode")
    parser.add_argument("--drop", type=int, default=60, help="leading intervals dropped")
    parser.add_argument("--json", type=pathlib.Path, default=HERE / "current_engine.json", help="output file")
    args = parser.parse_args()
    start, cpu_start = time.time(), time.process_time()
    points, reference = load_points(REFERENCE)
    settings = {"keys": args.keys, "steps": args.steps, "drop": args.drop}
    rows = []
    for name, load in ROWS:
        rows.append(compare_row(points[name], load, settings))
        print(f"{label(rows[-1])}: {rows[-1]['wall_s']} s", file=sys.stderr, flush=True)
    issue = issue_rows(points, settings)
    result = {"generated_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "command": "python " + " ".join(sys.argv), "jax": jax.__version__,
              "reference": {"file": "experiments/crosscheck/reference.json",
                            "generated_utc": reference["generated_utc"]},
              "settings": settings_block(args), "rows": rows, "issue_rows": issue,
              "wall_s": round(time.time() - start, 1), "cpu_s": round(time.process_time() - cpu_start, 1)}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown_table(rows))
    print()
    print(issue_table(issue))


if __name__ == "__main__":
    main()
