"""Fuzz campaign: adversarial actions on randomised in-range params, every task and GPU.

    python scripts/fuzz.py --steps 10000000          # the campaign of docs/RELIABILITY.md
    python scripts/fuzz.py --steps 100000 --tasks 1  # a quick one
    python scripts/fuzz.py --engine mixed            # every task on the mixed engine

Prints a Markdown table (inferencegym_jax.testing.fuzz.table) and exits 1 if any count is nonzero.
"""

from __future__ import annotations

import argparse
import sys

import jax

from inferencegym_jax import tasks
from inferencegym_jax.serving.types import ENGINES
from inferencegym_jax.testing import fuzz


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000_000, help="env steps in all (default 10^7)")
    parser.add_argument("--episode-steps", type=int, default=200, help="steps each env runs (default 200)")
    parser.add_argument("--tasks", nargs="*", default=None, help="task numbers or ids (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--default-params", action="store_true", help="the tasks' own params, not randomised")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="run every task on this engine model instead of its own (docs/GUIDE.md, Fidelity)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.episode_steps < 1:
        parser.error("--steps and --episode-steps must be >= 1")
    try:
        env_ids = [tasks.resolve_id(t, "--tasks ") for t in args.tasks] if args.tasks else None
    except ValueError as err:
        parser.error(str(err))
    results, seconds = fuzz.run_campaign(args.steps, args.episode_steps, args.seed, env_ids=env_ids,
                                         randomize=not args.default_params, engine=args.engine)
    print(fuzz.table(results))
    steps = sum(r.steps for r in results)
    print(f"\n{steps:,} env steps in {seconds:.0f} s (compile included) on {jax.devices()[0].platform}, "
          f"jax {jax.__version__}, seed {args.seed}, engine {args.engine or 'of each task'}")
    bad = sum(r.non_finite + r.reward_out_of_range + r.obs_out_of_range + r.kv_over_capacity for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
