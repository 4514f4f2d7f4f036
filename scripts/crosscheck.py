"""End-to-end cross-check against NVIDIA AISimulate / AIConfigurator (issue 41): writes docs/crosscheck.json
and docs/CROSSCHECK.md (the fluid engine), or docs/crosscheck_mixed.json and docs/CROSSCHECK_MIXED.md
(`--engine mixed`).

    python scripts/crosscheck.py                  # every point of the stored reference; rewrites both files
    python scripts/crosscheck.py --engine mixed   # the same for the mixed engine, its own two files
    python scripts/crosscheck.py --quick          # one point, short runs; writes $TMPDIR/crosscheck_quick.{json,md}
    python scripts/crosscheck.py --render         # rewrites docs/CROSSCHECK.md from docs/crosscheck.json only
                                                  # (--engine mixed: CROSSCHECK_MIXED.md from crosscheck_mixed.json)

The reference side is stored (experiments/crosscheck/reference.json, written by
experiments/crosscheck/reference.py in the `crosscheck` venv); nothing here runs it. The project side is
`inferencegym_jax.loadtest.run_loadtest` at each reference point's load rows (the reference's exact offered
`rate`s) plus a saturation row; the static side is `perf_model.prefill_time` / `decode_step_time` against
the reference's AIConfigurator step-time tables. Errors are project / reference - 1. Like for like, the
same project rows are also compared with the exact per-iteration scheduler run with the project's own kernels
(--exact, experiments/crosscheck/iteration_sim.json, mode "project"; stored, nothing here runs it). Everything
the document says comes from the JSON (`render`), so tests/test_crosscheck.py can check it is not stale.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from inferencegym_jax.files import atomic_write_json, atomic_write_text
from inferencegym_jax.generate import crosscheck
from inferencegym_jax.generate.crosscheck.compare import (
    DEFAULT_ENGINE,
    DEFAULT_EPISODES,
    DEFAULT_SECONDS,
    DEFAULT_SEED,
    DEFAULT_WARMUP,
    ENGINES,
    PAGES,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "experiments" / "crosscheck" / "reference.json"
EXACT = ROOT / "experiments" / "crosscheck" / "iteration_sim.json"
DOCS = ROOT / "docs"
# --quick: a smoke run of one point
QUICK = {"seconds": 120, "warmup": 20, "episodes": 2}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="rewrite --md from --json, run nothing")
    parser.add_argument("--quick", action="store_true", help="one point, 120 s runs, 2 episodes (smoke)")
    parser.add_argument("--points", nargs="+", metavar="NAME", help="reference point names, gpu/cap/lengths/dtype")
    parser.add_argument("--seconds", type=int, help=f"measured seconds per episode (default {DEFAULT_SECONDS})")
    parser.add_argument("--warmup", type=int, help=f"warm-up seconds dropped (default {DEFAULT_WARMUP})")
    parser.add_argument("--episodes", type=int, help=f"episodes per rate (default {DEFAULT_EPISODES})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--engine", default=DEFAULT_ENGINE, help=f"engine model, one of {list(ENGINES)} "
                        f"(default {DEFAULT_ENGINE})")
    parser.add_argument("--reference", type=pathlib.Path, default=REFERENCE)
    parser.add_argument("--exact", type=pathlib.Path, default=EXACT,
                        help="the exact scheduler's rows for the like-for-like table (iteration_sim.json)")
    parser.add_argument("--json", type=pathlib.Path, help="output JSON (default docs/crosscheck.json, "
                        "docs/crosscheck_mixed.json for --engine mixed; $TMPDIR/crosscheck_quick[_mixed].json "
                        "for --quick or --points)")
    parser.add_argument("--md", type=pathlib.Path, help="output markdown (beside --json's default likewise)")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> dict[str, Any]:
    """seconds, warmup, episodes, seed from the flags (--quick's smaller defaults), checked."""
    base = QUICK if args.quick else {"seconds": DEFAULT_SECONDS, "warmup": DEFAULT_WARMUP,
                                     "episodes": DEFAULT_EPISODES}
    s = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in base.items()}
    for key, low in (("seconds", 1), ("warmup", 0), ("episodes", 1)):
        if s[key] < low:
            raise ValueError(f"--{key} {s[key]} is out of range (>= {low})")
    return {**s, "seed": args.seed, "engine": crosscheck.check_engine(args.engine)}


def output_paths(args: argparse.Namespace) -> tuple[pathlib.Path, pathlib.Path]:
    """Where to write: docs/ (the engine's `PAGES`) for a full run or --render, the temp folder for a partial run."""
    engine = crosscheck.check_engine(args.engine)
    partial = (args.quick or args.points) and not args.render
    suffix = "" if engine == DEFAULT_ENGINE else f"_{engine}"
    folder = pathlib.Path(tempfile.gettempdir())
    json_name, md_name = PAGES[engine]
    default_json = folder / f"crosscheck_quick{suffix}.json" if partial else DOCS / json_name
    default_md = folder / f"crosscheck_quick{suffix}.md" if partial else DOCS / md_name
    return args.json or default_json, args.md or default_md


def label_of(path: pathlib.Path) -> str:
    """A path as the document names it: relative to the repository when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        out_json, out_md = output_paths(args)
        if args.render:
            if not out_json.is_file():
                raise ValueError(f"--json {out_json} does not exist (run scripts/crosscheck.py first)")
            atomic_write_text(out_md, crosscheck.render(json.loads(out_json.read_text())))
            print(f"wrote {out_md}")
            return
        settings = settings_from(args)
        ref = crosscheck.load_reference(args.reference)
        names = args.points or ([crosscheck.point_name(ref["points"][0])] if args.quick else None)
        points = crosscheck.select_points(ref, names)
        command = "python scripts/crosscheck.py" + "".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:]))
        exact = (crosscheck.load_exact(args.exact), args.exact.resolve(), label_of(args.exact))
        doc = crosscheck.build(ref, args.reference.resolve(), label_of(args.reference), points, settings, command,
                               exact)
    except ValueError as e:  # ours, or run_loadtest's (a setting out of its range, named)
        sys.exit(f"crosscheck: {e}")
    atomic_write_json(out_json, doc)
    atomic_write_text(out_md, crosscheck.render(doc))
    print(f"wrote {out_json} and {out_md} ({doc['volatile']['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
