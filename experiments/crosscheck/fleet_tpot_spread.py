"""How much of Fleet1-v2's overstated capacity is TPOT judged on a cohort's mean (issue 42).

    .venv-dev/bin/python experiments/crosscheck/fleet_tpot_spread.py            # writes fleet_tpot_spread.json
    .venv-dev/bin/python experiments/crosscheck/fleet_tpot_spread.py --report   # the README table from the JSON

fleet_capacity_exact.py found Fleet1-v2's capacity by size (data/fleet/fleet1_v2_capacity.json) 1.3-1.6x
what N exact schedulers behind join-the-shortest-queue hold from N = 2 (2x alone), every exact miss a
TPOT miss. Two approximations of the project could make it: its fluid least-loaded split (each replica
a share of every request) and its per-request TPOT (`serving.request_tpot`), which judges every request
of a cohort (the good requests whose first token came in the same 1-s interval of a replica) by the
cohort's mean TPOT, where vLLM judges each request by its own, (finish - first token) / (output - 1).

This separates the two in the exact world. The same exact runs (`fleet_routing.exact_requests`: N
workers behind JSQ, 3 seeds of 1,800 s after 300 s, Fleet1's lengths, SLOs and replica configuration)
are judged twice: per request, as vLLM does (fleet_capacity_exact.py's capacity, which this
reproduces), and with each request's TPOT replaced by its cohort's mean (`cohort_mean_tpot`: the
requests of one worker whose first token fell in the same COHORT_S-second interval, their decode time
summed over their output tokens summed). The capacity by size under each judging (bisection on the
0.1-req/s grid as fleet_capacity_exact.capacity_of; a run is shared by both judgings) is set beside
the project's: what the cohort judging gains in the exact world is the spread within cohorts, and what
is left between it and the project's table is the router (and the rest of the engine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import fleet_capacity_exact  # noqa: E402
import fleet_routing  # noqa: E402
from iteration_sim import ProjectSteps  # noqa: E402

OUT = HERE / "fleet_tpot_spread.json"
COHORT_S = 1.0  # [s] a replica's physics interval (the fleet's replicas step 1 s): the project's cohort width
JUDGINGS = ("per request", "cohort mean")
GRID, SIZES, SLO_TARGET = fleet_capacity_exact.GRID, fleet_capacity_exact.SIZES, fleet_capacity_exact.SLO_TARGET


def cohort_mean_tpot(worker: np.ndarray, first_s: np.ndarray, tpot_s: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Each request's cohort mean TPOT [s per token]: over the requests of its worker whose first token
    [s] fell in the same COHORT_S interval, sum of (finish - first token) / sum of (output - 1)."""
    gaps = np.maximum(output - 1, 1).astype(np.float64)
    _, cohort = np.unique(np.stack([worker, np.floor(first_s / COHORT_S).astype(np.int64)]), axis=1,
                          return_inverse=True)
    cohort = cohort.reshape(-1)
    decode = np.bincount(cohort, weights=tpot_s * gaps)
    tokens = np.bincount(cohort, weights=gaps)
    return (decode / tokens)[cohort]


def judged(run: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """{judging: {attainment, ttft_missed, tpot_missed}} of one exact run (shares of its requests)."""
    late_ttft = run["ttft_s"] > fleet_routing.TTFT_SLO_S
    tpots = {"per request": run["tpot_s"],
             "cohort mean": cohort_mean_tpot(run["worker"], run["first_s"], run["tpot_s"], run["output"])}
    out = {}
    for name in JUDGINGS:
        late_tpot = tpots[name] > fleet_routing.TPOT_SLO_S
        out[name] = {"attainment": float(np.mean(~late_ttft & ~late_tpot)), "ttft_missed": float(np.mean(late_ttft)),
                     "tpot_missed": float(np.mean(late_tpot))}
    return out


class Points:
    """The grid points run, each judged both ways (a point is run once, whichever judging asks)."""

    def __init__(self, steps: ProjectSteps, log: Callable[[str], None]):
        self.steps, self.log, self.runs = steps, log, {}

    def point(self, n: int, rate: float) -> dict[str, Any]:
        if (n, rate) not in self.runs:
            t0 = time.time()
            seeds = [judged(fleet_routing.exact_requests(rate, "jsq", s, self.steps, n)) for s in fleet_routing.SEEDS]
            self.runs[n, rate] = {"replicas": n, "rate": rate, **{
                name: {"worst": min(s[name]["attainment"] for s in seeds),
                       "per_seed": [s[name] for s in seeds]} for name in JUDGINGS}}
            self.log(f"N={n} rate {rate}: " + ", ".join(f"{name} {self.runs[n, rate][name]['worst']:.4f}"
                                                        for name in JUDGINGS) + f" ({time.time() - t0:.0f} s)")
        return self.runs[n, rate]

    def capacity(self, n: int, judging: str) -> float:
        """The highest grid rate whose worst seed keeps SLO_TARGET under `judging` (0 if none)."""
        return fleet_capacity_exact.highest_holding(lambda rate: self.point(n, rate)[judging]["worst"] >= SLO_TARGET)


def summary_markdown(doc: dict[str, Any]) -> str:
    """The README table: capacity by size [req/s per replica] under each judging, beside the project's."""
    lines = ["| replicas | exact, TPOT per request | exact, TPOT by cohort mean | v2, least-loaded (fluid) |",
             "|---:|---:|---:|---:|"]
    for i, n in enumerate(doc["sizes"]):
        own, cohort, project = doc["capacity"]["per request"][i], doc["capacity"]["cohort mean"][i], doc["project"][n]
        cells = [f"{x:.1f}" + (f" ({x / own:.2f}x)" if own > 0 else "") for x in (cohort, project)]
        lines.append(f"| {n} | {own:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--report", action="store_true", help="print the README table from the JSON and exit")
    args = ap.parse_args(argv)
    if args.report:
        print(summary_markdown(json.loads(Path(args.out).read_text())), end="")
        return
    points = Points(ProjectSteps("a100-80gb", "fp16"), lambda line: print(line, flush=True))
    capacity = {name: [points.capacity(n, name) for n in SIZES] for name in JUDGINGS}
    exact = json.loads(fleet_capacity_exact.OUT.read_text())
    if capacity["per request"] != exact["capacity"]:
        raise RuntimeError(f"per-request capacity {capacity['per request']} is not "
                           f"{fleet_capacity_exact.OUT.name}'s {exact['capacity']}: rerun that study first")
    doc = {"what": "Fleet1's capacity by size with exact schedulers behind join-the-shortest-queue, TPOT judged "
                   "per request and by 1-s cohort mean, against data/fleet/fleet1_v2_capacity.json "
                   "(experiments/crosscheck/fleet_tpot_spread.py's docstring)",
           "command": "python experiments/crosscheck/fleet_tpot_spread.py",
           "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "sizes": list(SIZES), "grid": list(GRID), "slo_target": SLO_TARGET, "cohort_s": COHORT_S,
           "seeds": list(fleet_routing.SEEDS), "seconds": fleet_routing.SECONDS, "warmup_s": fleet_routing.WARMUP_S,
           "units": "capacity and rate [req/s per replica]; attainment, ttft_missed, tpot_missed: shares of requests",
           "capacity": capacity, "project": exact["project"]["v2, least-loaded (fluid)"],
           "points": sorted(points.runs.values(), key=lambda p: (p["replicas"], p["rate"]))}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(summary_markdown(doc), end="")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
