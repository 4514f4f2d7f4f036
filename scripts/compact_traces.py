"""Compact the raw request traces of ../shared/data/traces into data/traces/*.npz.

The compaction (readers, reproducible .npz bytes, PROVENANCE.txt with each file's sha256) is
`inferencegym_jax.generate.trace_compaction`, whose docstring lists the arrays of each file;
`--check` verifies the files on disk against a fresh compaction.

Usage: python scripts/compact_traces.py [--raw ../shared/data/traces] [--out data/traces] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.generate import trace_compaction

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RAW = ROOT.parent / "shared" / "data" / "traces"
DEFAULT_OUT = ROOT / "data" / "traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=DEFAULT_RAW, help="folder of the raw traces")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="fail if a file on disk differs")
    args = parser.parse_args()
    files = trace_compaction.trace_folder(args.raw)
    if args.check:
        stale = [n for n, b in files.items() if not (args.out / n).exists() or (args.out / n).read_bytes() != b]
        if stale:
            sys.exit(f"stale or missing in {args.out}: {stale}; rerun scripts/compact_traces.py")
        print(f"{args.out}: {len(files)} files up to date")
        return
    for name, data in files.items():
        atomic_write_bytes(args.out / name, data)
        print(f"{args.out / name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
