"""Per-request TPOT ("request" SLO accounting, serving.request_tpot) against the cross-check's references.

    .venv-dev/bin/python experiments/crosscheck/request_tpot.py   # writes experiments/crosscheck/request_tpot.json

vLLM, AISimulate and the exact per-iteration scheduler report TPOT per request, (e2e - TTFT) /
(output - 1), and its 99th percentile over requests (reference.json's and iteration_sim.json's
`tpot_p99_s`). The project's engine judges TPOT either per interval ("completion" accounting) or,
under "request" accounting, on each cohort's mean since its first token: the load test then pools
the finished requests' per-request TPOT (`loadtest.Pooled.tpot_quantiles`). This runs the mixed
engine (the "moments" strata, as docs/crosscheck_mixed.json) with "request" accounting at every
cross-check point's load rows (the reference's offered rates; SECONDS after WARMUP, EPISODES
episodes, seed 0) and sets its TPOT p50 / p99 and mean beside both references' p99 and mean.
The project's completions are memoryless (`engine.emit`), the references' outputs exact (fixed 128
tokens or the lognormal), so the spread of decode lifetimes differs too (issue 41, item 6).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import statistics
from typing import Any

from inferencegym_jax import loadtest
from inferencegym_jax.files import atomic_write_json
from inferencegym_jax.generate import crosscheck
from inferencegym_jax.generate.crosscheck.compare import load_point, reference_rows, rel

ROOT = pathlib.Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "experiments" / "crosscheck" / "reference.json"
EXACT = ROOT / "experiments" / "crosscheck" / "iteration_sim.json"
OUT = ROOT / "experiments" / "crosscheck" / "request_tpot.json"
COMMAND = "python experiments/crosscheck/request_tpot.py"
SECONDS, WARMUP, EPISODES = 600, 60, 256  # the reference's 600 s after 60 s; 256 episodes: p99 over ~1e6 requests
TOLERANCE = 0.25  # issue 41's TTFT-tail target, taken for the TPOT tail too


def point_rows(point: dict[str, Any], exact: dict[str, Any]) -> list[dict[str, Any]]:
    """The project's per-request TPOT at each load row of a point, beside both references'."""
    lp = dataclasses.replace(load_point(point["project"], "mixed"), slo_accounting="request")
    params = loadtest.env_params(lp, WARMUP + SECONDS)
    rows = []
    for ref, sim in zip(reference_rows(point), crosscheck.exact_rows(exact, point)):
        if ref["load_fraction"] == "saturation":
            continue
        pooled = loadtest.simulate(lp, ref["rate"], seconds=SECONDS, warmup=WARMUP, episodes=EPISODES, seed=0,
                                   params=params)
        p50, p99 = pooled.tpot_quantiles((0.5, 0.99))
        mean = loadtest.row(ref["rate"], pooled)["tpot_mean_s"]
        rows.append({"point": crosscheck.point_name(point),
                     "load_fraction": ref["load_fraction"], "rate": ref["rate"],
                     "project": {"tpot_p50_s": p50, "tpot_p99_s": p99, "tpot_mean_s": mean},
                     "reference": {"tpot_p99_s": ref["tpot_p99_s"], "tpot_mean_s": ref["tpot_mean_s"]},
                     "exact": {"tpot_p99_s": sim["tpot_p99_s"], "tpot_mean_s": sim["tpot_mean_s"]},
                     "errors": {side: {k: rel(p, s[k]) for k, p in (("tpot_p99_s", p99),
                                                                                 ("tpot_mean_s", mean))}
                                for side, s in (("reference", ref), ("exact", sim))}})
        print(rows[-1]["point"], ref["load_fraction"], {k: round(v, 4) for k, v in rows[-1]["project"].items()},
              {s: round(e["tpot_p99_s"], 3) for s, e in rows[-1]["errors"].items()}, flush=True)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows within TOLERANCE and the median |error| of the p99 and the mean, against each side."""
    out = {}
    for side in ("reference", "exact"):
        for key in ("tpot_p99_s", "tpot_mean_s"):
            errors = [abs(r["errors"][side][key]) for r in rows]
            out[f"{side}/{key}"] = {"within": sum(e <= TOLERANCE for e in errors), "total": len(errors),
                                    "median_abs": statistics.median(errors), "max_abs": max(errors)}
    return out


def summary_markdown(doc: dict[str, Any]) -> str:
    """The README's table: per reference and statistic, rows within TOLERANCE, median and max |error|,
    and the project's error range at 25 % and at 90 % load."""
    lines = ["| against | statistic | within 25 % | median / max abs error | at 25 % load | at 90 % load |",
             "|---|---|---:|---|---|---|"]
    for key, entry in doc["summary"].items():
        side, stat = key.split("/")
        ranges = []
        for load in (0.25, 0.9):
            errors = [r["errors"][side][stat] for r in doc["rows"] if r["load_fraction"] == load]
            ranges.append(f"{100 * min(errors):+.0f} to {100 * max(errors):+.0f} %")
        lines.append(f"| {side} | {stat} | {entry['within']}/{entry['total']} | {100 * entry['median_abs']:.1f} % / "
                     f"{100 * entry['max_abs']:.1f} % | {ranges[0]} | {ranges[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    args = ap.parse_args(argv)
    ref = crosscheck.load_reference(REFERENCE)
    exact = crosscheck.load_exact(EXACT)
    rows = [r for point in crosscheck.select_points(ref, None) for r in point_rows(point, exact)]
    doc = {"what": "per-request TPOT under 'request' accounting against AISimulate and the exact scheduler",
           "command": COMMAND, "seconds": SECONDS, "warmup": WARMUP, "episodes": EPISODES, "seed": 0,
           "engine": "mixed", "length_strata": "moments", "tolerance": TOLERANCE,
           "units": "tpot [s per token], errors project / reference - 1", "summary": summary(rows), "rows": rows}
    atomic_write_json(args.out, doc)
    print(summary_markdown(doc))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
