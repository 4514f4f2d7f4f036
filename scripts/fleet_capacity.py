"""Measure a fleet's capacity per size on its own physics: for N = 1..R warm replicas with
least-loaded routing at a constant Poisson load, the highest load per replica at which the SLO
attainment stays >= the task's slo_target.

    .venv-dev/bin/python scripts/fleet_capacity.py             # writes data/fleet/fleet1_v1_capacity.json
    .venv-dev/bin/python scripts/fleet_capacity.py --task InferenceGym-Fleet1-v2   # data/fleet/fleet1_v2_capacity.json
    .venv-dev/bin/python scripts/fleet_capacity.py --check     # exit 1 if the file is stale

Per (N, load per replica) on a grid, `--keys` episodes of `--steps` control intervals (the first
`--warmup` dropped) run with every replica serving from the start (initial_replicas = N) and the
action [N, least-loaded] throughout; the curve is replaced by the constant load. The capacity of N
is the highest grid load whose worst episode keeps attainment >= slo_target (0 when none does).
Pooling raises it: more replicas share the Poisson bursts and the long prompts
(`fleet.baselines.PooledOracleController` plans with it). The keys are `evaluate.training_key`'s,
never the evaluation key.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax import evaluate
from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.fleet.tasks import make_fleet

ENV_ID = "InferenceGym-Fleet1-v1"
ROOT = Path(__file__).resolve().parents[1]
# [req/s per replica] the load grid: one replica saturates at 4.9 code req/s (fleet.tasks), and
# a probe (16 replicas, 2 keys) kept 0.99 up to 2.5; the grid goes below the smallest fleet's.
LOAD_GRID = tuple(round(0.1 * i, 1) for i in range(2, 33))


def episode(env, params, load: jax.Array, n: jax.Array, key: jax.Array, steps: int, warmup: int) -> jax.Array:
    """Attainment over intervals warmup..steps-1 of N warm replicas at `load` x N req/s."""
    curve = params.curve.replace(rate=jnp.full_like(params.curve.rate, load * n))
    p = params.replace(curve=curve, initial_replicas=n)
    _, state = env.reset_env(key, p)
    action = jnp.stack([n, jnp.int32(0)])

    def body(st, t):
        _, st, _, _, _, info = env.step_env(jax.random.fold_in(key, t), st, action, p)
        kept = t >= warmup
        return st, (jnp.where(kept, info["totals"].judged, 0.0), jnp.where(kept, info["totals"].slo_violations, 0.0))

    _, (judged, missed) = jax.lax.scan(body, state, jnp.arange(steps))
    return 1.0 - missed.sum() / jnp.maximum(judged.sum(), 1.0)


def slug(env_id: str) -> str:
    """"fleet1_v2" of "InferenceGym-Fleet1-v2": the stem of the task's files."""
    return env_id.removeprefix("InferenceGym-").replace("-", "_").lower()


def measure(env_id: str, keys: int, steps: int, warmup: int, **overrides: Any) -> tuple[list[float], np.ndarray]:
    """(capacity per N = 0..R [req/s per replica], attainment (R, grid, keys)); `overrides` go to
    `make_fleet` (a variant of the task, e.g. fleet={"least_loaded_unit": "request"})."""
    env, params = make_fleet(env_id, **overrides)
    r = params.num_replicas
    grid = [(load, n, k) for n in range(1, r + 1) for load in LOAD_GRID for k in range(keys)]
    loads = jnp.asarray([g[0] for g in grid], jnp.float32)
    sizes = jnp.asarray([g[1] for g in grid], jnp.int32)
    key_list = evaluate.episode_keys(evaluate.training_key(0), 0, keys)[jnp.asarray([g[2] for g in grid])]
    run = jax.jit(jax.vmap(lambda lo, n, k: episode(env, params, lo, n, k, steps, warmup)))
    attainment = np.asarray(run(loads, sizes, key_list)).reshape(r, len(LOAD_GRID), keys)
    ok = attainment.min(axis=2) >= float(params.slo_target)
    capacity = [0.0] + [float(max((g for g, good in zip(LOAD_GRID, row) if good), default=0.0)) for row in ok]
    return capacity, attainment


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=4, help="episodes per (N, load)")
    ap.add_argument("--steps", type=int, default=40, help="control intervals per episode")
    ap.add_argument("--warmup", type=int, default=10, help="first intervals not counted")
    ap.add_argument("--check", action="store_true", help="remeasure; exit 1 if the file's capacities differ")
    ap.add_argument("--task", default=ENV_ID, help="a registered fleet task id")
    args = ap.parse_args(argv)
    out = ROOT / "data" / "fleet" / f"{slug(args.task)}_capacity.json"
    began = time.time()
    capacity, attainment = measure(args.task, args.keys, args.steps, args.warmup)
    print("capacity per replica by fleet size:", capacity, f"({time.time() - began:.0f} s)", flush=True)
    if args.check:
        shipped = json.loads(out.read_text())["capacity"]["value"]
        if shipped != capacity:
            print(f"{out.relative_to(ROOT)} is stale: measured {capacity}, file {shipped}", file=sys.stderr)
            return 1
        return 0
    config = ROOT / "configs" / "fleet" / f"{slug(args.task)}.toml"
    record = {
        "what": f"{args.task}: the highest constant load per replica [req/s] at which N warm replicas "
                "(least-loaded routing) keep SLO attainment >= slo_target in every episode measured; "
                "index N = 0..R (0 for N = 0)",
        "command": "python scripts/fleet_capacity.py" + ("" if args.task == ENV_ID else f" --task {args.task}"),
        "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
        "inputs": [{"path": str(config.relative_to(ROOT)), "sha256": hashlib.sha256(config.read_bytes()).hexdigest()}],
        "settings": {"keys": args.keys, "key": "evaluate.training_key(0)", "steps": args.steps,
                     "warmup": args.warmup, "load_grid": list(LOAD_GRID)},
        "capacity": {"value": capacity, "unit": "req/s per replica"},
        "worst_attainment": {"value": np.round(attainment.min(axis=2), 5).tolist(),
                             "what": "[N - 1][grid index], worst episode"},
    }
    atomic_write_bytes(out, (json.dumps(record, indent=1) + "\n").encode())
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
