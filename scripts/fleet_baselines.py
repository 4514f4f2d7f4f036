"""Choose the fleet baselines' numbers on the TRAINING split, then measure them on the held-out days.

    .venv-dev/bin/python scripts/fleet_baselines.py                 # writes data/fleet/fleet1_v1_baselines.json
    .venv-dev/bin/python scripts/fleet_baselines.py --task InferenceGym-Fleet1-v2   # fleet1_v2_baselines.json
    .venv-dev/bin/python scripts/fleet_baselines.py --episodes 8 --heldout 25

For each baseline (`inferencegym_jax.fleet.baselines`) a small grid of candidates runs on the same
`--episodes` training windows (evenly spaced over the split's K windows, keys from
`evaluate.training_key(seed)`), every candidate of a baseline in one vmapped call. The rule:
  static_for_peak: the smallest replica count whose SLO attainment is >= slo_target on every
    training episode evaluated;
  hpa, hpa_pooled, forecast, oracle, oracle_pooled: among the candidates whose attainment is >= slo_target on
    every training episode, the one with the fewest mean GPU-hours (none qualifying: the highest
    worst-episode attainment, flagged "qualified": false).
Then the baselines run on every held-out window (`evaluate.evaluation_key(seed)`), graded
between static_for_peak (0) and the oracle (1); that table is written beside the choice, never
used for it.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.fleet import baselines as fb
from inferencegym_jax.fleet import evaluate as fe
from inferencegym_jax.fleet.tasks import make_fleet

ENV_ID = "InferenceGym-Fleet1-v1"
ROOT = Path(__file__).resolve().parents[1]
# Candidate grids. Replica counts: 8 replicas saturate at the busiest minute (39 req/s over 4.9
# req/s per replica, fleet.tasks), so fewer cannot hold the peak. HPA targets [req/s per
# replica] and capacities [req/s per replica] at and below one replica's 2.5-req/s SLO rate
# (fleet.tasks): headroom for the provisioning lead and the bursts.
GRIDS = {
    "static_for_peak": {"replicas": [8, 9, 10, 11, 12, 13, 14, 15, 16]},
    "hpa": {"target": [1.0, 1.1, 1.2, 1.3, 1.4, 1.8, 2.2]},  # 1.1..1.3 added: the step 1.0 -> 1.4 was too coarse
    # The pooled oracle's multiple, reacting instead of foreseeing: lower, for the provisioning lead.
    # Added 2026-12-07 (Fleet1-v2's file; v1's has none: run v1 with --reuse to add it).
    "hpa_pooled": {"scale": [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3]},  # 1.1.. added: 1.0, the first top, qualified
    "forecast": {"capacity": [1.7, 2.0], "spare": [1.0, 2.0]},
    "oracle": {"capacity": [1.3, 1.45, 1.6, 1.9, 2.2, 2.5]},  # 1.3, 1.45 added: none of 1.6.. qualified
    # A multiple of the capacity per fleet size measured at a constant load (scripts/fleet_capacity.py):
    # below 1 for the day's minute-to-minute swings, above 1 if the constant-load measure is strict.
    "oracle_pooled": {"scale": [0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4]},  # 1.2.. added: 1.1, the first top, qualified
}
# Candidates a task adds to GRIDS. Fleet1-v2's first search on GRIDS (2026-12-07) left a step of
# 0.3-0.4 between the last candidate that qualified and the first that did not (hpa 1.4 -> 1.8,
# oracle 1.6 -> 1.9) and qualified the forecast at the grid's top capacity (2.0): the points between
# and beyond, searched with --reuse (the first search's rows kept).
EXTRA = {"InferenceGym-Fleet1-v2": {"hpa": {"target": [1.5, 1.6, 1.7]}, "forecast": {"capacity": [2.2]},
                                    "oracle": {"capacity": [1.7, 1.8]}}}


def grids(env_id: str) -> dict[str, dict[str, list[float]]]:
    """The candidate grids of a task: GRIDS with its EXTRA points, each axis sorted."""
    out = {n: {k: list(v) for k, v in g.items()} for n, g in GRIDS.items()}
    for name, axes in EXTRA.get(env_id, {}).items():
        for key, values in axes.items():
            out[name][key] = sorted(set(out[name][key]) | set(values))
    return out


UNITS = {
    ("static_for_peak", "replicas"): ("replicas", "the fixed replica count (least-loaded routing)"),
    ("hpa", "target"): ("req/s per serving replica", "HPA target of the arrival rate per serving "
                                                  "replica (tolerance 0.1, 300-s scale-down window)"),
    ("hpa_pooled", "scale"): ("", "multiple of the capacity per fleet size (data/fleet/<task>_capacity.json) "
                                  "the HPA's recommendation carries the last interval's rate at"),
    ("forecast", "capacity"): ("req/s per replica", "rate one replica is provisioned for"),
    ("forecast", "spare"): ("replicas", "added to the forecast's replicas"),
    ("oracle", "capacity"): ("req/s per replica", "rate one replica is provisioned for (clairvoyant bound)"),
    ("oracle_pooled", "scale"): ("", "multiple of the capacity per fleet size (data/fleet/<task>_capacity.json) "
                                     "the pooled oracle provisions for (clairvoyant bound)"),
}


def slug(env_id: str) -> str:
    """"fleet1_v2" of "InferenceGym-Fleet1-v2": the stem of the task's files."""
    return env_id.removeprefix("InferenceGym-").replace("-", "_").lower()


def provenance(env_id: str) -> dict:
    """Where the file's numbers come from: inputs (path, sha256), licence and attribution."""
    import hashlib

    def sha(rel: str) -> str:
        return hashlib.sha256((ROOT / rel).read_bytes()).hexdigest()

    inputs = [f"configs/fleet/{slug(env_id)}.toml", "data/traces/day/azure_code_2024_week.npz",
              "data/fleet/provisioning.json"]
    return {
        "generated_by": "scripts/fleet_baselines.py (simulation of the shipped task; no external data)",
        "inputs": [{"path": rel, "sha256": sha(rel)} for rel in inputs],
        "traffic_source": "Azure LLM inference trace 2024 (code), https://github.com/Azure/AzurePublicDataset "
                          "commit b469a113cedca53ddc3bdea71a143dc4b7d8700c; data/traces/day/PROVENANCE.txt",
        "licence": "CC-BY-4.0 (the traffic trace; the numbers derive from it), see data/traces/day",
        "attribution": "Stojkovic, Zhang, Goiri, Torrellas, Choukse, 'DynamoLLM', HPCA 2025 (arXiv:2408.00741); "
                       "data: Microsoft Azure, AzurePublicDataset",
    }


def candidates(name: str, params, env_id: str) -> list[tuple[dict, object]]:
    """[(numbers, controller)] of a baseline's grid."""
    grid = grids(env_id)[name]
    combos = [dict(zip(grid, values, strict=True)) for values in np.array(np.meshgrid(*grid.values())).reshape(
        len(grid), -1).T.tolist()]
    out = []
    for numbers in combos:
        chosen = {k: {"replicas": 16, "target": 1.0, "capacity": 2.0, "spare": 0.0, "scale": 1.0} for k in GRIDS}
        chosen[name] = numbers
        out.append((numbers, fb.make_controllers(params, chosen, fb.load_capacity(env_id))[name]))
    return out


@functools.partial(jax.jit, static_argnames=("env", "num_steps"))
def _run_candidates(env, params, stacked, keys, num_steps):
    index = jnp.arange(keys.shape[0])

    def one_candidate(controller):
        return jax.vmap(lambda k, i: fe.one_episode(env, params, controller, k, i, num_steps, True))(keys, index)

    return jax.vmap(one_candidate)(stacked)


def training_windows(params, count: int):
    """params whose starts are `count` windows evenly spaced over the training split's."""
    starts = np.asarray(params.curve.starts)
    pick = np.unique(np.round(np.linspace(0, starts.size - 1, count)).astype(int))
    return params.replace(curve=params.curve.replace(starts=jnp.asarray(starts[pick]))), starts[pick]


def search(name: str, env, params, key, episodes: int, num_steps: int, slo_target: float,
           known: list[dict] | None = None) -> dict:
    """One baseline's search table and choice (module docstring's rule); rows of `known` (an
    earlier run's table with the same windows, keys and episodes) are reused, not rerun."""
    known = known or []
    cands = candidates(name, params, env.env_id)
    todo = [(n, c) for n, c in cands if not any(all(r[k] == v for k, v in n.items()) for r in known)]
    t0 = time.time()
    rows = []
    if todo:
        stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[c for _, c in todo])
        keys = evaluate.episode_keys(key, 0, episodes)
        out = jax.device_get(_run_candidates(env, params, stacked, keys, num_steps))
    for i, (numbers, _) in enumerate(todo):
        att = np.asarray(out.slo_attainment[i], np.float64)
        rows.append({**numbers, "gpu_hours_mean": float(np.mean(out.gpu_hours[i])),
                     "attainment_mean": float(att.mean()), "attainment_min": float(att.min()),
                     "J_mean": float(np.mean(out.episode_cost[i])), "qualified": bool(att.min() >= slo_target)})
    rows += [r for r in known if any(all(r[k] == v for k, v in n.items()) for n, _ in cands)]
    rows.sort(key=lambda r: [r[k] for k in GRIDS[name]])  # the axes' order (EXTRA adds values, not axes)
    ok = [r for r in rows if r["qualified"]]
    if name == "static_for_peak":
        best = min(ok, key=lambda r: r["replicas"]) if ok else max(rows, key=lambda r: r["attainment_min"])
    else:
        best = min(ok, key=lambda r: r["gpu_hours_mean"]) if ok else max(rows, key=lambda r: r["attainment_min"])
    print(f"{name}: {time.time() - t0:.0f} s", flush=True)
    for r in rows:
        print("   ", {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}, flush=True)
    return {"table": rows, "best": best}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8, help="training episodes per candidate")
    ap.add_argument("--heldout", type=int, default=25, help="held-out episodes (window i %% K)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0, help="intervals per episode (0: the horizon; less: a smoke run)")
    ap.add_argument("--reuse", default="", help="an earlier output: its search rows with the same settings are "
                    "reused (same episodes, seed, windows and steps), only new candidates run")
    ap.add_argument("--task", default=ENV_ID, help="a registered fleet task id")
    ap.add_argument("--out", default="", help="default: data/fleet/<task>_baselines.json")
    args = ap.parse_args(argv)
    args.out = args.out or str(ROOT / "data" / "fleet" / f"{slug(args.task)}_baselines.json")
    env, train = make_fleet(args.task, split="train")
    slo = float(train.slo_target)
    steps = args.steps or int(train.max_steps_in_episode)
    sub, starts = training_windows(train, args.episodes)
    known: dict = {}
    if args.reuse:
        old = json.loads(Path(args.reuse).read_text())
        same = (old["training_episodes_per_candidate"] == args.episodes and old["training_key"] ==
                f"evaluate.training_key({args.seed})" and old["training_start_minutes"] == [int(x) for x in starts]
                and old.get("steps", int(train.max_steps_in_episode)) == steps)
        if not same:
            raise ValueError(f"--reuse={args.reuse} was made with other settings; "
                             "allowed: the same episodes, seed, steps")
        known = {n: old["search"][n]["table"] for n in old["search"]}
    found = {n: search(n, env, sub, evaluate.training_key(args.seed), args.episodes, steps, slo, known.get(n))
             for n in GRIDS}
    chosen = {n: {k: {"value": found[n]["best"][k], "unit": UNITS[(n, k)][0], "what": UNITS[(n, k)][1]}
                  for k in GRIDS[n]} for n in GRIDS}
    env_h, heldout = make_fleet(args.task, split="heldout")
    controllers = fb.make_controllers(heldout, {n: {k: v["value"] for k, v in c.items()} for n, c in chosen.items()},
                                      fb.load_capacity(args.task))
    t0 = time.time()
    if args.steps:
        heldout = heldout.replace(max_steps_in_episode=jnp.asarray(steps, jnp.int32))
    table, _ = fe.graded_table(env_h, heldout, controllers, evaluate.evaluation_key(args.seed), args.heldout)
    print(f"held-out: {time.time() - t0:.0f} s\n{table.to_string()}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {
        "what": f"{args.task}'s non-learning baselines: the numbers each was given, chosen on the TRAINING split "
                "(inferencegym_jax.fleet.baselines reads 'chosen'); the held-out table is a measurement only.",
        "command": "python scripts/fleet_baselines.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": commit, "provenance": provenance(args.task),
        "rule": (__doc__ or "").split("The rule:")[1].split("Then the")[0].strip(),
        "slo_target": slo, "training_episodes_per_candidate": args.episodes, "steps": steps,
        "training_start_minutes": [int(s) for s in starts], "training_key": f"evaluate.training_key({args.seed})",
        "chosen": chosen,
        "search": {n: {"grid": grids(args.task)[n], "table": found[n]["table"]} for n in GRIDS},
        "heldout": {"episodes": args.heldout, "key": f"evaluate.evaluation_key({args.seed})",
                    "columns": "gpu_hours [GPU h], slo_attainment [fraction], cost_usd [$], J [episode cost], "
                               "score [(J_static - J) / (J_static - J_oracle)], d_*: paired mean and 95 % CI",
                    "table": json.loads(table.reset_index().to_json(orient="records"))},
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
