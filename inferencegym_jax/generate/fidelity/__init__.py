"""Compare the performance model with every published calibration point and the shipped kernel
profiles; `render()` is the text of docs/FIDELITY.md (written by scripts/fidelity_report.py).

Each anchor is a published number (docs/DESIGN.md's calibration points, the GPU profiles of
data/profiling), the value `inferencegym_jax.perf_model` simulates for the same quantity, the
relative error and a tolerance: about 10-15 % against kernel profiles, 15-20 % against
end-to-end serving numbers. Rows whose published value is an input of the model (the
speculative acceptance table, prices) or the target of a fit (the H100 TPOT) are labelled so:
they check the wiring, they do not validate anything. An anchor outside its tolerance carries
the explanation of the mismatch, with its source, and a bound that tests/test_fidelity.py
still enforces.

The profile tables are read by `inferencegym_jax.generate.calibration` (pandas); the knee-model
comparison refits them with scipy, imported only there (a dev dependency).

  anchor   the Anchor record, the tolerances, the kernel-only forward pass (kernels_only, forward_s).
  design   docs/DESIGN.md's calibration points and the fitted constants against them.
  tables   the kernel profile tables at several token counts, the knee-model variants, the
           physical floors.
  report   all_anchors() and render(), the text of docs/FIDELITY.md.
"""

from inferencegym_jax.generate.fidelity.anchor import (
    A100_VIDUR,
    E2E_TOL,
    EXACT_TOL,
    H100_VIDUR,
    KERNEL_POINT_TOL,
    KERNEL_TOL,
    Anchor,
    forward_s,
    kernels_only,
)
from inferencegym_jax.generate.fidelity.design import (
    DESIGN_GROUP,
    FITTED_GROUP,
    MARLIN,
    design_anchors,
    fitted_constant_anchors,
)
from inferencegym_jax.generate.fidelity.report import all_anchors, render
from inferencegym_jax.generate.fidelity.tables import (
    TABLE_GROUP,
    TABLE_TOKENS,
    WINDOW,
    floor_ratio,
    knee_model_comparison,
    profile_value,
    scatter_example,
    table_anchors,
)

__all__ = [
    "A100_VIDUR",
    "DESIGN_GROUP",
    "E2E_TOL",
    "EXACT_TOL",
    "FITTED_GROUP",
    "H100_VIDUR",
    "KERNEL_POINT_TOL",
    "KERNEL_TOL",
    "MARLIN",
    "TABLE_GROUP",
    "TABLE_TOKENS",
    "WINDOW",
    "Anchor",
    "all_anchors",
    "design_anchors",
    "fitted_constant_anchors",
    "floor_ratio",
    "forward_s",
    "kernels_only",
    "knee_model_comparison",
    "profile_value",
    "render",
    "scatter_example",
    "table_anchors",
]
