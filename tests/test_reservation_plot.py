"""The reservation episode figure (`fleet.reservation_plot`): its series is the graded episode's
(same cost and attainment as `run_reservation_episodes`' episode 0), and the PNG is written."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.fleet import reservation_baselines as rb
from inferencegym_jax.fleet.reservation_day import DAY_WINDOWS
from inferencegym_jax.fleet.reservation_plot import plot_reservation_episode, reservation_episode_series


@pytest.mark.parametrize("name", ["week_peak", "oracle"])
def test_series_is_the_graded_episode(tmp_path, name):
    env, params = ig.make("InferenceGym-Reserve1-v1", split="heldout")
    policy = rb.reservation_baselines(env, params)[name]
    key = jax.random.key(3)
    series = reservation_episode_series(env, params, policy, key)
    graded = rb.run_reservation_episodes(env, params, policy, key, 1)
    assert series.demand.shape == (params.decision_days * DAY_WINDOWS,)
    np.testing.assert_allclose(series.cost_usd, float(graded.cost_usd[0]), rtol=1e-6)
    np.testing.assert_allclose(series.attainment, float(graded.slo_attainment[0]), rtol=1e-6)
    np.testing.assert_allclose(series.missed.sum(), float(graded.missed[0]), rtol=1e-5, atol=1e-2)  # [requests]
    assert np.all(series.serving >= series.reserved - 1e-6)
    path = tmp_path / "episode.png"
    plot_reservation_episode(series, path, title=name)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
