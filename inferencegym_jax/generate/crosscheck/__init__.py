"""The end-to-end cross-check against NVIDIA AISimulate / AIConfigurator (issue 41), written by
scripts/crosscheck.py: `compare` runs the project side (one engine model per document) and computes the errors
against AISimulate and, like for like, against the exact scheduler (docs/crosscheck.json,
docs/crosscheck_mixed.json), `report` renders each page (docs/CROSSCHECK.md, docs/CROSSCHECK_MIXED.md) from its
document alone."""

from inferencegym_jax.generate.crosscheck.compare import (
    ENGINES,
    PAGES,
    build,
    check_engine,
    criteria_summary,
    exact_rows,
    load_exact,
    load_reference,
    point_name,
    project_rows,
    request_overhead_s,
    row_errors,
    select_points,
    static_comparison,
)
from inferencegym_jax.generate.crosscheck.report import render

__all__ = ["ENGINES", "PAGES", "build", "check_engine", "criteria_summary", "exact_rows", "load_exact",
           "load_reference", "point_name", "project_rows", "render", "request_overhead_s", "row_errors",
           "select_points", "static_comparison"]
