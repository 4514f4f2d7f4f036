"""Choose the reservation baselines' numbers on the TRAINING services, then measure every baseline on
the held-out services.

    .venv-dev/bin/python scripts/reservation_baselines.py            # writes data/fleet/reserve1_v1_baselines.json
    .venv-dev/bin/python scripts/reservation_baselines.py --check    # exit 1 if the file's choice is stale

Rule: for `flat_fraction` (the fraction of the last week's peak reserved every hour) and
`rolling_quantile` (the quantile over the last week, hour by hour), the grid value with the lowest
mean J over `--episodes` training services (keys `evaluate.training_key(seed)`), every candidate
on the same services. The held-out table (`evaluate.evaluation_key(seed)`, `--heldout` services)
is written beside the choice, never used for it.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.fleet import reservation_baselines as rb
from inferencegym_jax.fleet.reservation_tasks import make_reservation

ENV_ID = "InferenceGym-Reserve1-v1"
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "fleet" / "reserve1_v1_baselines.json"
INPUTS = ("configs/reservation/reserve1_v1.toml", "data/traces/servegen/servegen_m_large_2wk.npz",
          "data/fleet/provisioning.json")
GRIDS = {"flat_fraction": ("fraction", rb.FRACTION_GRID, rb.FlatFraction, "1",
                           "fraction of the last week's busiest hour reserved every hour"),
         "rolling_quantile": ("q", rb.QUANTILE_GRID, rb.RollingQuantile, "1",
                              "quantile over the last week of each hour's replicas needed")}


def search(env, params, episodes: int, seed: int) -> tuple[dict, dict]:
    """(chosen, search): per baseline, the grid's mean J on the training services and its minimum."""
    chosen, table = {}, {}
    for name, (field, grid, cls, unit, what) in GRIDS.items():
        costs = [float(np.mean(rb.run_reservation_episodes(env, params, cls(jnp.float32(v)),
                                                           evaluate.training_key(seed), episodes).J)) for v in grid]
        best = grid[int(np.argmin(costs))]
        chosen[name] = {field: {"value": best, "unit": unit, "what": what}}
        table[name] = {"grid": list(grid), "mean_J": [round(c, 6) for c in costs]}
        print(f"{name}: " + ", ".join(f"{v}: {c:.4f}" for v, c in zip(grid, costs)) + f" -> {best}", flush=True)
    return chosen, table


def heldout(env_id: str, chosen: dict, episodes: int, seed: int) -> list[dict]:
    """The held-out table's rows (every baseline on the same held-out services)."""
    env, params = make_reservation(env_id, split="heldout")
    table, _ = rb.reservation_table(env, params, rb.reservation_baselines(env, params, chosen),
                                    evaluate.evaluation_key(seed), episodes)
    print(table.round(4).to_string(), flush=True)
    return [{"policy": name, **{k: round(float(v), 6) for k, v in row.items() if np.isfinite(v)}}
            for name, row in table.iterrows()]


DOC = ROOT / "docs" / "RESERVATION.md"
DOC_MARKERS = ("<!-- reserve1-baselines:start -->", "<!-- reserve1-baselines:end -->")
DOC_COLUMNS = (("score", "score", "{:.3f}"), ("score_ci95", "± 95 %", "{:.3f}"), ("J", "J (episode)", "{:.3f}"),
               ("cost_usd", "$ / episode", "{:,.0f}"), ("reserved_gpu_h", "reserved GPU-h", "{:,.0f}"),
               ("on_demand_gpu_h", "on-demand GPU-h", "{:,.0f}"), ("slo_attainment", "SLO attainment", "{:.4f}"),
               ("d_J_vs_week_peak", "J - week_peak", "{:+.3f}"), ("d_J_vs_week_peak_ci95", "± 95 %", "{:.3f}"))


def markdown(rows: list[dict]) -> str:
    """The held-out table as markdown (docs/RESERVATION.md holds it between DOC_MARKERS)."""
    lines = ["| policy | " + " | ".join(head for _, head, _ in DOC_COLUMNS) + " |",
             "|---|" + "---|" * len(DOC_COLUMNS)]
    for row in rows:
        cells = ["" if row.get(key) is None else fmt.format(row[key]) for key, _, fmt in DOC_COLUMNS]
        lines.append(f"| {row['policy']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=64, help="training services per candidate")
    ap.add_argument("--heldout", type=int, default=64, help="held-out services in the table")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="recompute the choice; exit 1 if the file's differs")
    args = ap.parse_args(argv)
    env, params = make_reservation(ENV_ID)
    chosen, grid = search(env, params, args.episodes, args.seed)
    if args.check:
        shipped = json.loads(OUT.read_text())["chosen"]
        if shipped != chosen:
            print(f"{OUT.relative_to(ROOT)} is stale: chosen {chosen}, file {shipped}", file=sys.stderr)
            return 1
        return 0
    record = {
        "what": f"{ENV_ID}'s baselines: the numbers chosen on the TRAINING services "
                "(fleet.reservation_baselines reads 'chosen'); the held-out table is a measurement only.",
        "command": "python scripts/reservation_baselines.py",
        "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
        "inputs": [{"path": p, "sha256": hashlib.sha256((ROOT / p).read_bytes()).hexdigest()} for p in INPUTS],
        "traffic_source": "ServeGen (Alibaba Cloud Model Studio, m-large), data/traces/servegen/PROVENANCE.txt",
        "rule": "per baseline, the grid value with the lowest mean J over the training services",
        "training": {"episodes": args.episodes, "key": f"evaluate.training_key({args.seed})"},
        "chosen": chosen,
        "search": grid,
        "heldout": {"episodes": args.heldout, "key": f"evaluate.evaluation_key({args.seed})",
                    "table": heldout(ENV_ID, chosen, args.heldout, args.seed)},
    }
    atomic_write_bytes(OUT, (json.dumps(record, indent=1) + "\n").encode())
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
