"""The README's baseline table from the JSON `inferencegym baselines --json` writes.

    inferencegym baselines --task 1 --task 2 --task 3 --task 4 --episodes 256 --seed 0 --json results/baselines.json
    python scripts/baselines_markdown.py results/baselines.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from inferencegym_jax import graders


def _cell(value: object, fmt: str) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def rows(task_id: str, records: list[dict]) -> list[str]:
    """One markdown row per policy of a task."""
    number = task_id.split("Task")[1].split("-")[0]
    components = list(graders.GRADER_WEIGHTS[graders.grader_name(task_id)])
    out = []
    for r in records:
        breakdown = ", ".join(f"{c} {r[c]:.2f}" for c in components if _cell(r.get(c), ".2f"))
        latency = f"{r['ttft_p50_s']:.2f} / {r['ttft_p99_s']:.2f}" if _cell(r.get("ttft_p50_s"), ".2f") else ""
        violations = f"{100 * r['slo_violation_rate']:.1f}%" if _cell(r.get("slo_violation_rate"), ".3f") else ""
        out.append(f"| {number} | {r['policy']} | {r['score']:.3f} ± {r['ci95']:.3f} | {breakdown} | "
                   f"{_cell(r.get('tokens/s'), '.0f')} | {latency} | {violations} | "
                   f"{_cell(r.get('cost_per_1k'), '.5f')} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    payload = json.loads(parser.parse_args().json.read_text())
    print("| task | policy | score ± 95% CI | breakdown | tokens/s | TTFT p50 / p99 s | SLO violations | $/1k tokens |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for task_id, records in payload["tasks"].items():
        print("\n".join(rows(task_id, records)))


if __name__ == "__main__":
    main()
