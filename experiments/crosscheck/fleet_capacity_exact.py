"""A fleet's capacity per size, exact schedulers behind a least-request router against the project (issue 42).

    .venv-dev/bin/python experiments/crosscheck/fleet_capacity_exact.py            # writes fleet_capacity_exact.json
    .venv-dev/bin/python experiments/crosscheck/fleet_capacity_exact.py --report   # the README table from the JSON

Fleet1-v2's pooled baselines (`fleet.baselines`: the pooled HPA and the pooled oracle) provision
from the fleet's capacity per size, data/fleet/fleet1_v2_capacity.json (`scripts/fleet_capacity.py`:
the highest constant load per replica, on a 0.1-req/s grid, at which N replicas keep SLO attainment
>= 0.99 in every episode measured). That table is the project's fluid least-loaded split, which
fleet_routing.py found optimistic near saturation at 16 replicas. This study measures the same
quantity with N exact schedulers (`vllm_worker.Worker` behind join-the-shortest-queue,
`fleet_routing.exact_attainment`: Fleet1's lengths, SLOs and replica configuration) for each N of
SIZES: the highest rate of the 0.1-req/s grid whose worst seed (SEEDS, fleet_routing.SECONDS s each,
the first WARMUP_S dropped) keeps attainment >= SLO_TARGET, found by bisection on the grid (the
attainment falls with the load; every point run is kept in the JSON). Beside it, the project's
capacity per size under each model of VARIANTS (`scripts/fleet_capacity.measure`, the shipped
file's settings): the fluid split Fleet1-v2 ships, whole requests joining the shortest queue at
each 1-s interval's start (`[fleet] least_loaded_unit = "request"`), and each with every request
judged by its own TPOT (`serving.tpot_spread`, the replicas' `tpot_spread = "bursts"`).
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

import fleet_routing  # noqa: E402
from iteration_sim import ProjectSteps  # noqa: E402

OUT = HERE / "fleet_capacity_exact.json"
PROJECT = ROOT / "data" / "fleet" / "fleet1_v2_capacity.json"
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
GRID = tuple(round(0.1 * i, 1) for i in range(1, 33))  # [req/s per replica]: the project's grid, from 0.1
SLO_TARGET = 0.99  # Fleet1's slo_target (configs/fleet/fleet1_v2.toml)
PROJECT_GRID_LOW = 0.2  # [req/s per replica] the project's lowest grid load (scripts/fleet_capacity.LOAD_GRID)
# name -> make_fleet overrides of Fleet1-v2 (the first is the task as shipped: its file's table)
BURSTS = {"replica": {"server": {"tpot_spread": "bursts"}}}  # serving.tpot_spread: each request's own TPOT
VARIANTS = {"v2, least-loaded (fluid)": {},
            "v2 + whole least-loaded (JSQ)": {"fleet": {"least_loaded_unit": "request"}},
            "v2 + own TPOT (bursts)": BURSTS,
            "v2 + own TPOT + whole JSQ": {**BURSTS, "fleet": {"least_loaded_unit": "request"}}}


def worst_attainment(n: int, rate: float, steps: ProjectSteps) -> dict[str, Any]:
    """One grid point: N exact workers behind JSQ at `rate` req/s each, every seed."""
    runs = np.array([fleet_routing.exact_attainment(rate, "jsq", s, steps, n) for s in fleet_routing.SEEDS],
                    np.float64)
    per_seed = runs[:, 1] / runs[:, 0]
    return {"replicas": n, "rate": rate, "requests": int(runs[:, 0].sum()), "worst": float(per_seed.min()),
            "per_seed_attainment": per_seed.tolist(), "ttft_missed": float(runs[:, 2].sum() / runs[:, 0].sum()),
            "tpot_missed": float(runs[:, 3].sum() / runs[:, 0].sum())}


def highest_holding(holds: Callable[[float], bool]) -> float:
    """The highest rate of GRID at which `holds` (True below some rate, False above) is True, 0 if
    none, by bisection on the grid."""
    lo, hi = -1, len(GRID)  # invariant: GRID[lo] holds (or lo = -1), GRID[hi] fails (or hi = len)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(GRID[mid]) else (lo, mid)
    return GRID[lo] if lo >= 0 else 0.0


def capacity_of(n: int, steps: ProjectSteps, log: Any) -> tuple[float, list[dict[str, Any]]]:
    """(the highest grid rate whose worst seed keeps SLO_TARGET, 0 if none; the points run)."""
    points = []

    def holds(rate: float) -> bool:
        t0 = time.time()
        point = worst_attainment(n, rate, steps)
        points.append(point)
        log(f"N={n} rate {rate}: worst {point['worst']:.4f} ({time.time() - t0:.0f} s)")
        return point["worst"] >= SLO_TARGET

    return highest_holding(holds), points


def project_capacity(known: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """{variant: capacity per N = 0..R [req/s per replica]} on the shipped file's settings (those in
    `known` taken as they are); the first variant must reproduce the shipped file (else the file is
    stale and the comparison void)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import fleet_capacity

    settings = json.loads(PROJECT.read_text())["settings"]
    out = {}
    for name, overrides in VARIANTS.items():
        if known and name in known:
            out[name] = known[name]
            continue
        t0 = time.time()
        out[name] = fleet_capacity.measure("InferenceGym-Fleet1-v2", settings["keys"], settings["steps"],
                                           settings["warmup"], **overrides)[0]
        print(f"{name}: {out[name]} ({time.time() - t0:.0f} s)", flush=True)
    shipped = json.loads(PROJECT.read_text())["capacity"]["value"]
    if out[next(iter(VARIANTS))] != shipped:
        raise RuntimeError(f"{PROJECT.name} is stale: measured {out[next(iter(VARIANTS))]}, file {shipped}")
    return out


def summary_markdown(doc: dict[str, Any]) -> str:
    """The README table: capacity per size [req/s per replica], exact against the project's variants."""
    names = list(doc["project"])
    lines = ["| replicas | exact, JSQ | " + " | ".join(names) + " |", "|---:|---:|" + "---:|" * len(names)]
    for n, exact in zip(doc["sizes"], doc["capacity"], strict=True):
        cells = [f"< {PROJECT_GRID_LOW}" if doc["project"][v][n] == 0.0 else f"{doc['project'][v][n]:.1f}" + (
            f" ({doc['project'][v][n] / exact:.2f}x)" if exact > 0 else "") for v in names]
        lines.append(f"| {n} | {exact:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--report", action="store_true", help="print the README table from the JSON and exit")
    ap.add_argument("--project-only", action="store_true", help="rerun the project's side, keep the JSON's exact one")
    ap.add_argument("--new-variants", action="store_true",
                    help="with --project-only: run only the variants the JSON lacks, keep the others")
    args = ap.parse_args(argv)
    if args.report:
        print(summary_markdown(json.loads(Path(args.out).read_text())), end="")
        return
    if args.project_only:
        old = json.loads(Path(args.out).read_text())
        capacity, points = old["capacity"], old["points"]
    else:
        steps = ProjectSteps("a100-80gb", "fp16")
        capacity, points = [], []
        for n in SIZES:
            cap, pts = capacity_of(n, steps, lambda line: print(line, flush=True))
            capacity.append(cap)
            points += pts
    project = project_capacity(json.loads(Path(args.out).read_text())["project"] if args.new_variants else None)
    doc = {"what": "Fleet1's capacity per size with exact schedulers behind join-the-shortest-queue, against "
                   "data/fleet/fleet1_v2_capacity.json (experiments/crosscheck/fleet_capacity_exact.py's docstring)",
           "command": "python experiments/crosscheck/fleet_capacity_exact.py",
           "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "sizes": list(SIZES), "grid": list(GRID), "slo_target": SLO_TARGET, "seeds": list(fleet_routing.SEEDS),
           "seconds": fleet_routing.SECONDS, "warmup_s": fleet_routing.WARMUP_S,
           "units": "capacity and rate [req/s per replica], attainment [requests meeting both SLOs / requests]",
           "capacity": capacity, "project": project, "variants": VARIANTS, "points": points}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(summary_markdown(doc), end="")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
