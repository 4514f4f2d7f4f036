"""data/calibration.json is what inferencegym_jax.generate.calibration fits from data/profiling,
and sane."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from inferencegym_jax import perf_model
from inferencegym_jax.files import shipped
from inferencegym_jax.generate import calibration

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _refit() -> str:
    return calibration.render(calibration.calibrate())


def test_calibration_file_is_not_stale():
    """Refit from the shipped profiles: the file in the repository and the one the installed
    package reads are byte for byte what the script writes."""
    fresh = _refit()
    assert (ROOT / "data" / "calibration.json").read_text() == fresh, "rerun scripts/calibrate.py"
    installed = shipped("data").joinpath("calibration.json").read_text()
    assert installed == fresh, "the installed package carries a stale calibration.json: reinstall"
    assert perf_model.load_calibration() == json.loads(fresh)


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm"])
def test_fitted_constants_are_physical_and_fit_well(gpu):
    cal = json.loads(_refit())["gpus"][gpu]
    # docs/DESIGN.md reads eta_bw ~0.77-0.78 and eta_f ~0.69-0.77 off the same profiles.
    assert 0.7 <= cal["eta_bw"] <= 0.85
    assert 0.65 <= cal["eta_flops"] <= 0.8
    assert 1.0 <= cal["knee_sharpness"] <= 4.0
    assert cal["elementwise_bytes_per_token_per_layer"] > 0 and cal["elementwise_fixed_s_per_layer"] > 0
    assert cal["fit_median_abs_error"] < 0.07 and cal["fit_points"] > 300


def test_step_overhead_meets_the_h100_tpot_anchor():
    cal = json.loads(_refit())
    assert 0.0 < cal["step_overhead_s"] < 2e-3
    h100 = perf_model.get_profile("h100-sxm")
    t = float(perf_model.decode_step_time(h100, 1, perf_model.TPOT_ANCHOR_CONTEXT))
    assert abs(t - perf_model.TPOT_ANCHOR_S) < 2e-6  # the fit, to the file's rounding
