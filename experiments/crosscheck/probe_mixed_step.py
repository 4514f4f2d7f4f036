"""How AISimulate times one mixed iteration (prefill chunks beside running decodes): a probe with tiny traces.

A request A (512-token prompt, 200 output tokens) decodes alone; a request B arrives at 0.3 s with a prompt of
P tokens and 2 output tokens. B's prompt is prefilled in one iteration beside A's decode (P + 1 <= 2048), so
A's end-to-end latency grows by exactly (mixed iteration - A's decode step) plus the (tiny) cost of B's one
decode beside A's. If the pass were one forward with weights read once, that growth would be well below a
lone prefill of P tokens; if AISimulate adds a prefill pass and a decode step, it is the lone prefill.
Also: prompts prefilled together (a batch of equal prompts, two unequal ones) and a 4,096-token prompt
(two chunks, the second after a 2,048-token prefix), against `iteration_sim.ReferenceSteps` (the fit of
reference.json's static tables that `iteration_sim.py --reference-steps` uses).

    .venv-crosscheck/bin/python experiments/crosscheck/probe_mixed_step.py   # ~10 s, writes probe_mixed_step.json
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from iteration_sim import ReferenceSteps  # noqa: E402
from reference import OperatingPoint, Simulator  # noqa: E402

CASES = (("a100-sxm-80gb", "fp16"), ("h100-sxm", "fp16"), ("h100-sxm", "fp8"))


def main() -> int:
    t0 = time.time()
    ref = json.loads((HERE / "reference.json").read_text())
    sim = Simulator()
    out: list[dict[str, Any]] = []
    for gpu, dtype in CASES:
        point = OperatingPoint(gpu, 64, "fixed-512-128", dtype)
        add = ReferenceSteps(ref["static"], gpu, dtype, additive=True)
        one = ReferenceSteps(ref["static"], gpu, dtype, additive=False)
        table = {
            (r["prompt_tokens"], r["batch"]): r["time_s"]
            for r in ref["static"]["prefill"]
            if r["gpu"] == gpu and r["dtype"] == dtype
        }

        def run(
            arrivals_ms: list[float], prompts: list[int], outputs: list[int], point: OperatingPoint = point
        ) -> list[dict[str, Any]]:
            recs, _ = sim.run(point, np.array(arrivals_ms, float), np.array(prompts), np.array(outputs))
            return recs

        alone = run([0.0], [512], [200])[0]
        decode_s = (alone["e2e_latency_ms"] - alone["ttft_ms"]) / 199 / 1000.0
        rows: list[dict[str, Any]] = []
        for p in (128, 512, 1024, 2000):
            recs = run([0.0, 300.0], [512, p], [200, 2])
            extra = (recs[0]["e2e_latency_ms"] - alone["e2e_latency_ms"]) / 1000.0
            # Model: the mixed iteration replaces one decode step of A; B's later decode beside A adds
            # decode(2) - decode(1). Context of A at that point: 512 + 25-30 tokens (only slightly matters).
            c = 512.0 + 28.0
            b_dec = add.mixed([], [], 2, 2 * c) - add.mixed([], [], 1, c)
            rows.append(
                {
                    "case": f"A decoding + B prompt {p} prefilled beside it",
                    "measured_extra_s": extra,
                    "lone_prefill_s": add.mixed([p], [0], 0, 0.0),
                    "predicted_extra_additive_s": add.mixed([p], [0], 1, c) - add.mixed([], [], 1, c) + b_dec,
                    "predicted_extra_one_forward_s": one.mixed([p], [0], 1, c) - one.mixed([], [], 1, c) + b_dec,
                }
            )
        for b in (2, 4):
            recs = run([0.0] * b, [512] * b, [2] * b)
            rows.append(
                {
                    "case": f"{b} x 512 prefilled together, nothing decoding",
                    "measured_ttft_s": recs[0]["ttft_ms"] / 1000.0,
                    "static_table_s": table[(512, b)],
                    "predicted_s": add.mixed([512] * b, [0] * b, 0, 0.0),
                }
            )
        recs = run([0.0, 0.0], [1000, 300], [2, 2])
        rows.append(
            {
                "case": "1000 + 300 prefilled together",
                "measured_ttft_s": recs[0]["ttft_ms"] / 1000.0,
                "predicted_s": add.mixed([1000, 300], [0, 0], 0, 0.0),
            }
        )
        recs = run([0.0], [4096], [2])
        rows.append(
            {
                "case": "4096 alone (2048 + 2048 after a 2048 prefix)",
                "measured_ttft_s": recs[0]["ttft_ms"] / 1000.0,
                "static_table_one_pass_s": table[(4096, 1)],
                "predicted_s": add.mixed([2048], [0], 0, 0.0) + add.mixed([2048], [2048], 0, 0.0),
            }
        )
        for p in (300, 700, 1000, 1300, 1500, 1800, 3000):
            recs = run([0.0], [p], [2])
            chunks = [min(p, 2048)] + ([p - 2048] if p > 2048 else [])
            prefix = [0] + ([2048] if p > 2048 else [])
            pred = sum(add.mixed([k], [s0], 0, 0.0) for k, s0 in zip(chunks, prefix))
            rows.append(
                {
                    "case": f"{p} alone (lone prefill between the table's lengths)",
                    "measured_ttft_s": recs[0]["ttft_ms"] / 1000.0,
                    "predicted_s": pred,
                }
            )
        out.append({"gpu": gpu, "dtype": dtype, "decode_step_s": decode_s, "rows": rows})
        print(gpu, dtype, json.dumps(rows, indent=1), file=sys.stderr)
    doc = {
        "generated_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.executable, HERE.parents[1]), *sys.argv]),
        "aisimulate": "0.13.0.dev202610270000000085 (reference.py's Simulator, in-process)",
        "cases": out,
        "wall_s": time.time() - t0,
    }
    (HERE / "probe_mixed_step.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
