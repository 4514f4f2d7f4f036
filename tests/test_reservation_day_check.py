"""scripts/reservation_day_check.py's pieces (the study itself is not rerun here): the per-minute
curve holds each 10-min window's requests, and the controller keeps the hour's reserved replicas as
a warm floor with the on-demand replicas provisioning on top, each group within its own slots."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import jax.numpy as jnp
import numpy as np
import pytest

from inferencegym_jax.fleet.tasks import make_fleet
from inferencegym_jax.fleet.types import initial_fleet

ROOT = Path(__file__).resolve().parents[1]
PROVISION_S = 830.5  # [s] Fleet1's provisioning delay (configs/fleet/fleet1_v1.toml)


def _script() -> ModuleType:
    """scripts/reservation_day_check.py as a module (a script of the checkout, not of the package)."""
    path = ROOT / "scripts" / "reservation_day_check.py"
    spec = importlib.util.spec_from_file_location("reservation_day_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _script()


def test_minute_rates_hold_each_window_and_conserve_requests() -> None:
    windows = np.array([0.0, 1.5, 7.25, 0.1], np.float32)  # [req/s] per 10-min window
    minutes = check.minute_rates(windows)
    assert minutes.shape == (40,)
    np.testing.assert_array_equal(minutes.reshape(4, 10), np.repeat(windows[:, None], 10, axis=1))
    # requests: rate x 60 s per minute against rate x 600 s per window
    assert float(np.sum(minutes.astype(np.float64) * 60.0)) == pytest.approx(float(np.sum(windows * 600.0)))
    with pytest.raises(ValueError, match="window_rate"):
        check.minute_rates(np.array([1.0, -0.5]))


def _counts(fleet, reserved_slots: int) -> dict[str, int]:
    group = np.arange(fleet.num_replicas) < reserved_slots
    receiving, warming = np.asarray(fleet.receiving), np.asarray(fleet.warming)
    return {"res_serving": int(np.sum(receiving & group)), "res_warming": int(np.sum(warming & group)),
            "od_serving": int(np.sum(receiving & ~group)), "od_warming": int(np.sum(warming & ~group))}


def test_controller_keeps_the_reserved_floor_warm_and_provisions_on_demand() -> None:
    r, slots = 12, 5
    _, params = make_fleet("InferenceGym-Fleet1-v1", fleet={"num_replicas": r, "initial_replicas": 0})
    assert float(params.provision_s) == PROVISION_S
    fleet = initial_fleet(params.replica_config, params.server.num_age_buckets, r, 0)
    delay = params.provision_s
    # hour start: 3 reserved serve at once; the autoscaler's 4 on-demand replicas are provisioning
    fleet = check.floor_hpa_step(fleet, jnp.int32(slots), jnp.int32(3), jnp.int32(4), delay)
    assert _counts(fleet, slots) == {"res_serving": 3, "res_warming": 0, "od_serving": 0, "od_warming": 4}
    od = np.asarray(fleet.warming_s)[slots:]
    np.testing.assert_allclose(od[od > 0], PROVISION_S)
    # next hour reserves 5 while the on-demand ask falls to 1: the reserved floor serves at once,
    # the newest warming on-demand replicas are cancelled (not turned into serving ones)
    fleet = check.floor_hpa_step(fleet, jnp.int32(slots), jnp.int32(5), jnp.int32(1), delay)
    assert _counts(fleet, slots) == {"res_serving": 5, "res_warming": 0, "od_serving": 0, "od_warming": 1}
    # a reservation above the group's slots is clipped to them; the on-demand group is untouched
    fleet = check.floor_hpa_step(fleet, jnp.int32(slots), jnp.int32(9), jnp.int32(1), delay)
    assert _counts(fleet, slots) == {"res_serving": 5, "res_warming": 0, "od_serving": 0, "od_warming": 1}
    # the hour after reserves 2: three reserved replicas drain (highest slots first), none warms
    fleet = check.floor_hpa_step(fleet, jnp.int32(slots), jnp.int32(2), jnp.int32(1), delay)
    counts = _counts(fleet, slots)
    assert counts["res_serving"] == 2 and counts["res_warming"] == 0
    assert np.asarray(fleet.draining)[:slots].tolist() == [False, False, True, True, True]


def test_doc_section_holds_the_stored_result() -> None:
    """docs/RESERVATION.md's comparison tables are the ones the stored JSON renders to."""
    import json

    record = json.loads((ROOT / "experiments" / "results" / "reservation_day_check.json").read_text())
    doc = (ROOT / "docs" / "RESERVATION.md").read_text()
    for (start, end), text in ((check.DOC_MARKERS, check.table(record["rows"])),
                               (check.LOAD_MARKERS, check.load_table(record["summary"]["miss_by_load"]))):
        assert f"{start}\n{text}{end}" in doc
