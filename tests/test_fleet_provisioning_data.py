"""data/fleet/provisioning.json: every number has a unit and a cited source, its ranges are ordered
and follow the derivation the file states, and the totals PROVENANCE.md gives the fleet task are the
sums of the JSON's phase values (parsed from both files, never restated here)."""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLEET = ROOT / "data" / "fleet"
CASES = ("cold_node", "warm_node")
SOURCE_KEYS = ("url", "title", "date", "quote")
TOL = 0.01  # [s] or [$/GPU-hour]: the files round to 4 decimals; totals are written to 2


def _data() -> dict[str, Any]:
    return json.loads((FLEET / "provisioning.json").read_text())


def _entries(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every valued entry: (name, entry) for each phase x case, each price, and the discount."""
    out = [(f"{name}.{case}", phase[case]) for name, phase in data["phases"].items() for case in CASES]
    out += [(f"{gpu}.{kind}", entry) for gpu, kinds in data["prices"].items() for kind, entry in kinds.items()]
    out.append(("reserved_discount_1y", data["reserved_discount_1y"]))
    return out


def _totals() -> dict[str, tuple[float, float, float]]:
    """PROVENANCE.md's 'TOTAL <case>: typical X s (low Y s, high Z s)' lines."""
    pattern = r"^TOTAL (\w+): typical ([\d.]+) s \(low ([\d.]+) s, high ([\d.]+) s\)$"
    rows = re.findall(pattern, (FLEET / "PROVENANCE.md").read_text(), flags=re.M)
    return {case: (float(typ), float(low), float(high)) for case, typ, low, high in rows}


def test_provenance_lists_the_shipped_file() -> None:
    """PROVENANCE.md's file line gives provisioning.json's sha256 and size."""
    blob = (FLEET / "provisioning.json").read_bytes()
    rows = re.findall(
        r"^  provisioning\.json  ([0-9a-f]{64})  (\d+) bytes$", (FLEET / "PROVENANCE.md").read_text(), flags=re.M
    )
    assert rows == [(hashlib.sha256(blob).hexdigest(), str(len(blob)))]


def test_every_value_has_a_unit_and_a_cited_source() -> None:
    entries = _entries(_data())
    assert len(entries) >= 2 * 4 + 4 + 1
    for name, entry in entries:
        assert entry["unit"], name
        assert entry["source"], name
        for source in entry["source"]:
            assert all(source[key] for key in SOURCE_KEYS), (name, source)
            assert source["url"].startswith("https://"), (name, source["url"])


def test_ranges_are_ordered() -> None:
    for name, entry in _entries(_data()):
        assert entry["low"] <= entry["typical"] <= entry["high"], name
        assert entry["low"] >= 0, name


def test_ranges_follow_the_stated_derivation() -> None:
    """typical = median of the measurements (else of list prices, estimates, derived values);
    low / high = extremes of the candidates' own lows / highs."""
    data = _data()
    checked = 0
    for name, entry in _entries(data):
        if "candidates" not in entry:
            continue
        cands = entry["candidates"]
        assert all(c["role"] in data["derivation"]["roles"] for c in cands), name
        assert all(c["low"] <= c["value"] <= c["high"] for c in cands), name
        pool = [c["value"] for c in cands if c["role"] == "measurement"]
        pool = pool or [c["value"] for c in cands if c["role"] in ("list_price", "estimate", "derived")]
        assert entry["typical"] == pytest.approx(statistics.median(pool), abs=TOL), name
        assert entry["low"] == pytest.approx(min(c["low"] for c in cands), abs=TOL), name
        assert entry["high"] == pytest.approx(max(c["high"] for c in cands), abs=TOL), name
        checked += 1
    assert checked == len(_entries(data)) - len(data["prices"])  # all but the derived reserved prices


def test_reserved_prices_apply_the_discount_to_the_on_demand_price() -> None:
    data = _data()
    disc = data["reserved_discount_1y"]
    for gpu, kinds in data["prices"].items():
        on_demand = kinds["on_demand"]["typical"]
        reserved = kinds["reserved_1y"]
        assert reserved["typical"] == pytest.approx(on_demand * (1 - disc["typical"]), abs=TOL), gpu
        assert reserved["low"] == pytest.approx(on_demand * (1 - disc["high"]), abs=TOL), gpu
        assert reserved["high"] == pytest.approx(on_demand * (1 - disc["low"]), abs=TOL), gpu
        assert reserved["high"] < on_demand, gpu


def test_provenance_totals_are_the_sums_of_the_phase_values() -> None:
    phases = _data()["phases"]
    totals = _totals()
    sums = {case: [sum(p[case][k] for p in phases.values()) for k in ("typical", "low", "high")] for case in CASES}
    # a running node whose caches are cold: the cold-node phases without node acquisition
    sums["node_up_cold_cache"] = [
        sum(p["cold_node"][k] for n, p in phases.items() if n != "node_acquire") for k in ("typical", "low", "high")
    ]
    assert set(totals) == set(sums)
    for case, expected in sums.items():
        assert totals[case] == pytest.approx(tuple(expected), abs=TOL), case
    assert totals["warm_node"][0] < totals["node_up_cold_cache"][0] < totals["cold_node"][0]
