"""Fit the performance model's efficiency constants to the shipped GPU profiles.

Writes `data/calibration.json`; rerunning it reproduces the file byte for byte. The fit (a
smooth-max roofline per GPU on Vidur and LLMServingSim kernel profiles, and the per-step
overhead from the H100 vLLM TPOT anchor) is `inferencegym_jax.generate.calibration`, which reads
the profiles from the package data (data/profiling).

Usage: python scripts/calibrate.py [--out data/calibration.json] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferencegym_jax.files import atomic_write_text
from inferencegym_jax.generate import calibration

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "calibration.json")
    parser.add_argument("--check", action="store_true", help="fail if the file on disk is stale")
    args = parser.parse_args()
    text = calibration.render(calibration.calibrate())
    if args.check:
        if args.out.read_text() != text:
            sys.exit(f"{args.out} is stale: rerun scripts/calibrate.py")
        print(f"{args.out} is up to date")
        return
    atomic_write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
