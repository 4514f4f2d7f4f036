"""`inferencegym loadtest`: one fixed server configuration under constant-rate Poisson traffic,
measured per request (`inferencegym_jax.loadtest`: the method, the statistics, the saturation row).

    inferencegym loadtest --gpu a100-80gb --batch-size 64 --rate 4 8 12 --saturation --json rows.json
    inferencegym loadtest --prompt '{"kind": "lognormal", "median1": 250, "sigma1": 1.0, "low": 8, "high": 4096}' \\
        --output '{"kind": "lognormal", "median1": 200, "sigma1": 0.9, "low": 8, "high": 2048}' --saturation

Prints a table (TTFT and TPOT in ms); `--json OUT` writes the rows (a list of objects with the keys
`loadtest.ROW_KEYS`, SI units) atomically. Every input is checked before the simulation: a bad one
is one line naming its flag, exit status 2 (`inferencegym_jax.cli.main`). JAX is imported inside
the command.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from inferencegym_jax.cli.common import add_command, check_output_file, positive_int, seed_int
from inferencegym_jax.files import atomic_write_json
from inferencegym_jax.profiles import QUANT_TIERS

# loadtest.GPUS, written out here so that building the parser imports no JAX
# (tests/test_loadtest.py checks that they agree).
GPU_CHOICES = ("a100-80gb", "h100-sxm")
ENGINE_CHOICES = ("fluid", "mixed")  # serving.types.ENGINES, likewise
STRATA_CHOICES = ("moments", "clamped")  # workload.LENGTH_STRATA_RULES, likewise
ACCOUNTING_CHOICES = ("completion", "request")  # serving.types.SLO_ACCOUNTINGS less v0's "admission"
# The flag of each LoadPoint field (for the messages of its checks).
FIELD_FLAGS = {"gpu": "--gpu", "batch_size": "--batch-size", "kv_budget": "--kv-budget",
               "spec_length": "--spec-length", "quant_tier": "--quant-tier", "prefill_disagg": "--prefill-disagg",
               "max_batched_tokens": "--max-batched-tokens", "prompt": "--prompt", "output": "--output",
               "engine": "--engine", "length_strata": "--length-strata", "slo_accounting": "--slo-accounting"}
EXAMPLE_TABLE = """'{"kind": "uniform", "low": 512, "high": 512}'"""


def length_table(value: str) -> dict[str, Any]:
    """argparse type: a JSON object (a task file's length table; its keys are checked later)."""
    try:
        table = json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{value!r} is not valid JSON ({err.msg} at character {err.pos}); give a "
                                         f"length table such as {EXAMPLE_TABLE}") from None
    if not isinstance(table, dict):
        raise argparse.ArgumentTypeError(f"{value!r} is not a JSON object; give a length table such as {EXAMPLE_TABLE}")
    return table


def non_negative_int(value: str) -> int:
    """argparse type: an integer >= 0."""
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} must be an integer >= 0")
    return int(value)


def load_point(args: argparse.Namespace) -> Any:
    """The `loadtest.LoadPoint` of the flags; ValueError naming the flag of a bad field."""
    from inferencegym_jax.loadtest import LoadPoint

    fields = {name: getattr(args, name) for name in FIELD_FLAGS}
    try:
        return LoadPoint(**fields)
    except ValueError as err:
        message = str(err)
        # The checks name the field first ("batch_size=..."), a length table's keys anywhere ("prompt.kind").
        field = next((f for f in FIELD_FLAGS if message.startswith(f + "=") or f"{f}." in message), None)
        if field is None:
            raise
        raise ValueError(f"{FIELD_FLAGS[field]}: {message}") from None


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a fixed-width table: rates and throughput, TTFT and TPOT in ms."""
    head = ("rate req/s", "served req/s", "tokens/s", "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms", "TTFT mean ms",
            "TPOT ms")
    keys = ("requests_per_s", "output_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s",
            "tpot_mean_s")
    scale = (1.0, 1.0, 1e3, 1e3, 1e3, 1e3, 1e3)
    lines = ["  ".join(f"{h:>12}" for h in head)]
    for row in rows:
        rate = row["rate"]
        cells = [f"{rate:>12}" if isinstance(rate, str) else f"{rate:>12.4g}"]
        cells += [f"{row[k] * s:>12.2f}" if row[k] * s < 1e4 else f"{row[k] * s:>12.4g}" for k, s in zip(keys, scale)]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def cmd_loadtest(args: argparse.Namespace) -> None:
    """Check every input, run the load test, print the table, write the JSON."""
    out = check_output_file(args.json, "--json") if args.json else None
    if not args.rate and not args.saturation:
        raise ValueError("--rate: give at least one offered rate [req/s], or --saturation")
    from inferencegym_jax import loadtest

    rates = loadtest.check_rates(args.rate or [], "--rate")
    try:
        loadtest.check_run(args.seconds, args.warmup, args.episodes, args.seed)
    except ValueError as err:  # "<name>=<value>: must be ...", the name that of its flag
        raise ValueError(f"--{str(err).split('=', 1)[0]}: {err}") from None
    point = load_point(args)
    start = time.perf_counter()
    rows = loadtest.run_loadtest(point, rates, saturation=args.saturation, seconds=args.seconds, warmup=args.warmup,
                                 episodes=args.episodes, seed=args.seed)
    wall = time.perf_counter() - start
    print(f"{point}\n{args.episodes} episodes x {args.seconds} s measured after {args.warmup} s of warm-up, "
          f"seed {args.seed} ({wall:.1f} s)")
    print(format_table(rows))
    if out is not None:
        atomic_write_json(out, rows)
        print(f"wrote {out}")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `loadtest` subcommand."""
    p = add_command(sub, "loadtest", help="load-test one fixed server configuration: per-request TTFT and TPOT, "
                                          "throughput, saturation")
    p.add_argument("--gpu", choices=GPU_CHOICES, default="a100-80gb")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=64, help="max_num_seqs, in [1, 512]")
    p.add_argument("--kv-budget", dest="kv_budget", type=float, default=1.0,
                   help="fraction of free HBM for the KV cache, in [0.1, 1]")
    p.add_argument("--spec-length", dest="spec_length", type=int, default=0,
                   help="speculative tokens per step, in [0, 8]")
    p.add_argument("--quant-tier", dest="quant_tier", choices=QUANT_TIERS, default="fp16")
    p.add_argument("--prefill-disagg", dest="prefill_disagg", type=int, choices=(0, 1), default=0)
    p.add_argument("--max-batched-tokens", dest="max_batched_tokens", type=int, default=2048,
                   help="tokens per engine step (chunked prefill)")
    p.add_argument("--prompt", type=length_table, default={"kind": "uniform", "low": 512, "high": 512},
                   help="prompt lengths: a task file's length table as JSON")
    p.add_argument("--output", type=length_table, default={"kind": "uniform", "low": 128, "high": 128},
                   help="output lengths: a task file's length table as JSON")
    p.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                   help="the engine model (default: the base task's; docs/GUIDE.md, Fidelity)")
    p.add_argument("--length-strata", dest="length_strata", choices=STRATA_CHOICES, default=None,
                   help="prompt-length strata of the mixed engine's TTFT (default: moments; "
                        "inferencegym_jax.traffic.strata)")
    p.add_argument("--slo-accounting", dest="slo_accounting", choices=ACCOUNTING_CHOICES, default=None,
                   help="request: TPOT per request as vLLM reports it (default: the base task's; "
                        "inferencegym_jax.serving.request_tpot)")
    p.add_argument("--rate", type=float, nargs="+", default=None, help="offered Poisson rates [req/s]")
    p.add_argument("--saturation", action="store_true", help="add the saturation row (inferencegym_jax.loadtest)")
    p.add_argument("--seconds", type=positive_int, default=600, help="measured seconds per episode")
    p.add_argument("--warmup", type=non_negative_int, default=60, help="seconds simulated before measuring")
    p.add_argument("--episodes", type=positive_int, default=4)
    p.add_argument("--seed", type=seed_int, default=0, help="in [0, 2**32 - 1]")
    p.add_argument("--json", default=None, help="write the rows as JSON to this path")
    p.set_defaults(func=cmd_loadtest)
