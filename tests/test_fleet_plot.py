"""The fleet episode figure (`inferencegym_jax.fleet.plot`): one shortened Fleet1 episode of a
static policy gives per-interval arrays of the right shapes and values, and a PNG."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.fleet.day_traffic import DAY_MIN, requests_per_minute
from inferencegym_jax.fleet.plot import FleetSeries, fleet_episode_series, plot_fleet_episode, static_policy

STEPS = 8  # [control intervals of 60 s]
START = 5 * DAY_MIN + 15 * 60  # [min] 15:00 UTC on held-out day 5


@pytest.fixture(scope="module")
def series():
    _, params = ig.make("InferenceGym-Fleet1-v1", split="heldout")
    params = params.replace(curve=params.curve.replace(starts=jnp.full_like(params.curve.starts, START)),
                            max_steps_in_episode=jnp.asarray(STEPS, jnp.int32))
    env, _ = ig.make("InferenceGym-Fleet1-v1", split="heldout")
    return params, fleet_episode_series(env, params, static_policy(12, 1), jax.random.key(0))


@pytest.mark.slow  # the fast tier's budget: compiles a fleet episode
def test_the_series_has_one_entry_per_interval(series):
    params, s = series
    for name in ("time_h", "arrival_rate", "curve_rate", "serving", "warming", "draining", "attainment",
                 "gpu_seconds", "cost_usd"):
        value = getattr(s, name)
        assert value.shape == (STEPS,) and value.dtype == np.float64, name
    assert s.start_minute == START and s.slo_target == pytest.approx(0.99)
    np.testing.assert_allclose(s.time_h, np.arange(1, STEPS + 1) / 60.0)
    counts = requests_per_minute("azure-code-2024")[START:START + STEPS]
    np.testing.assert_allclose(s.curve_rate, counts * 0.4 / 60.0, rtol=1e-6)
    # Poisson arrivals at the curve's rate: ~2,000 requests, within 10 % of the curve's total.
    assert s.arrival_rate.sum() == pytest.approx(s.curve_rate.sum(), rel=0.1)
    # 16 replicas up at the start, 12 asked for: four drained in the first interval, then 12.
    assert np.all(s.serving == 12.0) and np.all(s.warming == 0.0) and np.all(s.draining[1:] == 0.0)
    assert 12 * 60.0 < s.gpu_seconds[0] <= 16 * 60.0
    np.testing.assert_allclose(s.gpu_seconds[2:], 12 * 60.0, rtol=1e-6)
    assert np.all((s.attainment >= 0.0) & (s.attainment <= 1.0)) and np.all(s.cost_usd > 0.0)


@pytest.mark.slow  # the fast tier's budget: compiles a fleet episode
def test_the_figure_is_written_as_a_png(series, tmp_path):
    _, s = series
    path = tmp_path / "figures" / "fleet.png"
    figure = plot_fleet_episode(s, path, title="static 12")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert len(figure.axes) == 5  # four panels and the dollars' twin axis
    assert "static 12" in figure._suptitle.get_text()
    assert list(tmp_path.joinpath("figures").iterdir()) == [path]  # no temporary file left


@pytest.mark.slow  # the fast tier's budget: compiles a fleet episode
def test_bad_input_raises_naming_the_field(series):
    params, s = series
    fields = {name: getattr(s, name) for name in ("time_h", "arrival_rate", "curve_rate", "serving", "warming",
                                                  "draining", "attainment", "gpu_seconds", "cost_usd")}
    with pytest.raises(ValueError, match=r"serving must be 8 finite numbers"):
        FleetSeries(**{**fields, "serving": fields["serving"][:3]})
    with pytest.raises(ValueError, match=r"attainment must be 8 finite numbers"):
        FleetSeries(**{**fields, "attainment": np.full(STEPS, np.nan)})
    with pytest.raises(ValueError, match=r"series must be a fleet.plot.FleetSeries"):
        plot_fleet_episode(fields)
    env, _ = ig.make("InferenceGym-Fleet1-v1")
    with pytest.raises(ValueError, match=r"steps=9 must be an integer in \[1, 8\]"):
        fleet_episode_series(env, params, static_policy(4), jax.random.key(0), steps=9)
