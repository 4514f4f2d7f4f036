"""docs/CROSSCHECK.md + docs/crosscheck.json (the fluid engine) and docs/CROSSCHECK_MIXED.md +
docs/crosscheck_mixed.json (the mixed engine), written by scripts/crosscheck.py (issue 41): each page is
rendered from its JSON and not stale, the JSON's reference side is reference.json's and its like-for-like side
iteration_sim.json's (mode "project"), its static comparison and its errors are what the code computes now,
and (slow tier) the project side reproduces for two fluid points and one mixed point."""

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
DOCS = ROOT / "docs"
REFERENCE = ROOT / "experiments" / "crosscheck" / "reference.json"
EXACT = ROOT / "experiments" / "crosscheck" / "iteration_sim.json"
# Points of the slow rerun per engine: for the fluid engine both GPUs, both batch caps, both length tables; for
# the mixed engine (about twice the fluid's time per point) one, the lognormal lengths that make its tail.
RERUN_POINTS = {"fluid": ("a100-sxm-80gb/64/fixed-512-128/fp16", "h100-sxm/256/lognormal-sharegpt/fp16"),
                "mixed": ("a100-sxm-80gb/256/lognormal-sharegpt/fp16",)}


def _script() -> ModuleType:
    """scripts/crosscheck.py as a module (a script of the checkout, not of the package)."""
    spec = importlib.util.spec_from_file_location("crosscheck", ROOT / "scripts" / "crosscheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cc = crosscheck
script = _script()


def _paths(engine: str) -> tuple[Path, Path]:
    """The engine's stored JSON and page."""
    json_name, md_name = cc.PAGES[engine]
    return DOCS / json_name, DOCS / md_name


@pytest.fixture(scope="module", params=cc.ENGINES)
def engine(request):
    return request.param


def test_the_engines_are_the_servings():
    from inferencegym_jax.serving.types import ENGINES

    assert cc.ENGINES == ENGINES


@pytest.fixture(scope="module")
def stored(engine):
    return json.loads(_paths(engine)[0].read_text())


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def exact():
    return json.loads(EXACT.read_text())


def test_render_mode_reproduces_the_stored_document_byte_for_byte(engine, stored, tmp_path):
    stored_json, stored_md = _paths(engine)
    out = tmp_path / stored_md.name
    script.main(["--render", "--engine", engine, "--json", str(stored_json), "--md", str(out)])
    assert out.read_bytes() == stored_md.read_bytes(), f"stale: rerun scripts/crosscheck.py --engine {engine} --render"
    # The volatile fields are only where the test and the reader expect them.
    assert set(stored) == {"schema", "command", "settings", "reference", "points", "summary", "static",
                           "like_for_like", "volatile"}
    assert {"generated_utc", "wall_s", "point_wall_s"} <= set(stored["volatile"])
    # The page names its engine at the top and links the other engines' pages; the JSON records the engine.
    assert stored["settings"]["engine"] == engine
    head = stored_md.read_text().split("## Summary")[0]
    assert f"the `{engine}` engine" in head.splitlines()[0]
    assert all(f"]({cc.PAGES[e][1]})" in head for e in cc.ENGINES if e != engine)


def test_default_outputs_are_the_engines_own_pages():
    for engine in cc.ENGINES:
        for argv in ([], ["--render"]):
            assert script.output_paths(script.parse_args([*argv, "--engine", engine])) == _paths(engine)


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


def test_the_stored_exact_side_is_iteration_sim_json(stored, reference, exact):
    by_name = {cc.point_name(p): p for p in reference["points"]}
    for point in stored["points"]:
        assert [r["exact"] for r in point["rows"]] == cc.exact_rows(exact, by_name[point["name"]])
    prov = stored["like_for_like"]["exact"]
    assert prov["sha256"] == hashlib.sha256(EXACT.read_bytes()).hexdigest()
    assert prov["mode"] == "project" and prov["mode_settings"] == {"kernels": "project", "composition": "one-forward"}
    for key in ("generated_utc", "command", "schema"):
        assert prov[key] == exact[key], key
    assert prov["request_overhead_s"] == exact["settings"]["request_overhead_s"] == 0.0  # why TTFT is compared net
    # "The same kernels": iteration_sim's NumPy roofline (mode "project") against AIConfigurator's static tables
    # errs as perf_model does now (float64 against float32: ~1e-7), so its rows are still the project's kernels.
    for key, group in exact["static_comparison"].items():
        for phase in ("prefill", "decode"):
            ours, theirs = stored["static"][key]["summary"][phase], group[f"{phase}_rel_err"]
            assert {k: ours[k] for k in ("median", "min", "max", "rows")} == pytest.approx(
                {k: theirs[k] for k in ("median", "min", "max", "rows")}, abs=1e-5), (key, phase)


@pytest.fixture(scope="module")
def static_now(reference):
    return cc.static_comparison(reference)


def test_the_static_comparison_is_what_perf_model_gives_now(stored, reference, static_now):
    fresh = static_now
    assert fresh == stored["static"], "perf_model changed: rerun python scripts/crosscheck.py"
    for key, group in fresh.items():  # every non-oom reference row, its time copied exactly
        gpu, dtype = key.split("/")
        want = [r["time_s"] for phase in ("prefill", "decode") for r in reference["static"][phase]
                if (r["gpu"], r["dtype"]) == (gpu, dtype) and not r["oom"]]
        assert [r["reference_s"] for r in group["rows"]] == want
    assert sum(g["oom_skipped"] for g in fresh.values()) == 15  # reference.json's README: 15 of 234 oom


def test_the_stored_errors_and_summaries_follow_from_the_sides(engine, stored):
    overhead = cc.request_overhead_s(stored["points"][0]["project"], engine)
    assert overhead == pytest.approx({"fluid": 0.020, "mixed": 0.01126}[engine], abs=1e-9)
    for point in stored["points"]:
        assert point["request_overhead_s"] == overhead  # one overhead per engine at these points
        for row in point["rows"]:
            assert row["errors"] == cc.row_errors(row["reference"], row["project"], overhead)
            assert row["exact_errors"] == cc.row_errors(row["exact"], row["project"], overhead)
    assert cc.criteria_summary(stored["points"]) == stored["summary"]
    assert cc.criteria_summary(stored["points"], "exact", "exact_errors") == stored["like_for_like"]["summary"]
    n = len(stored["points"])
    for summary in (stored["summary"], stored["like_for_like"]["summary"]):
        total = {name: s["all"]["total"] for name, s in summary.items()}
        assert total == {"saturation": n, "ttft_p50": 4 * n, "ttft_mean": 4 * n, "ttft_p99": 4 * n, "tpot_mean": 5 * n}


def _exact_row(point: str, mode: str, rate: float | str, fraction: float | None, **sim: float) -> dict[str, Any]:
    """An iteration_sim.json row by hand."""
    row: dict[str, Any] = {"point": point, "mode": mode, "rate": rate, "sim": sim}
    if rate == "saturation":
        row["offered_rate"] = 11.0
    else:
        row["load_fraction"] = fraction
    return row


def test_like_for_like_rows_and_errors_on_hand_made_rows():
    point = {"gpu": "a100-sxm-80gb", "batch_cap": 64, "lengths": "fixed-512-128", "dtype": "fp16",
             "rates": [{"load_fraction": 0.25, "rate": 2.5}, {"load_fraction": 0.5, "rate": 5.0}]}
    name = cc.point_name(point)
    rows = [_exact_row(name, "project", "saturation", None, requests_per_s=10.0, tpot_mean_s=0.030),
            _exact_row(name, "reference", 5.0, 0.5, requests_per_s=1.0),  # another mode: not read
            _exact_row(name, "project", 5.0, 0.5, requests_per_s=5.0, ttft_p50_s=0.050, ttft_p99_s=0.200,
                       ttft_mean_s=0.060, tpot_mean_s=0.015),
            _exact_row(name, "project", 2.5, 0.25, requests_per_s=2.5, ttft_p50_s=0.040, ttft_p99_s=0.100,
                       ttft_mean_s=0.045, tpot_mean_s=0.012)]
    got = cc.exact_rows({"rows": rows}, point)  # the reference's order: loads, then saturation
    assert [(r["load_fraction"], r["rate"]) for r in got] == [(0.25, 2.5), (0.5, 5.0), ("saturation", "saturation")]
    assert got[1]["requests_per_s"] == 5.0 and got[2]["offered_rate"] == 11.0
    # The project's TTFT less its overhead against the exact scheduler's (which models none).
    proj = {"rate": 5.0, "requests_per_s": 5.0, "ttft_p50_s": 0.0613, "ttft_p99_s": 0.2613, "ttft_mean_s": 0.0773,
            "tpot_mean_s": 0.0166}
    e = cc.row_errors(got[1], proj, overhead=0.0113)
    assert e["net"]["ttft_p50_s"] == pytest.approx(0.0) and e["net"]["ttft_p99_s"] == pytest.approx(0.25)
    assert e["net"]["ttft_mean_s"] == pytest.approx(0.10) and e["criteria"]["ttft_mean"]["pass"]
    assert e["criteria"]["ttft_p99"]["pass"] is True and e["criteria"]["tpot_mean"]["pass"] is False  # +10.7 %
    sat = cc.row_errors(got[2], {"rate": "saturation", "requests_per_s": 9.75, "tpot_mean_s": 0.031}, 0.0113)
    assert set(sat["criteria"]) == {"saturation", "tpot_mean"} and sat["criteria"]["saturation"]["pass"]  # -2.5 %
    points = [{"gpu": point["gpu"], "rows": [{"exact": got[1], "exact_errors": e},
                                             {"exact": got[2], "exact_errors": sat}]},
              {"gpu": "h100-sxm", "rows": [{"exact": got[2], "exact_errors": cc.row_errors(
                  got[2], {"rate": "saturation", "requests_per_s": 8.0, "tpot_mean_s": 0.03}, 0.0)}]}]
    summary = cc.criteria_summary(points, "exact", "exact_errors")
    assert summary["saturation"]["by_gpu"] == {
        "a100-sxm-80gb": {"within": 1, "total": 1, "median_abs": pytest.approx(0.025), "max_abs": pytest.approx(0.025)},
        "h100-sxm": {"within": 0, "total": 1, "median_abs": pytest.approx(0.2), "max_abs": pytest.approx(0.2)}}
    assert summary["tpot_mean"]["all"]["within"] == 2 and summary["ttft_p50"]["by_load"]["0.5"]["within"] == 1
    for bad in (rows[:1], [*rows[:3], {**rows[3], "rate": 2.4}]):  # a missing row; a row at another rate
        with pytest.raises(ValueError, match="--exact has no 'project' row of a100-sxm-80gb/64/fixed-512-128/fp16"):
            cc.exact_rows({"rows": bad}, point)


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
                         (["--episodes", "0"], "--episodes 0 is out of range"),
                         (["--engine", "steam"], "--engine 'steam' is not one of ['fluid', 'mixed']"),
                         (["--exact", "/nonexistent/iteration_sim.json"], "--exact /nonexistent/iteration_sim.json "
                                                                          "does not exist")):
        with pytest.raises(SystemExit) as exc:
            script.main(argv)
        message = str(exc.value.code)
        assert message.startswith("crosscheck: ") and needle in message and "\n" not in message


def _same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (a row with no first token is NaN on both runs)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.slow
def test_the_project_side_reproduces(engine, stored, reference):
    """run_loadtest is deterministic (same seed, same bits): the rerun equals the stored rows exactly, for two
    fluid points and one mixed point (the stored settings name the engine)."""
    by_name = {cc.point_name(p): p for p in reference["points"]}
    stored_points = {p["name"]: p for p in stored["points"]}
    assert stored["settings"]["engine"] == engine
    for name in RERUN_POINTS[engine]:
        rows = cc.project_rows(by_name[name], stored["settings"])
        want = [r["project"] for r in stored_points[name]["rows"]]
        assert len(rows) == len(want)
        for got, w in zip(rows, want):
            bad = {k: (got[k], w[k]) for k in w if not _same(got[k], w[k])}
            assert not bad, (name, w["rate"], bad)
