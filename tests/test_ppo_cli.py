"""`inferencegym train` and `inferencegym eval` end to end on task 1 (tiny shapes); the paired
difference to best_static their table prints; the main job's config."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferencegym_jax import tasks
from inferencegym_jax.cli import main
from inferencegym_jax.cli.common import ppo_config_name
from inferencegym_jax.cli.training_commands import DEFAULT_CONFIG, DEFAULT_TASK
from inferencegym_jax.evaluate import confidence_interval_95
from inferencegym_jax.training_setup import load_config
from training.evaluation import paired_difference
from training.loop import read_metrics

TINY = ["--set", "num_envs=8", "--set", "num_steps=4", "--set", "num_minibatches=2", "--set", "update_epochs=1",
        "--set", "actor_widths=[16]", "--set", "critic_widths=[16]", "--set", "checkpoint_every=2"]


@pytest.mark.slow  # ~110 s: trains, evaluates and plots task 1 (the mixed engine's compile)
def test_train_then_eval_from_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    main(["train", "--task", "1", "--out", str(out), *TINY, "--updates", "3", "--eval-episodes", "4",
          "--baselines", "vllm_default,best_static", "--no-progress"])
    printed = capsys.readouterr().out
    assert "resolved config" in printed and "graded evaluation" in printed and "vllm_default" in printed
    assert "minus_best_static" in printed and "paired_ci95" in printed  # the table's paired columns
    for name in ("config.toml", "metrics.csv", "checkpoint.msgpack", "reward_curve.png", "episode.png", "eval.json"):
        assert (out / name).is_file(), name
    config = load_config(out / "config.toml")
    assert config.task == tasks.newest_version(1) and config.num_updates == 3 and config.num_envs == 8
    assert [int(r["update"]) for r in read_metrics(out)] == [1, 2, 3]
    record = json.loads((out / "eval.json").read_text())
    assert set(record["scores"]) == {"ppo", "vllm_default", "best_static"} and len(record["scores"]["ppo"]) == 4
    ppo, best = np.asarray(record["scores"]["ppo"]), np.asarray(record["scores"]["best_static"])
    rows = {row["policy"]: row for row in record["table"]}
    assert rows["ppo"]["minus_best_static"] == pytest.approx(np.mean(ppo - best), abs=1e-6)
    assert rows["ppo"]["paired_ci95"] == pytest.approx(confidence_interval_95(ppo - best), abs=1e-6)
    assert rows["best_static"]["minus_best_static"] == 0.0
    line = f"PPO - best_static, paired on the same 4 episodes: {np.mean(ppo - best):+.4f} ± "
    assert line in printed
    assert record["updates"] == 3 and record["env_steps"] == 3 * 8 * 4
    assert all(s >= 0.0 for s in record["scores"]["ppo"])  # v1 scores: 0 is the random policy, 1 the MPC oracle

    # The saved policy, evaluated on the same held-out keys, scores exactly as at the end of training.
    again = tmp_path / "again.json"
    main(["eval", "--checkpoint", str(out), "--episodes", "4", "--json", str(again), "--baselines",
          "vllm_default,best_static"])
    assert json.loads(again.read_text())["scores"] == record["scores"]

    # `plot --checkpoint` builds the policy as `eval` does: the figure `train` drew, byte for byte.
    figure = tmp_path / "episode.png"
    main(["plot", "--checkpoint", str(out), "--out", str(figure)])
    assert "ppo (3 updates" in capsys.readouterr().out
    assert figure.read_bytes() == (out / "episode.png").read_bytes()

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--checkpoint", str(out), "--episodes", "4", "--baselines", "oracle"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("inferencegym: error: unknown baselines ['oracle']")
    assert err.count("\n") == 1


def test_the_paired_difference_is_taken_episode_by_episode():
    reference = np.array([0.5, 0.7, 0.9, 0.6], np.float32)
    one = paired_difference(reference + np.array([0.1, 0.2, 0.1, 0.2], np.float32), reference)
    assert one.mean == pytest.approx(0.15) and one.per_seed is None
    assert one.ci95 == pytest.approx(1.959964 * np.std([0.1, 0.2, 0.1, 0.2], ddof=1) / 2, rel=1e-5)
    # Two seeds: the CI is over episodes of the seeds' mean difference, not over seed x episode pairs.
    seeds = np.stack([reference + 0.1, reference + np.array([0.3, 0.1, 0.3, 0.1], np.float32)])
    two = paired_difference(seeds, reference)
    assert two.mean == pytest.approx(0.15) and two.per_seed == pytest.approx([0.1, 0.2])
    assert two.ci95 == pytest.approx(confidence_interval_95([0.2, 0.1, 0.2, 0.1]), rel=1e-5)
    assert paired_difference(reference, reference) == (0.0, 0.0, None)


def test_the_main_job_is_the_uniform_start_of_task_3s_newest_version():
    """configs/train/ppo_task3_v1_main.toml says it is the task's shipped config with the uniform
    start's overrides and budget (the results table's +0.070 run); this keeps that true."""
    from inferencegym_jax.training_setup.uniform_start import run_overrides

    assert DEFAULT_TASK == tasks.newest_version(3) == load_config(DEFAULT_CONFIG).task
    shipped = load_config(ppo_config_name(DEFAULT_TASK))
    uniform = shipped.replace(**run_overrides(shipped, True))
    main_job = load_config(DEFAULT_CONFIG)
    # imitation_rounds does nothing without imitation_episodes (0 in both)
    assert main_job.replace(imitation_rounds=uniform.imitation_rounds) == uniform
