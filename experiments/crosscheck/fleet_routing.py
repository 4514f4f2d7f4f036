"""How much a fleet of Fleet1 replicas pools, by router, against exact per-iteration schedulers (issue 42).

    .venv-dev/bin/python experiments/crosscheck/fleet_routing.py            # writes fleet_routing.json
    .venv-dev/bin/python experiments/crosscheck/fleet_routing.py --report   # the README table from the JSON

Fleet1's capacity by size (data/fleet/fleet1_v1_capacity.json) says 16 replicas hold the SLOs at 2.5
req/s each, while a lone replica misses them at 0.2 req/s (docs/FLEET.md). Whether a real fleet pools
that well depends on the router, so this study measures it with NUM_REPLICAS exact schedulers
(`vllm_worker.Worker`: vLLM V1's iteration scheduler on this project's kernels, iteration_sim.py) behind
two routers, request by request:

* `jsq`: join the shortest queue: each request goes to the worker with the fewest requests in it (waiting
  or running) at its arrival, ties broken at random: what a least-request router does (Envoy's
  LEAST_REQUEST counts each upstream's requests in flight; it samples two upstreams, this looks at all).
* `random`: each request to a worker drawn uniformly; each worker is then a lone server at the
  per-replica rate (Poisson thinning).

and sets them beside the project's fleet at the same load: Fleet1-v1 (each replica a share of every
request) and Fleet1-v2 (whole requests, `fleet.request_routing`), under each routing rule.

Every side serves Fleet1's requests (lognormal code-service lengths, configs/fleet/fleet1_v2.toml) with
its replica configuration (A100-80GB, Llama-3-8B fp16, batch cap 32, 2,048 batched tokens, KV budget
1.0) at a constant Poisson load of `rate` req/s per replica, NUM_REPLICAS replicas all serving. A
request meets its SLOs when its TTFT (+ the project's per-request overhead, REQUEST_OVERHEAD_S) is at
most 2 s and its TPOT, (finish - first token) / (output - 1) as vLLM reports it, at most 50 ms
(task 4-v2's class-1 SLOs); attainment is the share of the requests arriving after WARMUP_S that do.
Exact side: SEEDS runs of SECONDS s. Project side: KEYS episodes of STEPS control intervals (60 s), the
first WARMUP_STEPS dropped, keys from `evaluate.training_key(0)`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from iteration_sim import MAX_BATCHED_TOKENS, ProjectSteps  # noqa: E402
from vllm_worker import Worker  # noqa: E402

OUT = HERE / "fleet_routing.json"
NUM_REPLICAS = 16
RATES = (0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 2.5)  # [req/s per replica]
BATCH_CAP = 32
TTFT_SLO_S, TPOT_SLO_S = 2.0, 0.05
# (median [tokens], log-sd, low, high) of the prompt and output laws: configs/fleet/fleet1_v2.toml.
PROMPT = (1801.0, 1.36, 3, 7437)
OUTPUT = (10.6, 0.85, 6, 1899)
SEEDS, SECONDS, WARMUP_S = (0, 1, 2), 1800.0, 300.0
KEYS, STEPS, WARMUP_STEPS = 8, 35, 5
ROUTERS = ("jsq", "random")
# name -> (task, its overrides, routing rule: 0 least-loaded, 1 even)
PROJECT: dict[str, tuple[str, dict[str, Any], int]] = {
    "v1, least-loaded": ("InferenceGym-Fleet1-v1", {}, 0),
    "v1, even": ("InferenceGym-Fleet1-v1", {}, 1),
    "v2, least-loaded (fluid)": ("InferenceGym-Fleet1-v2", {}, 0),
    "v2, even (whole, random)": ("InferenceGym-Fleet1-v2", {}, 1),
    "v2 + whole least-loaded (JSQ)": ("InferenceGym-Fleet1-v2", {"fleet": {"least_loaded_unit": "request"}}, 0),
    "v2 + fluid even": ("InferenceGym-Fleet1-v2", {"fleet": {"even_unit": "fluid"}}, 1),
}


def lengths(rng: np.random.Generator, n: int, law: tuple[float, float, int, int]) -> np.ndarray:
    """n integer lengths [tokens] of a clamped lognormal (median, log-sd, low, high)."""
    median, sigma, low, high = law
    return np.round(np.clip(np.exp(np.log(median) + sigma * rng.standard_normal(n)), low, high)).astype(np.int64)


def exact_requests(rate: float, router: str, seed: int, steps: ProjectSteps,
                   replicas: int = NUM_REPLICAS) -> dict[str, np.ndarray]:
    """The requests of one exact run of `replicas` workers at `rate` req/s each that arrived after
    WARMUP_S: `worker` (int64), `first_s` (first token [s]), `ttft_s` (+ REQUEST_OVERHEAD_S [s]),
    `tpot_s` ((finish - first token) / (output - 1) [s per token]), `output` (int64 [tokens])."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * replicas * SECONDS))
    arrival = np.sort(rng.uniform(0.0, SECONDS, n))
    prompt, output = lengths(rng, n, PROMPT), lengths(rng, n, OUTPUT)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    workers = [Worker(BATCH_CAP, steps, steps.kv_capacity, MAX_BATCHED_TOKENS, first, finish)
               for _ in range(replicas)]
    pick = rng.integers(0, replicas, n)
    ties = rng.random((n, replicas))
    worker = np.zeros(n, np.int64)
    for i in range(n):
        t = float(arrival[i])
        if router == "jsq":
            for w in workers:
                w.run_until(t)
            load = np.array([w.in_system(t) for w in workers], np.float64)
            target = int(np.argmin(load + ties[i]))  # fewest in system, ties at random
        else:
            target = int(pick[i])
        worker[i] = target
        workers[target].add(i, t, int(prompt[i]), int(output[i]))
    for w in workers:
        w.run_until()
    kept = arrival >= WARMUP_S
    return {"worker": worker[kept], "first_s": first[kept],
            "ttft_s": first[kept] - arrival[kept] + steps.request_overhead_s,
            "tpot_s": (finish[kept] - first[kept]) / np.maximum(output[kept] - 1, 1), "output": output[kept]}


def exact_attainment(rate: float, router: str, seed: int, steps: ProjectSteps,
                     replicas: int = NUM_REPLICAS) -> tuple[int, int, int, int]:
    """(requests measured, meeting both SLOs, missing TTFT, missing TPOT) of one exact run of
    `replicas` workers at `rate` req/s each (`exact_requests`)."""
    run = exact_requests(rate, router, seed, steps, replicas)
    late_ttft, late_tpot = run["ttft_s"] > TTFT_SLO_S, run["tpot_s"] > TPOT_SLO_S
    return len(late_ttft), int((~late_ttft & ~late_tpot).sum()), int(late_ttft.sum()), int(late_tpot.sum())


def exact_rows(log: Any) -> list[dict[str, Any]]:
    steps = ProjectSteps("a100-80gb", "fp16")
    rows = []
    for rate in RATES:
        for router in ROUTERS:
            t0 = time.time()
            runs = np.array([exact_attainment(rate, router, s, steps) for s in SEEDS], np.float64)
            total = runs.sum(axis=0)
            rows.append({"side": "exact", "router": router, "rate": rate, "requests": int(total[0]),
                         "attainment": total[1] / total[0], "ttft_missed": total[2] / total[0],
                         "tpot_missed": total[3] / total[0],
                         "per_seed_attainment": (runs[:, 1] / runs[:, 0]).tolist()})
            log(f"exact {router} {rate}: {rows[-1]['attainment']:.4f} ({time.time() - t0:.0f} s)")
    return rows


def fleet_run(env: Any, params: Any, rule: int) -> Any:
    """jit(vmap over keys) of one constant-load episode of NUM_REPLICAS serving replicas:
    (key, load [req/s per replica]) -> (judged, missed) [requests] after WARMUP_STEPS."""
    import jax
    import jax.numpy as jnp

    n = jnp.int32(NUM_REPLICAS)
    action = jnp.stack([n, jnp.int32(rule)])

    def episode(key: jax.Array, load: jax.Array) -> tuple[jax.Array, jax.Array]:
        p = params.replace(curve=params.curve.replace(rate=jnp.full_like(params.curve.rate, load * n)),
                           initial_replicas=n)
        _, state = env.reset_env(key, p)

        def body(st: Any, t: jax.Array) -> tuple[Any, tuple[jax.Array, jax.Array]]:
            _, st, _, _, _, info = env.step_env(jax.random.fold_in(key, t), st, action, p)
            kept = t >= WARMUP_STEPS
            totals = info["totals"]
            return st, (jnp.where(kept, totals.judged, 0.0), jnp.where(kept, totals.slo_violations, 0.0))

        judged, missed = jax.lax.scan(body, state, jnp.arange(STEPS))[1]
        return judged.sum(), missed.sum()

    return jax.jit(jax.vmap(episode, in_axes=(0, None)))


def project_rows(log: Any) -> list[dict[str, Any]]:
    import jax.numpy as jnp

    from inferencegym_jax import evaluate
    from inferencegym_jax.fleet.tasks import make_fleet

    rows = []
    keys = evaluate.episode_keys(evaluate.training_key(0), 0, KEYS)
    for name, (task, overrides, rule) in PROJECT.items():
        env, params = make_fleet(task, **overrides)
        run = fleet_run(env, params, rule)
        for rate in RATES:
            t0 = time.time()
            judged, missed = (np.asarray(x, np.float64) for x in run(keys, jnp.float32(rate)))
            rows.append({"side": "project", "variant": name, "task": task, "overrides": overrides,
                         "rule": ("least_loaded", "even")[rule], "rate": rate,
                         "requests": float(judged.sum()), "attainment": 1.0 - missed.sum() / judged.sum(),
                         "per_key_attainment": (1.0 - missed / judged).tolist()})
            log(f"{name} {rate}: {rows[-1]['attainment']:.4f} ({time.time() - t0:.0f} s)")
    return rows


def summary_markdown(doc: dict[str, Any]) -> str:
    """The README table: attainment by load per replica, one column per exact router and project variant."""
    names = [f"exact, {r}" for r in ROUTERS] + list(PROJECT)
    lines = ["| req/s per replica | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for rate in doc["rates"]:
        at = {(f"exact, {r['router']}" if r["side"] == "exact" else r["variant"]): r["attainment"]
              for r in doc["rows"] if r["rate"] == rate}
        lines.append(f"| {rate} | " + " | ".join(f"{at[n]:.4f}" for n in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--report", action="store_true", help="print the README table from the JSON and exit")
    ap.add_argument("--project-only", action="store_true", help="rerun the project's rows, keep the JSON's exact ones")
    args = ap.parse_args(argv)
    if args.report:
        print(summary_markdown(json.loads(Path(args.out).read_text())))
        return

    def log(line: str) -> None:
        print(line, flush=True)

    if args.project_only:
        exact = [r for r in json.loads(Path(args.out).read_text())["rows"] if r["side"] == "exact"]
    else:
        exact = exact_rows(log)
    rows = exact + project_rows(log)
    doc = {"what": "SLO attainment of 16 Fleet1 replicas by router: exact schedulers against the project's fleets "
                   "(experiments/crosscheck/fleet_routing.py's docstring)",
           "command": "python experiments/crosscheck/fleet_routing.py",
           "made_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "replicas": NUM_REPLICAS, "rates": list(RATES), "seeds": list(SEEDS), "seconds": SECONDS,
           "warmup_s": WARMUP_S, "episodes": KEYS, "steps": STEPS, "warmup_steps": WARMUP_STEPS,
           "units": "rate [req/s per replica], attainment [requests meeting both SLOs / requests]", "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(summary_markdown(doc))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
