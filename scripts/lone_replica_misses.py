"""Why a lone Fleet1 replica misses its SLO at low load, and why a pooled one does not.

    .venv-dev/bin/python scripts/lone_replica_misses.py   # writes experiments/results/lone_replica_misses.json

One Fleet1 replica (task 4-v2's server: A100-80GB, Llama-3-8B, the mixed engine, TTFT SLO 2 s and
TPOT SLO 50 ms for its class, judged at completion) serving the code service's request lengths
(configs/fleet/fleet1_v1.toml's [replica.workload]: lognormal prompts, median 1,801 tokens up to
7,437; outputs median 10.6 tokens) with the fleet's replica configuration, at a constant Poisson
rate, as a single-server env (`InferenceGym-Task1-v2`'s constant schedule with those lengths and
SLOs). Each rate runs three times: with both SLOs, with the TTFT SLO alone (TPOT SLO 10 s) and with
the TPOT SLO alone (TTFT SLO 1,000 s), so the misses split by cause, and under three models
(VARIANTS): Fleet1-v1's and task 1-v2's (the "moments" prompt-length strata, TPOT judged per
interval: "completion" accounting); with the "clamped" strata (`traffic.strata`: no length node
above the law's longest prompt); and with those and TPOT judged on each request's mean as vLLM
reports it ("request" accounting, `serving.request_tpot`). KEYS episodes of STEPS 1-s intervals,
the first WARMUP dropped; keys from `evaluate.training_key(0)`.

The same replica inside a fleet of N receives 1/N of every second's arrivals of the fleet
(`fleet.routing`: the expected-value split), which is what a single server at rate/N sees only
in the mean: its count's variance is N times smaller, and a long prompt arrives at every
replica as 1/N of a prompt.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import inferencegym_jax as ig
from inferencegym_jax import evaluate
from inferencegym_jax.fleet.tasks import make_fleet

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "lone_replica_misses.json"
RATES = (0.05, 0.2, 1.0)  # [req/s]
KEYS, STEPS, WARMUP = 4, 1800, 300  # episodes; [1-s intervals] run and dropped
# configs/fleet/fleet1_v1.toml [replica.workload] and task 4-v2's SLOs for class 1 ([1, 2, 8] s, 50 ms).
WORKLOAD = {"schedule": "constant", "class_mix": [0.0, 1.0, 0.0],
            "prompt": {"kind": "lognormal", "median1": 1801, "sigma1": 1.36, "low": 3, "high": 7437},
            "output": {"kind": "lognormal", "median1": 10.6, "sigma1": 0.85, "low": 6, "high": 1899}}
TTFT_SLO_S, TPOT_SLO_S = [1.0, 2.0, 8.0], [0.05, 0.05, 0.05]
OFF_TTFT_S, OFF_TPOT_S = [1000.0] * 3, [10.0] * 3  # the largest SLOs the config allows: never missed here
# (workload.LENGTH_STRATA_RULES, serving.types.SLO_ACCOUNTINGS): the shipped model, then each change
VARIANTS = (("moments", "completion"), ("clamped", "completion"), ("clamped", "request"))
CASES = {"both": (TTFT_SLO_S, TPOT_SLO_S), "ttft_only": (TTFT_SLO_S, OFF_TPOT_S), "tpot_only": (OFF_TTFT_S, TPOT_SLO_S)}


def misses(rate: float, ttft_slo: list[float], tpot_slo: list[float], rule: str = "moments",
           accounting: str = "completion") -> dict[str, float]:
    """Missed / completed over KEYS episodes, the share of intervals with a miss, the
    completion-weighted mean of the intervals' TPOT [s] and its 99th percentile over intervals,
    under the prompt-length strata rule `rule` and the SLO accounting `accounting`."""
    env, params = ig.make("InferenceGym-Task1-v2", max_steps=STEPS + 1,
                          workload=dict(WORKLOAD, base_rate=rate, length_strata=rule),
                          server={"ttft_slo_s": ttft_slo, "tpot_slo_s": tpot_slo, "slo_accounting": accounting})
    config = make_fleet("InferenceGym-Fleet1-v1")[1].replica_config

    def episode(key: jax.Array) -> tuple[jax.Array, ...]:
        _, state = env.reset(key, params)

        def body(st, t):
            _, st, _, _, _, info = env.step(jax.random.fold_in(key, t), st, config, params)
            m = info["metrics"]
            return st, (m.completed, m.slo_violations, m.tpot_s)

        return jax.lax.scan(body, state, jnp.arange(STEPS))[1]

    keys = evaluate.episode_keys(evaluate.training_key(0), 0, KEYS)
    completed, missed, tpot = (np.asarray(x, np.float64)[:, WARMUP:] for x in jax.jit(jax.vmap(episode))(keys))
    busy = completed > 0
    return {"missed_share": float(missed.sum() / completed.sum()), "intervals_with_miss": float(np.mean(missed > 1e-3)),
            "tpot_mean_s": float(np.average(tpot[busy], weights=completed[busy])),
            "tpot_p99_interval_s": float(np.quantile(tpot[busy], 0.99))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    rows = []
    for rule, accounting in VARIANTS:
        for rate in RATES:
            for case, (ttft_slo, tpot_slo) in CASES.items():
                row = {"length_strata": rule, "slo_accounting": accounting, "rate": rate, "slos": case,
                       **misses(rate, ttft_slo, tpot_slo, rule, accounting)}
                rows.append(row)
                print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    doc = {"what": "a lone Fleet1 replica's SLO misses by cause (scripts/lone_replica_misses.py's docstring)",
           "command": "python scripts/lone_replica_misses.py",
           "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "episodes": KEYS, "steps": STEPS, "warmup": WARMUP, "key": "evaluate.training_key(0)",
           "units": "rate [req/s], missed_share [missed / completed], tpot [s per token]", "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
