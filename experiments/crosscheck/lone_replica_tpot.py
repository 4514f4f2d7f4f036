"""A lone Fleet1 replica's SLO misses: the exact scheduler against both per-request TPOT models (issue 42).

    .venv-dev/bin/python experiments/crosscheck/lone_replica_tpot.py            # writes lone_replica_tpot.json
    .venv-dev/bin/python experiments/crosscheck/lone_replica_tpot.py --report   # the README table from the JSON

One exact worker (`fleet_routing.exact_requests` with one replica: vLLM V1's iteration scheduler on
this project's kernels, Fleet1's lengths, SLOs and replica configuration; EXACT_SEEDS runs of 1,800 s
after 300 s) against the project's single server with the same replica, lengths and SLOs (task 1-v2's
constant schedule, the mixed engine, "clamped" strata, TPOT judged per request: "request" accounting;
KEYS episodes of STEPS 1-s intervals after WARMUP, keys from `evaluate.training_key(0)`) under each
`ServerParams.tpot_spread`: "cohort" (every request of a cohort judged by the cohort's mean TPOT, as
Fleet1-v2 ships) and "bursts" (`serving.tpot_spread`: the share of them whose own TPOT, the prompt
chunks landing in their own decode, misses). Misses are requests missing either SLO over requests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import fleet_routing  # noqa: E402
from iteration_sim import ProjectSteps  # noqa: E402

OUT = HERE / "lone_replica_tpot.json"
RATES = (0.1, 0.2, 0.4, 0.8, 1.6)  # [req/s]
EXACT_SEEDS = tuple(range(20))
KEYS, STEPS, WARMUP = 8, 1800, 300  # episodes; [1-s intervals] run and dropped: as the exact side (fleet_routing)
SPREADS = ("cohort", "bursts")


def law(spec: tuple[float, float, int, int]) -> dict[str, Any]:
    median, sigma, low, high = spec
    return {"kind": "lognormal", "median1": median, "sigma1": sigma, "low": low, "high": high}


def exact_misses(rate: float, steps: ProjectSteps) -> dict[str, float]:
    runs = np.array([fleet_routing.exact_attainment(rate, "jsq", s, steps, 1) for s in EXACT_SEEDS], np.float64)
    total = runs.sum(axis=0)
    return {"requests": int(total[0]), "missed": 1.0 - total[1] / total[0], "tpot_missed": total[3] / total[0]}


def project_misses(rate: float, spread: str) -> float:
    """Missed / completed over KEYS episodes of the project's lone replica at `rate` req/s."""
    import jax
    import jax.numpy as jnp

    import inferencegym_jax as ig
    from inferencegym_jax import evaluate
    from inferencegym_jax.fleet.tasks import make_fleet

    slo = fleet_routing.TTFT_SLO_S, fleet_routing.TPOT_SLO_S
    env, params = ig.make("InferenceGym-Task1-v2", max_steps=STEPS + 1,
                          workload={"schedule": "constant", "base_rate": rate, "class_mix": [0.0, 1.0, 0.0],
                                    "length_strata": "clamped", "prompt": law(fleet_routing.PROMPT),
                                    "output": law(fleet_routing.OUTPUT)},
                          server={"ttft_slo_s": [slo[0]] * 3, "tpot_slo_s": [slo[1]] * 3, "slo_accounting": "request",
                                  "tpot_spread": spread})
    config = make_fleet("InferenceGym-Fleet1-v2")[1].replica_config

    def episode(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        _, state = env.reset(key, params)

        def body(st: Any, t: jax.Array) -> tuple[Any, tuple[jax.Array, jax.Array]]:
            _, st, _, _, _, info = env.step(jax.random.fold_in(key, t), st, config, params)
            return st, (info["metrics"].completed, info["metrics"].slo_violations)

        return jax.lax.scan(body, state, jnp.arange(STEPS))[1]

    keys = evaluate.episode_keys(evaluate.training_key(0), 0, KEYS)
    completed, missed = (np.asarray(x, np.float64)[:, WARMUP:] for x in jax.jit(jax.vmap(episode))(keys))
    return float(missed.sum() / completed.sum())


def summary_markdown(doc: dict[str, Any]) -> str:
    """The README table: misses [% of requests] exact against each model (ratio to exact)."""
    lines = ["| req/s | exact | project, cohort mean (Fleet1-v2) | project, bursts |", "|---:|---:|---:|---:|"]
    for row in doc["rows"]:
        exact = row["exact"]["missed"]
        cells = [f"{100 * row[s]:.2f} %" + (f" ({row[s] / exact:.2f}x)" if exact > 0 else "") for s in SPREADS]
        lines.append(f"| {row['rate']:g} | {100 * exact:.2f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--report", action="store_true", help="print the README table from the JSON and exit")
    args = ap.parse_args(argv)
    if args.report:
        print(summary_markdown(json.loads(Path(args.out).read_text())), end="")
        return
    steps = ProjectSteps("a100-80gb", "fp16")
    rows = []
    for rate in RATES:
        rows.append({"rate": rate, "exact": exact_misses(rate, steps), **{s: project_misses(rate, s) for s in SPREADS}})
        print(rows[-1], flush=True)
    doc = {"what": "a lone Fleet1 replica's SLO misses, exact scheduler against the project's per-request TPOT "
                   "models (experiments/crosscheck/lone_replica_tpot.py's docstring)",
           "command": "python experiments/crosscheck/lone_replica_tpot.py",
           "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "exact_seeds": len(EXACT_SEEDS), "keys": KEYS, "steps": STEPS, "warmup": WARMUP,
           "units": "rate [req/s]; missed, tpot_missed: shares of requests", "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(summary_markdown(doc), end="")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
