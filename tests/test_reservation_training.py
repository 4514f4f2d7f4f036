"""PPO on the day-ahead reservation task through the training setup and the CLI (issue 42, item 3):
the shipped config, the task trained as is (settings it lacks refused), `inferencegym train` /
`eval` graded on the held-out services against the reservation baselines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inferencegym_jax.fleet.reservation_tasks import make_reservation
from inferencegym_jax.training_setup import ServingSetup, from_dict, load_config

RESERVE = "InferenceGym-Reserve1-v1"
# The installed console script, as a user runs it.
CLI = [str(Path(sys.executable).parent / "inferencegym")]
BASELINES = ("week_peak", "on_demand_only", "flat_fraction", "yesterday", "last_week", "rolling_quantile", "oracle")
TINY = ["--set", "num_envs=8", "--set", "num_steps=4", "--set", "num_minibatches=2", "--set", "update_epochs=1",
        "--set", "actor_widths=[8]", "--set", "critic_widths=[8]", "--set", "checkpoint_every=1",
        "--set", "eval_episodes=3", "--set", "imitation_episodes=8", "--set", "imitation_epochs=2",
        "--updates", "2", "--no-progress"]


def test_the_shipped_reservation_config_loads_and_trains_the_task_as_is():
    config = load_config("ppo_reserve1_v1")
    assert config.task == RESERVE and config.action_mode == "absolute" and config.default_logit == 0.0
    assert config.imitation_teacher == "week_peak" and config.imitation_episodes > 0
    assert config.batch_size % config.num_minibatches == 0
    assert config.eval_episodes == 64  # the held-out table of data/fleet/reserve1_v1_baselines.json
    made = ServingSetup.from_dict({"task": RESERVE}).build()
    env, params = make_reservation(RESERVE)
    assert made.env == env and made.initial_action is None and made.teacher is None
    assert made.warmup_action.tolist() == [0] * 24  # nothing reserved


@pytest.mark.parametrize("key, value", [("history_windows", 3), ("forecast_intervals", 2), ("action_mode", "hold"),
                                        ("default_logit", 2.0)])
def test_a_setting_the_reservation_task_lacks_is_refused_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"^config key '{key}' = .*the task {RESERVE} allows only") as err:
        ServingSetup.from_dict({"task": RESERVE, key: value})
    assert "\n" not in str(err.value)


def test_a_reservation_task_imitates_only_its_causal_baselines_and_a_server_never_does():
    with pytest.raises(ValueError, match=f"config key 'imitation_teacher' = 'mpc': the task {RESERVE} imitates only"):
        ServingSetup.from_dict({"task": RESERVE, "imitation_episodes": 4})
    with pytest.raises(ValueError, match="'imitation_teacher' = 'week_peak' is a reservation task's teacher"):
        ServingSetup.from_dict({"task": "InferenceGym-Task3-v2", "imitation_episodes": 4,
                                "imitation_teacher": "week_peak"})


@pytest.mark.slow  # ~10 s, but the fast tier's budget is nearly spent: compiles two teacher episodes
def test_the_week_peak_teacher_labels_each_day_with_week_peak_s_commitment():
    """The teacher's demonstrations are week_peak's own episodes (keys: split(key, episodes))."""
    import jax

    from inferencegym_jax import evaluate
    from inferencegym_jax.fleet.reservation_baselines import week_peak

    made = ServingSetup.from_dict({"task": RESERVE, "imitation_episodes": 2, "imitation_teacher": "week_peak"}).build()
    demos = made.teacher(jax.random.key(3))
    env, params = make_reservation(RESERVE)
    days = params.decision_days  # the training episodes' commitments
    assert demos.action.shape == (2, days, 24) and demos.obs.shape[:2] == (2, days)
    for i, k in enumerate(jax.random.split(jax.random.key(3), 2)):
        _, played, _ = evaluate.play_episode(env, params, evaluate.as_controller(week_peak), k, days,
                                             lambda seen, memory, step: week_peak(None, seen.obs, params))
        np.testing.assert_array_equal(np.asarray(demos.action[i]), np.asarray(played))
        assert int(np.asarray(played).max()) > 0  # a service needs replicas: not a vacuous all-zeros match


def test_the_cli_refuses_a_bad_setting_in_one_line_before_writing(tmp_path, capsys):
    from inferencegym_jax.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", RESERVE, "--out", str(out), "--set", "default_logit=3.0"])
    assert exit_info.value.code == 2 and not out.exists()
    errors = [line for line in capsys.readouterr().err.splitlines() if "config key 'default_logit'" in line]
    assert len(errors) == 1 and RESERVE in errors[0]


def test_a_reservation_config_round_trips_through_toml():
    import tomllib

    config = from_dict({"task": RESERVE, "num_envs": 8, "num_steps": 4})
    assert from_dict(tomllib.loads(config.to_toml())) == config


@pytest.mark.slow  # ~1-2 min on 2 busy cores: compiles the update and 8 policies' held-out episodes, twice
def test_train_then_eval_a_reservation_policy_through_the_installed_cli(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([*CLI, "train", "--task", RESERVE, "--out", str(out), *TINY], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "graded evaluation: 3 held-out services" in done.stdout and "PPO - week_peak in J" in done.stdout
    assert any(line.startswith("ppo ") for line in done.stdout.splitlines())
    for name in ("config.toml", "metrics.csv", "checkpoint.msgpack", "reward_curve.png", "eval.json", "episode.png"):
        assert (out / name).is_file(), name
    record = json.loads((out / "eval.json").read_text())
    assert record["task"] == RESERVE and record["split"] == "heldout" and record["updates"] == 2
    assert record["env_steps"] == 2 * 8 * 4
    assert record["split"] == "heldout"
    table = {row["policy"].split(" ")[0]: row for row in record["table"]}
    assert list(table) == ["ppo", *BASELINES]
    assert table["week_peak"]["score"] == 0.0 and table["oracle"]["score"] == pytest.approx(1.0)
    per = record["per_episode"]
    assert set(per) == {"ppo", *BASELINES} and len(per["ppo"]["J"]) == 3
    assert table["ppo"]["J"] == pytest.approx(np.mean(per["ppo"]["J"]), rel=1e-6)
    assert np.all(np.asarray(per["ppo"]["refused"]) == 0)

    # `eval` grades the saved policy on the same held-out services (its config's eval_episodes):
    # the same numbers, bit for bit.
    again = tmp_path / "again.json"
    done = subprocess.run([*CLI, "eval", "--checkpoint", str(out), "--json", str(again)], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    evaluated = json.loads(again.read_text())
    assert evaluated["table"] == record["table"] and evaluated["per_episode"] == record["per_episode"]

    done = subprocess.run([*CLI, "eval", "--checkpoint", str(out), "--episodes", "2", "--baselines",
                           "yesterday,oracle"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 2 and "lack ['week_peak']" in done.stderr
