"""Compare the performance model with every published calibration point and the shipped kernel
profiles; write docs/FIDELITY.md.

The anchors, their tolerances and the document are `inferencegym_jax.generate.fidelity`;
tests/test_fidelity.py holds each anchor to its tolerance and fails when the doc is stale.

Usage: python scripts/fidelity_report.py [--out docs/FIDELITY.md] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferencegym_jax.files import atomic_write_text
from inferencegym_jax.generate import fidelity

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "FIDELITY.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOC)
    parser.add_argument("--check", action="store_true", help="fail if the file on disk is stale")
    args = parser.parse_args()
    text = fidelity.render()
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            sys.exit(f"{args.out} is stale: rerun scripts/fidelity_report.py")
        print(f"{args.out} is up to date")
        return
    atomic_write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
