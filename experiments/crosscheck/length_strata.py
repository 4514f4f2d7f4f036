"""The mixed engine's cross-check under prompt-length strata rules (traffic.strata).

    .venv-dev/bin/python experiments/crosscheck/length_strata.py   # writes experiments/crosscheck/length_strata.json

The "moments" side is docs/crosscheck_mixed.json as it stands (`scripts/crosscheck.py --engine mixed`:
the workload's default rule). This runs the same points, rates, seconds, episodes and seed (compare.build)
under the library's "clamped" rule and two alternatives written here, which drop the double count of
the "moments" rule (strata module docstring):
  "quantiles": the law's own clamped quantiles at the strata's middle probabilities, whatever the
    interval's drawn sum (a fresh request's length is a draw from its law);
  "conditional": the spread about the interval's mean shrunk by sqrt(1 - 1/n) (the spread of one of
    n lengths given their sum, exact for a normal law), none above the interval's sum or the clamp.
It sets their summaries side by side: rows within issue 41's targets against AISimulate, and like for
like against the exact per-iteration scheduler with the project's kernels, with each TTFT p99 row's
error under every rule. `summary_markdown` renders the table experiments/crosscheck/README.md shows.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from inferencegym_jax.files import atomic_write_json
from inferencegym_jax.generate import crosscheck
from inferencegym_jax.numerics import safe_div
from inferencegym_jax.traffic import strata, workload

ROOT = pathlib.Path(__file__).resolve().parents[2]
MOMENTS = ROOT / "docs" / "crosscheck_mixed.json"
REFERENCE = ROOT / "experiments" / "crosscheck" / "reference.json"
EXACT = ROOT / "experiments" / "crosscheck" / "iteration_sim.json"
OUT = ROOT / "experiments" / "crosscheck" / "length_strata.json"
COMMAND = "python experiments/crosscheck/length_strata.py"
CRITERIA = ("ttft_p50", "ttft_mean", "ttft_p99", "tpot_mean", "saturation")
SIDES = (("reference", "summary"), ("exact", "like_for_like"))
RULES = ("moments", "clamped", "quantiles", "conditional")
MIDDLE_P = jnp.asarray([0.2, 0.55, 0.8, 0.94, 0.99], jnp.float32)  # the strata's middle probabilities


def quantile_strata(arrivals: workload.Arrivals, dist: workload.LengthDist) -> jax.Array:
    """The law's clamped quantiles relative to the interval's mean (uniform and lognormal laws: the
    cross-check's)."""
    z = jnp.asarray(strata.LENGTH_STRATA_Z, jnp.float32)
    col = jax.tree_util.tree_map(lambda x: x[:, None], dist)
    lengths = jnp.where(col.kind == 0, col.low + MIDDLE_P * (col.high - col.low),
                        jnp.clip(col.median1 * jnp.exp(col.sigma1 * z), col.low, col.high))
    return safe_div(lengths, safe_div(arrivals.prompt_tokens, arrivals.count)[:, None])


def conditional_strata(arrivals: workload.Arrivals, dist: workload.LengthDist) -> jax.Array:
    """The spread shrunk by sqrt(1 - 1/n), capped at min(n, high / mean)."""
    n = jnp.maximum(arrivals.count, 1.0)
    spread = 1.0 + (arrivals.prompt_strata - 1.0) * jnp.sqrt(1.0 - 1.0 / n)[:, None]
    longest = safe_div(dist.high, safe_div(arrivals.prompt_tokens, arrivals.count))
    return strata.capped_strata(spread, jnp.minimum(n, jnp.where(longest > 0.0, longest, jnp.inf)))


ALTERNATIVES: dict[str, Callable[[workload.Arrivals, workload.LengthDist], jax.Array]] = {
    "quantiles": quantile_strata, "conditional": conditional_strata}


@contextlib.contextmanager
def alternative_rule(name: str) -> Iterator[None]:
    """workload.advance with the "moments" strata replaced by an alternative rule's (constant schedules)."""
    original = workload.advance

    def advance(draws: Any, state: Any, t_s: Any, dt_s: Any, params: Any) -> Any:
        state, arrivals = original(draws, state, t_s, dt_s, params)
        return state, dataclasses.replace(arrivals, prompt_strata=ALTERNATIVES[name](arrivals, params.prompt))

    workload.advance = advance
    jax.clear_caches()  # the load test's jitted episodes were traced with another rule under the same params
    try:
        yield
    finally:
        workload.advance = original
        jax.clear_caches()


def counts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{side: {criterion: [within, total, median_abs]}} of a cross-check document."""
    out = {}
    for side, block in SIDES:
        summary = doc[block] if side == "reference" else doc[block]["summary"]
        out[side] = {c: [summary[c]["all"]["within"], summary[c]["all"]["total"], summary[c]["all"]["median_abs"]]
                     for c in CRITERIA}
    return out


def p99_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each load row's TTFT p99 (net of the overhead) errors against both sides."""
    return [{"point": p["name"], "load_fraction": r["reference"]["load_fraction"],
             "reference": r["errors"]["net"]["ttft_p99_s"], "exact": r["exact_errors"]["net"]["ttft_p99_s"]}
            for p in doc["points"] for r in p["rows"] if "ttft_p99_s" in r["errors"]["net"]]


def summary_markdown(study: dict[str, Any]) -> str:
    """The README's table: rows within target (median |error|) per criterion and rule, against both sides."""
    rules = list(study["rules"])
    head = [f"vs AISimulate: {r}" for r in rules] + [f"like for like: {r}" for r in rules]
    lines = ["| criterion | target | " + " | ".join(head) + " |", "|---|---:|" + "---:|" * len(head)]
    tolerance = {c["name"]: c["tolerance"] for c in study["criteria"]}
    for c in CRITERIA:
        cells = []
        for side, _ in SIDES:
            for rule in rules:
                within, total, median = study["rules"][rule][side][c]
                cells.append(f"{within}/{total} ({100 * median:.1f} %)")
        lines.append(f"| {c} | {100 * tolerance[c]:.0f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_rule(rule: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The cross-check document of one rule (the library's rules by name, the alternatives patched in)."""
    ref = crosscheck.load_reference(REFERENCE)
    exact = (crosscheck.load_exact(EXACT), EXACT, "experiments/crosscheck/iteration_sim.json")
    points = crosscheck.select_points(ref, None)
    library_rule = rule if rule in workload.LENGTH_STRATA_RULES else "moments"
    with alternative_rule(rule) if rule in ALTERNATIVES else contextlib.nullcontext():
        return crosscheck.build(ref, REFERENCE, "experiments/crosscheck/reference.json", points,
                                {**settings, "length_strata": library_rule}, COMMAND, exact)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    args = ap.parse_args(argv)
    moments = json.loads(MOMENTS.read_text())
    settings = {k: moments["settings"][k] for k in ("seconds", "warmup", "episodes", "seed", "engine")}
    docs = {"moments": moments, **{rule: run_rule(rule, settings) for rule in RULES[1:]}}
    study = {"what": "the mixed engine's cross-check under four prompt-length strata rules", "command": COMMAND,
             "settings": settings, "moments_source": "docs/crosscheck_mixed.json",
             "criteria": moments["settings"]["criteria"], "rules": {r: counts(d) for r, d in docs.items()},
             "ttft_p99_rows": {r: p99_rows(d) for r, d in docs.items()},
             "wall_s": {r: d["volatile"]["wall_s"] for r, d in docs.items() if r != "moments"}}
    atomic_write_json(args.out, study)
    print(summary_markdown(study))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
