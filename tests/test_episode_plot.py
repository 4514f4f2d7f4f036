"""`inferencegym_jax.episode_plot` and `inferencegym plot`: one held-out episode over time.

Every test runs the vLLM default on task 1 for seed 3, so they share one compiled evaluation
program (8 padded episodes, the shapes of `collect_episode`); the trained-policy figure of
`inferencegym train` is checked in tests/test_ppo_cli.py, on its run.
"""

from __future__ import annotations

import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import baselines, episode_plot, evaluate
from inferencegym_jax.cli import main
from inferencegym_jax.files import temp_file_glob

TASK = "InferenceGym-Task1-v0"
SEED = 3
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def default_episode():
    """(env, params, the vLLM default's episode on TASK for SEED)."""
    env, params = ig.make(TASK)
    policy = baselines.fixed_default_policy()
    return env, params, episode_plot.collect_episode(env, params, policy, TASK, "vllm_default", SEED)


def test_episode_is_episode_0_of_the_evaluation(default_episode):
    """Bit-identical to episode 0 of `evaluate.run_episodes` for the same key, and graded as
    `evaluate.evaluate` grades it."""
    env, params, episode = default_episode
    policy = baselines.fixed_default_policy()
    batch = evaluate.run_episodes(env, params, policy, evaluate.evaluation_key(SEED), 8)
    np.testing.assert_array_equal(episode.trajectory.reward, np.asarray(batch.reward)[0])
    np.testing.assert_array_equal(episode.trajectory.metrics.ttft_p99_s, np.asarray(batch.metrics.ttft_p99_s)[0])
    graded = evaluate.evaluate(env, params, policy, evaluate.evaluation_key(SEED), 8, TASK)
    assert episode.score == pytest.approx(float(graded.scores[0]), abs=1e-7)
    assert set(episode.breakdown) == set(graded.breakdown) == {"throughput"}
    series = episode_plot.episode_series(episode, params)
    assert np.mean(series["tokens_per_s"]) == pytest.approx(graded.metrics["tokens_per_s"][0], rel=1e-5)
    assert np.mean(series["ttft_p50_s"]) == pytest.approx(float(np.mean(batch.metrics.ttft_p50_s[0])), rel=1e-5)
    assert series["cost_usd"][-1] == pytest.approx(graded.metrics["cost_usd"][0], rel=1e-5)


def test_series_have_the_horizon_and_their_units(default_episode):
    _, params, episode = default_episode
    horizon, dt = int(params.max_steps_in_episode), float(params.server.dt_s)
    series = episode_plot.episode_series(episode, params)
    assert set(series) == set(episode_plot.SERIES_UNITS)
    assert all(v.shape == (horizon,) and v.dtype == np.float64 for v in series.values())
    np.testing.assert_allclose(series["time_s"], dt * np.arange(1, horizon + 1))
    # The vLLM default: the whole KV budget, batch 32, no speculation, one GPU, FP16.
    assert np.all(series["kv_budget"] == 1.0) and np.all(series["batch_size"] == 32.0)
    assert np.all(series["spec_length"] == 0.0) and np.all(series["prefill_disagg"] == 0.0)
    metrics = episode.trajectory.metrics
    np.testing.assert_allclose(series["tpot_ms"], 1e3 * metrics.tpot_s, rtol=1e-6)  # ms, from s
    np.testing.assert_allclose(series["memory_gb"], metrics.gpu_memory_bytes / 1e9, rtol=1e-6)  # GB, from B
    np.testing.assert_allclose(series["offered_tokens_per_s"], episode.trajectory.offered_tokens / dt, rtol=1e-6)
    assert np.all(np.diff(series["cost_usd"]) > 0) and np.all(np.diff(series["budget_usd"]) >= 0)
    assert 1000.0 < np.mean(series["tokens_per_s"]) < 3000.0  # task 1 offers ~1.9 k output tokens/s
    limits = episode_plot.episode_limits(params)
    assert limits["ttft_slo_s"] == {"class 1": 1.0}  # the only class with traffic on task 1
    assert limits["tpot_slo_ms"] == {"class 1": pytest.approx(50.0)}
    assert limits["memory_limit_gb"] == pytest.approx(80.0)
    assert limits["active_knobs"] == ["kv_budget", "batch_size"]


def test_plot_command_writes_the_png_atomically(default_episode, tmp_path, capsys):
    _, _, episode = default_episode
    out = tmp_path / "figures" / "episode.png"
    main(["plot", "--task", TASK, "--policy", "default", "--seed", str(SEED), "--out", str(out)])
    printed = capsys.readouterr().out
    assert f"score {episode.score:.3f}" in printed and str(out) in printed
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(out).shape
    assert width > 1000 and height > 600
    assert list(out.parent.glob(temp_file_glob(out))) == []


def test_plot_episode_returns_a_figure_with_a_panel_per_knob_and_quantity(default_episode):
    _, params, episode = default_episode
    figure = episode_plot.plot_episode(episode, params)
    labels = [ax.get_ylabel() for ax in figure.get_axes()]
    assert labels == ["KV budget\n[fraction of free HBM]", "batch size\n[sequences]", "queue depth\n[requests]",
                      "TTFT [s]", "TPOT [ms]", "output\n[tokens/s]", "GPU memory\n[GB]", "cumulative\ncost [$]"]
    ttft = figure.get_axes()[3]
    assert [t.get_text() for t in ttft.get_legend().get_texts()] == ["p99", "p50", "SLO class 1 (1 s)"]


# (argv, what the one line must say); OUT is a path in the test's folder.
BAD_PLOTS = [
    (["--task", "1", "--policy", "oracle", "--out", "OUT.png"], "--policy 'oracle': not a policy of"),
    (["--task", "1", "--policy", "heuristic", "--out", "OUT.jpg"], "give a path ending in .png"),
    (["--task", "1", "--policy", "heuristic", "--out", "DIR"], "is a folder; give a file path"),
    (["--task", "1", "--out", "OUT.png"], "--policy: give a baseline"),
    (["--policy", "heuristic", "--out", "OUT.png"], "give the task with --task N"),
    (["--policy", "ppo", "--out", "OUT.png"], "--policy ppo: give the trained run with --checkpoint DIR"),
    (["--checkpoint", "DIR", "--out", "OUT.png"], "no checkpoint at"),
    (["--task", "1", "--policy", "random", "--checkpoint", "DIR", "--out", "OUT.png"], "--checkpoint is for"),
    (["--task", "9", "--policy", "random", "--out", "OUT.png"], "argument --task: '9' is not a task"),
    (["--task", "1", "--policy", "random", "--seed", "-1", "--out", "OUT.png"], "argument --seed"),
]


@pytest.mark.parametrize(("argv", "named"), BAD_PLOTS, ids=[" ".join(a) for a, _ in BAD_PLOTS])
def test_bad_plot_arguments_are_one_line_and_write_nothing(argv, named, tmp_path, capsys):
    folder = tmp_path / "empty"
    folder.mkdir()
    argv = [str(tmp_path / a) if a.startswith("OUT") else str(folder) if a == "DIR" else a for a in argv]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("inferencegym: error: ") and err.count("\n") == 1, err
    assert named in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any(folder.iterdir())
