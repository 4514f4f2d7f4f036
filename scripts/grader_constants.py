"""Generate the graders' normalising constants: data/grader_constants.json.

For every registered task (or those of --tasks; the others are kept from the file), on
training-stream keys: the random policy's and the best static configuration's served fraction,
that configuration, and a short probe that fingerprints the simulator. The search is
`inferencegym_jax.generate.grader_constants`; tests/test_graders.py recomputes the probe.

Usage: python scripts/grader_constants.py [--episodes 32] [--seed 0] [--tasks ID ...] [--out PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from inferencegym_jax.files import atomic_write_text
from inferencegym_jax.generate import grader_constants

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "grader_constants.json"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="+", default=None, help="only these tasks (others kept from the file)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    existing = json.loads(args.out.read_text()) if args.out.exists() else {"tasks": {}}
    payload = grader_constants.constants_payload(args.episodes, args.seed, args.tasks, existing,
                                                 log=functools.partial(print, flush=True))
    atomic_write_text(args.out, grader_constants.render(payload))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
