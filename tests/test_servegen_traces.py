"""ServeGen m-large traces (data/traces/servegen): the shipped .npz is the one PROVENANCE.txt lists,
the loader returns its rates with the documented shape, units and errors, and docs/DAY_TRACES.md's
ServeGen tables are the script's summary of the shipped file."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from inferencegym_jax.fleet import servegen

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "data" / "traces" / "servegen"
DOC = ROOT / "docs" / "DAY_TRACES.md"

_spec = importlib.util.spec_from_file_location("servegen_traces", ROOT / "scripts" / "servegen_traces.py")
assert _spec is not None and _spec.loader is not None
servegen_traces = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(servegen_traces)


def _listed() -> dict[str, tuple[str, int, str]]:
    """PROVENANCE.txt's file lines: name -> (sha256, bytes, rest of the line)."""
    text = (FOLDER / servegen_traces.PROVENANCE).read_text()
    rows = re.findall(r"^  (\S+)  ([0-9a-f]{64})  (\d+) bytes(.*)$", text, flags=re.M)
    return {name: (digest, int(size), rest) for name, digest, size, rest in rows}


def test_shipped_files_match_the_sha256_and_totals_in_provenance():
    listed = _listed()
    assert set(listed) == {servegen_traces.NPZ, servegen_traces.LICENSE}
    for name, (digest, size, _) in listed.items():
        data = (FOLDER / name).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), name
    totals = dict(re.findall(r"(\w+)=(\d+)", listed[servegen_traces.NPZ][2]))
    rate = servegen.client_rates("servegen-m-large").astype(np.float64)
    assert (int(totals["clients"]), int(totals["windows"])) == rate.shape
    assert int(totals["requests"]) == int(np.round(rate * servegen.WINDOW_S).sum())
    requests = servegen_traces.load()["requests"]
    assert int(totals["requests"]) == int(requests.sum(dtype=np.int64))
    assert int(totals["max_window_requests"]) == int(requests.max())


def test_npz_arrays_have_the_documented_fields():
    a = servegen_traces.load()
    assert set(a) == {"requests", "client", "window_s", "source"}  # no rate (derived), no cv (not kept)
    c, w = a["requests"].shape
    assert (c, w) == (162, 14 * servegen.DAY_WINDOWS) and a["requests"].dtype == np.int32
    assert a["client"].dtype == np.int32 and np.array_equal(a["client"], np.arange(c))
    assert int(a["window_s"]) == servegen.WINDOW_S and servegen_traces.COMMIT in str(a["source"])
    # Counts: >= 0, and the smallest nonzero one is 10 (PROVENANCE.txt); the largest needs more than uint16.
    assert a["requests"].min() == 0 and a["requests"][a["requests"] > 0].min() == 10
    assert a["requests"].max() > np.iinfo(np.uint16).max


def test_client_rates_is_the_npz_rate_read_only_and_rejects_unknown_traces():
    rate = servegen.client_rates("servegen-m-large")
    assert rate.dtype == np.float32 and rate.shape == (162, 2016)
    assert np.isfinite(rate).all() and rate.min() == 0.0 and rate.max() > 0.0
    requests = servegen_traces.load()["requests"]
    assert np.array_equal(rate, (requests / servegen.WINDOW_S).astype(np.float32))
    # float32 rates give back the stored counts (rounding error << 0.5 request at counts < 3e5).
    assert np.array_equal(np.round(rate.astype(np.float64) * servegen.WINDOW_S), requests)
    assert servegen.client_rates("servegen-m-large") is rate
    with pytest.raises(ValueError):
        rate[0, 0] = 1.0
    with pytest.raises(ValueError, match=r"trace='m-large'.*servegen-m-large"):
        servegen.client_rates("m-large")


def test_doc_tables_are_the_scripts_summary():
    text = DOC.read_text()
    start, end = text.index(servegen_traces.SUMMARY_START), text.index(servegen_traces.SUMMARY_END)
    shipped = text[start + len(servegen_traces.SUMMARY_START):end].strip("\n") + "\n"
    expected = servegen_traces.summary_markdown()
    assert shipped == expected, "paste `python scripts/servegen_traces.py --summary` into docs/DAY_TRACES.md"


def test_forecast_errors_of_a_known_curve():
    """Two clients, 14 days: a flat 1 req/s client and one at 2 req/s on even days, 0 on odd days."""
    windows = 14 * servegen.DAY_WINDOWS
    day = np.arange(windows) // servegen.DAY_WINDOWS
    rate = np.stack([np.ones(windows), np.where(day % 2 == 0, 2.0, 0.0)])
    yesterday, last_week, yesterday_late = servegen_traces.forecast_errors(rate)
    # The total is 3 req/s on even days, 1 on odd ones, so every forecast from 1 or 7 days back misses
    # by 2: days 1-13 hold 6 even and 7 odd days (26 / 25), days 7-13 hold 3 even and 4 odd (14 / 13).
    assert yesterday == pytest.approx(26 / 25) and last_week == pytest.approx(14 / 13)
    assert yesterday_late == pytest.approx(14 / 13)
    assert servegen_traces.forecast_errors(rate[:1]) == (0.0, 0.0, 0.0)


def test_the_reader_rejects_malformed_chunks():
    good = b"".join(f"{600 * w},0.05,1.5,Gamma,0.5,2.0\n".encode() for w in range(servegen_traces.WINDOWS))
    counts = servegen_traces.parse_chunk(7, good)
    assert counts.dtype == np.int64 and counts.shape == (servegen_traces.WINDOWS,) and (counts == 30).all()
    lines = good.decode().splitlines()
    cases = {
        "rows=": lines[:-1],
        "timestamps": [lines[1], lines[0]] + lines[2:],
        "pattern": [lines[0].replace("Gamma", "")] + lines[1:],
        r"row 0 \(timestamp 0 s\): rate=0.051 .* not a whole number": [lines[0].replace("0.05", "0.051")] + lines[1:],
        "cv min": [lines[0].replace("1.5", "-1.5")] + lines[1:],
    }
    for needle, bad in cases.items():
        with pytest.raises(ValueError, match=needle):
            servegen_traces.parse_chunk(7, ("\n".join(bad) + "\n").encode())


def test_counts_beyond_int32_are_rejected_not_wrapped():
    big = b"".join(f"{600 * w},4000000,1.5,Gamma,0.5,2.0\n".encode() for w in range(servegen_traces.WINDOWS))
    assert servegen_traces.arrays({0: big.replace(b"4000000", b"3000000")})["requests"].max() == 1_800_000_000
    with pytest.raises(ValueError, match=r"max=2400000000 exceeds int32"):
        servegen_traces.arrays({0: big})
