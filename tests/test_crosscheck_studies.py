"""The cross-check studies' tables in experiments/crosscheck/README.md are rendered from their JSON
(length_strata.py, request_tpot.py, fleet_routing.py, fleet_capacity_exact.py, fleet_tpot_spread.py,
lone_replica_tpot.py): stale when either changed without the other."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "experiments" / "crosscheck"


def study(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, FOLDER / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, marker", [("length_strata", "length-strata"), ("request_tpot", "request-tpot"),
                                          ("fleet_routing", "fleet-routing"),
                                          ("fleet_capacity_exact", "fleet-capacity-exact"),
                                          ("fleet_tpot_spread", "fleet-tpot-spread"),
                                          ("lone_replica_tpot", "lone-replica-tpot")])
def test_the_readme_table_is_the_studys_json(name, marker):
    readme = (FOLDER / "README.md").read_text()
    found = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", readme, re.S)
    assert found, f"README.md has no {marker} block"
    doc = json.loads((FOLDER / f"{name}.json").read_text())
    assert found.group(1) == study(name).summary_markdown(doc), f"rerun experiments/crosscheck/{name}.py"
