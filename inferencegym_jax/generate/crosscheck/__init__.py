"""The end-to-end cross-check against NVIDIA AISimulate / AIConfigurator (issue 41), written by
scripts/crosscheck.py: `compare` runs the project side and computes the errors (docs/crosscheck.json),
`report` renders docs/CROSSCHECK.md from that document alone."""

from inferencegym_jax.generate.crosscheck.compare import (
    build,
    criteria_summary,
    load_reference,
    point_name,
    project_rows,
    row_errors,
    select_points,
    static_comparison,
)
from inferencegym_jax.generate.crosscheck.report import render

__all__ = ["build", "criteria_summary", "load_reference", "point_name", "project_rows", "render", "row_errors",
           "select_points", "static_comparison"]
