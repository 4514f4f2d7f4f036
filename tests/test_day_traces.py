"""Day-scale traces (data/traces/day): the shipped .npz files are their CSV, their totals and sha256
are PROVENANCE.txt's, the independent cross-checks PROVENANCE.txt cites hold, the statistics mean what
docs/DAY_TRACES.md says, and its tables are current."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DAY = ROOT / "data" / "traces" / "day"
DOC = ROOT / "docs" / "DAY_TRACES.md"
CSV = DAY / "azure2024-llm-minutes.csv"

_spec = importlib.util.spec_from_file_location("day_traces", ROOT / "scripts" / "day_traces.py")
assert _spec is not None and _spec.loader is not None
day_traces = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(day_traces)


def _provenance() -> str:
    return (DAY / day_traces.PROVENANCE).read_text()


def _listed() -> dict[str, tuple[str, int, str]]:
    """PROVENANCE.txt's file lines: name -> (sha256, bytes, rest of the line)."""
    rows = re.findall(r"^  (\S+)  ([0-9a-f]{64})  (\d+) bytes(.*)$", _provenance(), flags=re.M)
    return {name: (digest, int(size), rest) for name, digest, size, rest in rows}


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def test_npz_arrays_have_the_documented_shapes_and_are_counts():
    for name in day_traces.TRACES:
        a = day_traces.load(name)
        minutes = a["requests"].shape[0]
        assert minutes == 7 * day_traces.DAY_MIN, name
        for key in ("requests", "prompt_tokens", "output_tokens"):
            assert a[key].dtype == np.int64 and a[key].shape == (minutes,), (name, key)
            assert a[key].min() >= 0, (name, key)
        assert int(a["minute_s"]) == 60
        assert dt.datetime.fromisoformat(str(a["start_utc"])).time() == dt.time(0, 0)
        # A minute without requests has no tokens; every minute of these busy services has requests.
        assert np.all((a["requests"] > 0) | ((a["prompt_tokens"] == 0) & (a["output_tokens"] == 0)))
        assert a["requests"].min() > 0, name


def test_files_match_the_sha256_and_totals_in_provenance():
    listed = _listed()
    assert set(day_traces.TRACES) | set(day_traces.COPIED) | {CSV.name} <= set(listed)
    for name, (digest, size, _) in listed.items():
        data = (DAY / name).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), name
    for name in day_traces.TRACES:
        totals = dict(re.findall(r"(\w+)=(\S+)", listed[name][2]))
        a = day_traces.load(name)
        assert int(totals["minutes"]) == len(a["requests"])
        for key in ("requests", "prompt_tokens", "output_tokens"):
            assert int(totals[key]) == int(a[key].sum()), (name, key)
        assert totals["start_utc"] == str(a["start_utc"])


def test_totals_equal_the_independent_full_passes_cited_in_provenance():
    text = " ".join(_provenance().split())
    match = re.search(r"printed code ([\d,]+) requests and ([\d,]+) tokens \(ContextTokens \+ GeneratedTokens\), "
                      r"conversation ([\d,]+) requests and ([\d,]+) tokens", text)
    assert match, "PROVENANCE.txt lost its cross-check sentence"
    code_n, code_tok, conv_n, conv_tok = map(_int, match.groups())
    expected = {"azure_code_2024_week.npz": (code_n, code_tok), "azure_conv_2024_week.npz": (conv_n, conv_tok)}
    for name, (n, tokens) in expected.items():
        a = day_traces.load(name)
        assert int(a["requests"].sum()) == n, name
        assert int(a["prompt_tokens"].sum() + a["output_tokens"].sum()) == tokens, name


def test_the_npz_files_are_a_fresh_build_of_the_csv():
    built = day_traces.build(CSV)
    for name, data in built.items():
        assert (DAY / name).read_bytes() == data, f"data/traces/day/{name} is stale: rerun scripts/day_traces.py {CSV}"


def test_doc_tables_are_the_scripts_summary():
    text = DOC.read_text()
    start, end = text.index(day_traces.SUMMARY_START), text.index(day_traces.SUMMARY_END)
    shipped = text[start + len(day_traces.SUMMARY_START):end].strip("\n") + "\n"
    assert shipped == day_traces.summary_markdown(), "paste `python scripts/day_traces.py --summary` into the doc"


def test_statistics_of_a_known_curve():
    """One week from a Monday: 1 request/min, 4/min in 12:00-12:59 UTC on weekdays; minute counts
    alternate 0/2 in hour 03 (CV 1 there); tokens 10 and 2 per request."""
    start = dt.datetime(2024, 5, 13, tzinfo=dt.UTC)  # a Monday
    req = np.ones(7 * 1440, np.int64)
    for d in range(5):
        req[d * 1440 + 12 * 60:d * 1440 + 13 * 60] = 4
    for d in range(7):
        req[d * 1440 + 3 * 60:d * 1440 + 4 * 60] = np.tile([0, 2], 30)
    a = {"requests": req, "prompt_tokens": 10 * req, "output_tokens": 2 * req,
         "start_utc": np.array(start.isoformat()), "minute_s": np.array(60)}
    s = day_traces.statistics(a)
    assert s["days"] == 7 and s["requests"] == int(req.sum())
    assert s["peak_hour_utc"] == 12 and s["diurnal_swing"] == pytest.approx((5 * 4 + 2) / 7)
    assert s["weekday_over_weekend"] == pytest.approx((1440 + 180) / 1440)
    assert s["hourly_mean_over_peak"] == pytest.approx(req.sum() / (7 * 24) / (4 * 60))
    assert s["minute_cv_median"] == 0.0  # 23 of 24 hours per day are flat
    assert s["mean_prompt_tokens"] == 10.0 and s["mean_output_tokens"] == 2.0
    assert s["held_out"] == "05-18 Sat, 05-19 Sun"


def test_the_reader_rejects_a_wrong_header_row_or_minute(tmp_path: Path):
    lines = CSV.read_text().splitlines()
    cases = {
        "header": [ln.replace("minute,", "min,") for ln in lines],
        "fields": lines[:10] + [lines[10] + ",1"] + lines[11:],
        "minute column": lines[:10] + lines[11:],
        "comment says": [ln.replace("(Friday)", "(Monday)") for ln in lines],
    }
    for needle, bad in cases.items():
        path = tmp_path / "bad.csv"
        path.write_text("\n".join(bad) + "\n")
        with pytest.raises(ValueError, match=needle):
            day_traces.read_minutes_csv(path)
    with pytest.raises(ValueError, match="name="):
        day_traces.load("nope.npz")
