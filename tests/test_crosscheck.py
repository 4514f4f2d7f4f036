"""docs/CROSSCHECK.md and docs/crosscheck.json (scripts/crosscheck.py, issue 41): the document is rendered
from the JSON and not stale, the JSON's reference side is reference.json's, its static comparison and its
errors are what the code computes now, and (slow tier) the project side reproduces for two points."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from inferencegym_jax.generate import crosscheck

ROOT = Path(__file__).resolve().parents[1]
STORED_JSON = ROOT / "docs" / "crosscheck.json"
STORED_MD = ROOT / "docs" / "CROSSCHECK.md"
REFERENCE = ROOT / "experiments" / "crosscheck" / "reference.json"
# Two points of the slow rerun: both GPUs, both batch caps, both length tables.
RERUN_POINTS = ("a100-sxm-80gb/64/fixed-512-128/fp16", "h100-sxm/256/lognormal-sharegpt/fp16")


def _script() -> ModuleType:
    """scripts/crosscheck.py as a module (a script of the checkout, not of the package)."""
    spec = importlib.util.spec_from_file_location("crosscheck", ROOT / "scripts" / "crosscheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cc = crosscheck
script = _script()


@pytest.fixture(scope="module")
def stored():
    return json.loads(STORED_JSON.read_text())


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


def test_render_mode_reproduces_the_stored_document_byte_for_byte(stored, tmp_path):
    out = tmp_path / "CROSSCHECK.md"
    script.main(["--render", "--json", str(STORED_JSON), "--md", str(out)])
    assert out.read_bytes() == STORED_MD.read_bytes(), "stale: rerun python scripts/crosscheck.py --render"
    # The volatile fields are only where the test and the reader expect them.
    assert set(stored) == {"schema", "command", "settings", "reference", "points", "summary", "static", "volatile"}
    assert {"generated_utc", "wall_s", "point_wall_s"} <= set(stored["volatile"])


def test_the_stored_reference_side_is_reference_json(stored, reference):
    by_name = {cc.point_name(p): p for p in reference["points"]}
    assert [p["name"] for p in stored["points"]] == list(by_name)  # the full run: every point, in order
    for point in stored["points"]:
        ref = by_name[point["name"]]
        assert point["project"] == ref["project"]
        *loads, sat = point["rows"]
        assert len(loads) == len(ref["rates"])
        for row, ref_row in zip(loads, ref["rates"]):
            assert row["project"]["rate"] == ref_row["rate"]  # the project ran at the reference's rates
            for key, value in row["reference"].items():
                want = ([s[key.removesuffix("_per_seed")] for s in ref_row["per_seed"]]
                        if key.endswith("_per_seed") else ref_row[key])
                assert value == want, (point["name"], key)
        assert sat["project"]["rate"] == sat["reference"]["load_fraction"] == "saturation"
        for key, value in sat["reference"].items():
            want = {"load_fraction": "saturation",
                    "closed_loop_requests_per_s": ref["saturation"]["closed_loop"]["requests_per_s"],
                    "requests_per_s_per_seed": [s["requests_per_s"] for s in ref["saturation"]["per_seed"]]}
            assert value == want.get(key, ref["saturation"].get(key)), (point["name"], key)
    prov = stored["reference"]
    assert prov["sha256"] == hashlib.sha256(REFERENCE.read_bytes()).hexdigest()
    for key in ("tools", "data_tables", "settings", "generated_utc", "command", "schema"):
        assert prov[key] == reference[key], key


def test_the_static_comparison_is_what_perf_model_gives_now(stored, reference):
    fresh = cc.static_comparison(reference)
    assert fresh == stored["static"], "perf_model changed: rerun python scripts/crosscheck.py"
    for key, group in fresh.items():  # every non-oom reference row, its time copied exactly
        gpu, dtype = key.split("/")
        want = [r["time_s"] for phase in ("prefill", "decode") for r in reference["static"][phase]
                if (r["gpu"], r["dtype"]) == (gpu, dtype) and not r["oom"]]
        assert [r["reference_s"] for r in group["rows"]] == want
    assert sum(g["oom_skipped"] for g in fresh.values()) == 15  # reference.json's README: 15 of 234 oom


def test_the_stored_errors_and_summaries_follow_from_the_two_sides(stored):
    for point in stored["points"]:
        for row in point["rows"]:
            assert row["errors"] == cc.row_errors(row["reference"], row["project"], point["request_overhead_s"])
    assert cc.criteria_summary(stored["points"]) == stored["summary"]
    total = {name: s["all"]["total"] for name, s in stored["summary"].items()}
    n = len(stored["points"])
    assert total == {"saturation": n, "ttft_p50": 4 * n, "ttft_mean": 4 * n, "ttft_p99": 4 * n, "tpot_mean": 5 * n}


def test_row_errors_judge_ttft_net_of_the_overhead_and_apply_each_criterion_to_its_rows():
    ref = {"load_fraction": 0.5, "rate": 2.0, "requests_per_s": 2.0, "ttft_p50_s": 0.100, "ttft_p99_s": 0.200,
           "ttft_mean_s": 0.100, "tpot_mean_s": 0.010}
    proj = {"rate": 2.0, "requests_per_s": 1.0, "ttft_p50_s": 0.134, "ttft_p99_s": 0.260, "ttft_mean_s": 0.136,
            "tpot_mean_s": 0.0111}
    e = cc.row_errors(ref, proj, overhead=0.020)
    assert e["as_reported"]["ttft_p50_s"] == pytest.approx(0.34) and e["net"]["ttft_p50_s"] == pytest.approx(0.14)
    crit = e["criteria"]
    assert set(crit) == {"ttft_p50", "ttft_mean", "ttft_p99", "tpot_mean"}  # no saturation criterion at a load
    assert crit["ttft_p50"]["pass"] and not crit["ttft_mean"]["pass"]  # +14 % in, +16 % out (15 %)
    assert crit["ttft_p99"]["pass"] and not crit["tpot_mean"]["pass"]  # +20 % in (25 %), +11 % out (10 %)
    sat = cc.row_errors({"load_fraction": "saturation", "requests_per_s": 10.0, "tpot_mean_s": 0.03},
                        {"rate": "saturation", "requests_per_s": 9.6, "ttft_p50_s": 9.0, "tpot_mean_s": 0.03}, 0.02)
    assert set(sat["criteria"]) == {"saturation", "tpot_mean"} and not sat["criteria"]["saturation"]["pass"]


def test_bad_points_and_settings_exit_with_one_line_naming_the_flag(capsys):
    for argv, needle in ((["--points", "a100/1/none/fp16"], "--points 'a100/1/none/fp16' is not one of"),
                         (["--episodes", "0"], "--episodes 0 is out of range")):
        with pytest.raises(SystemExit) as exc:
            script.main(argv)
        message = str(exc.value.code)
        assert message.startswith("crosscheck: ") and needle in message and "\n" not in message


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (a row with no first token is NaN on both runs)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.slow
def test_the_project_side_reproduces_for_two_points(stored, reference):
    """run_loadtest is deterministic (same seed, same bits): the rerun equals the stored rows exactly."""
    by_name = {cc.point_name(p): p for p in reference["points"]}
    stored_points = {p["name"]: p for p in stored["points"]}
    for name in RERUN_POINTS:
        rows = cc.project_rows(by_name[name], stored["settings"])
        want = [r["project"] for r in stored_points[name]["rows"]]
        assert len(rows) == len(want)
        for got, w in zip(rows, want):
            bad = {k: (got[k], w[k]) for k in w if not _same(got[k], w[k])}
            assert not bad, (name, w["rate"], bad)
