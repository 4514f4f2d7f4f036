"""PPO on a fleet through the training setup and the CLI (issue 42, item 5): the fleet's prior
and warm-up action, the shipped config, `inferencegym train` / `eval` / `--resume` on a fleet
with short episodes, graded on the held-out days against the fleet baselines."""

from __future__ import annotations

import json

import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax.cli import main
from inferencegym_jax.files import shipped
from inferencegym_jax.fleet import baselines as fb
from inferencegym_jax.fleet.tasks import make_fleet
from inferencegym_jax.training_setup import ServingSetup, from_dict, load_config, make_train, read_config
from training.evaluation import evaluate_fleet, fleet_eval_record, fleet_heldout_params, fleet_levels
from training.loop import read_metrics

FLEET = "InferenceGym-Fleet1-v1"
# Control intervals of a test episode (the task's is 1440, a day): short enough for seconds.
SHORT_STEPS = 6
TINY = ["--set", "num_envs=4", "--set", "num_steps=4", "--set", "num_minibatches=2", "--set", "update_epochs=1",
        "--set", "actor_widths=[8]", "--set", "critic_widths=[8]", "--set", "checkpoint_every=1",
        "--set", "eval_episodes=3"]
# The baselines of the patched-in CHOSEN numbers (no pooled oracle: CHOSEN has no "oracle_pooled").
BASELINES = ("static_for_peak", "hpa", "forecast", "oracle")
# The baselines' numbers in these tests (replicas; requests per replica; req/s per replica, replicas):
# the wiring is under test here, not the shipped numbers (data/fleet/, tests of fleet.baselines).
CHOSEN = {"static_for_peak": {"replicas": 14}, "hpa": {"target": 4.0}, "forecast": {"capacity": 2.5, "spare": 1.0},
          "oracle": {"capacity": 2.5}}


def test_a_fleet_id_is_kept_and_its_prior_is_the_whole_fleet_least_loaded():
    setup = ServingSetup.from_dict({"task": FLEET, "default_logit": 5.0})
    assert setup.task == FLEET
    made = setup.build()
    assert made.initial_action.tolist() == [16, 0] and made.warmup_action.tolist() == [16, 0]
    assert made.teacher is None and made.env.env_id == FLEET
    uniform = ServingSetup.from_dict({"task": FLEET}).build()
    assert uniform.initial_action is None and uniform.warmup_action.tolist() == [16, 0]


@pytest.mark.parametrize("key, value", [("history_windows", 3), ("forecast_intervals", 2),
                                        ("action_mode", "hold"), ("initial_action", "best_static")])
def test_a_setting_a_fleet_lacks_is_refused_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"config key '{key}' = .*the fleet task {FLEET} allows only"):
        ServingSetup.from_dict({"task": FLEET, "default_logit": 5.0, key: value})


def test_a_fleet_imitates_only_its_causal_baselines_and_a_server_never_does():
    with pytest.raises(ValueError, match="config key 'imitation_teacher' = 'mpc': the fleet task .* only one of "
                                         r"\['forecast', 'hpa', 'hpa_pooled'\]"):
        ServingSetup.from_dict({"task": FLEET, "imitation_episodes": 4})
    # Fleet1-v1's baselines file has no pooled HPA: refused at build, naming the key and what it has
    with pytest.raises(ValueError, match="config key 'imitation_teacher' = 'hpa_pooled': InferenceGym-Fleet1-v1's "
                                         r"baselines file has none; allowed: \['forecast', 'hpa'\]"):
        ServingSetup.from_dict({"task": FLEET, "imitation_episodes": 4, "imitation_teacher": "hpa_pooled"}).build()
    for teacher in ("forecast", "hpa_pooled"):
        with pytest.raises(ValueError, match=f"config key 'imitation_teacher' = '{teacher}' is a fleet's teacher"):
            ServingSetup.from_dict({"task": "InferenceGym-Task3-v2", "imitation_episodes": 4,
                                    "imitation_teacher": teacher})


def test_a_fleet_teacher_takes_the_rules_numbers_or_the_lowest_cost_ones():
    """'rule': the baselines file's choice; 'lowest_cost': the training search's row with the lowest J."""
    v2 = "InferenceGym-Fleet1-v2"
    rule = ServingSetup.from_dict({"task": v2, "imitation_episodes": 2, "imitation_teacher": "hpa_pooled"}).build()
    cheap = ServingSetup.from_dict({"task": v2, "imitation_episodes": 2, "imitation_teacher": "hpa_pooled",
                                    "imitation_teacher_choice": "lowest_cost"}).build()
    data = json.loads(shipped("data").joinpath("fleet", "fleet1_v2_baselines.json").read_text())
    rows = data["search"]["hpa_pooled"]["table"]
    assert float(rule.teacher.controller.scale) == pytest.approx(data["chosen"]["hpa_pooled"]["scale"]["value"])
    assert float(cheap.teacher.controller.scale) == pytest.approx(min(rows, key=lambda r: r["J_mean"])["scale"])
    with pytest.raises(ValueError, match="config key 'imitation_teacher_choice' = 'lowest_cost' is a fleet"):
        ServingSetup.from_dict({"task": "InferenceGym-Task3-v2", "imitation_teacher_choice": "lowest_cost"})
    with pytest.raises(ValueError, match="baseline 'nope' is not in fleet1_v2_baselines.json"):
        fb.lowest_cost_numbers(v2, "nope")


@pytest.mark.slow  # the fast tier's budget: compiles the fleet's teacher or trainer and graded episodes
def test_the_forecast_teacher_plays_the_forecast_baseline(short_fleet):
    """The fleet's teacher: the forecast baseline's own episodes, labelled with its choices."""
    import jax

    from inferencegym_jax import evaluate
    from inferencegym_jax.fleet.baselines import fleet_baselines

    env, params = ig.make(FLEET)
    made = ServingSetup.from_dict({"task": FLEET, "imitation_episodes": 2, "imitation_teacher": "forecast"}).build()
    demos = made.teacher(jax.random.key(3))
    assert demos.obs.shape == (2, SHORT_STEPS, env.flat_observation_space(params).shape[0])
    assert demos.action.shape == (2, SHORT_STEPS, 2) and np.all(np.isfinite(np.asarray(demos.reward)))
    # Each demonstration is the forecast's own episode (the teacher's keys: split(key, episodes)).
    forecast = fleet_baselines(env, params)["forecast"]
    for i, k in enumerate(jax.random.split(jax.random.key(3), 2)):
        _, applied, _ = evaluate.play_episode(env, params, forecast, k, SHORT_STEPS,
                                              lambda seen, memory, step: step.info["applied_action"])
        np.testing.assert_array_equal(np.asarray(demos.action[i]), np.asarray(applied))


def test_the_shipped_fleet_config_imitates_the_forecast_then_trains():
    config = load_config("ppo_fleet1_v1")
    assert config.task == FLEET and config.imitation_teacher == "forecast" and config.imitation_episodes > 0
    assert config.desync_envs and config.batch_size % config.num_minibatches == 0
    assert config.eval_episodes >= 25  # at least one pass over the 25 held-out windows, on average


def test_the_held_out_params_are_the_trained_ones_on_the_held_out_days():
    _, train = make_fleet(FLEET, max_steps=SHORT_STEPS)
    _, heldout = make_fleet(FLEET, split="heldout")
    got = fleet_heldout_params(FLEET, train)
    assert np.array_equal(got.curve.starts, heldout.curve.starts)
    assert not np.isin(np.asarray(got.curve.starts), np.asarray(train.curve.starts)).any()
    assert int(got.max_steps_in_episode) == SHORT_STEPS


@pytest.fixture
def short_fleet(monkeypatch):
    """`ig.make` of the fleet with SHORT_STEPS-interval episodes (what the CLI trains and grades),
    its baselines with the CHOSEN numbers."""
    from inferencegym_jax.fleet import baselines

    monkeypatch.setattr(ig, "make", lambda env_id, **kw: make_fleet(env_id, max_steps=SHORT_STEPS, **kw))
    monkeypatch.setattr(baselines, "load_chosen", lambda env_id: CHOSEN)


@pytest.mark.slow  # the fast tier's budget: compiles the fleet's teacher or trainer and graded episodes
def test_a_short_fleet_trains_round_trips_its_checkpoint_and_is_graded(tmp_path, short_fleet):
    """make_train on the fleet (1 update), its checkpoint read back, the held-out graded table."""
    import jax

    from training.checkpoint import load_checkpoint, save_checkpoint

    config = from_dict({"task": FLEET, "num_envs": 4, "num_steps": 4, "num_updates": 1, "num_minibatches": 2,
                        "update_epochs": 1, "actor_widths": [8], "critic_widths": [8], "default_logit": 5.0,
                        "desync_envs": True})
    trainer = make_train(config)
    assert int(trainer.env_params.max_steps_in_episode) == SHORT_STEPS
    runner, metrics = jax.jit(trainer.train)(trainer.root_key())
    assert np.all(np.isfinite(np.asarray(metrics["reward"]))) and float(metrics["reward"].mean()) < 0.0
    save_checkpoint(tmp_path, trainer, runner)
    assert read_config(tmp_path) == config
    loaded = load_checkpoint(tmp_path, trainer)
    for a, b in zip(jax.tree_util.tree_leaves(runner.params), jax.tree_util.tree_leaves(loaded.params), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))

    table, episodes = evaluate_fleet(trainer, loaded, 2, 0, ["static_for_peak", "oracle"])
    assert list(table.index) == ["ppo", "static_for_peak", "oracle (clairvoyant bound)"]
    assert {"score", "gpu_hours", "slo_attainment", "d_gpu_h_vs_static_for_peak"} <= set(table.columns)
    assert table.loc["static_for_peak", "score"] == 0.0
    record = fleet_eval_record(trainer, loaded, table, episodes, 2, 0)
    assert record["updates"] == 1 and set(record["per_episode"]) == {"ppo", "static_for_peak", "oracle"}
    assert len(record["per_episode"]["ppo"]["episode_cost"]) == 2
    levels = fleet_levels(episodes, SHORT_STEPS)
    assert levels["ppo"] == pytest.approx(-float(np.mean(episodes["ppo"].episode_cost)) / SHORT_STEPS)


@pytest.mark.slow  # ~5 min cold on 2 busy cores (compiles the update, 5 controllers' episodes, the figure)
def test_train_eval_and_resume_a_fleet_through_the_cli(tmp_path, capsys, short_fleet):
    out = tmp_path / "run"
    main(["train", "--task", FLEET, "--out", str(out), *TINY, "--updates", "2", "--no-progress"])
    printed = capsys.readouterr().out
    assert "graded evaluation: 3 held-out episodes" in printed and FLEET in printed
    for name in ("config.toml", "metrics.csv", "checkpoint.msgpack", "reward_curve.png", "episode.png", "eval.json"):
        assert (out / name).is_file(), name
    config = load_config(out / "config.toml")
    assert config.task == FLEET and config.num_updates == 2 and read_config(out) == config
    assert [int(r["update"]) for r in read_metrics(out)] == [1, 2]
    record = json.loads((out / "eval.json").read_text())
    assert record["task"] == FLEET and record["split"] == "heldout" and record["env_steps"] == 2 * 4 * 4
    rows = [row["policy"].split(" ")[0] for row in record["table"]]  # "oracle (clairvoyant bound)"
    assert rows[0] == "ppo" and sorted(rows[1:]) == sorted(BASELINES) and set(record["per_episode"]) == set(rows)
    per = record["per_episode"]
    assert all(len(per[name]["gpu_hours"]) == 3 and len(per[name]["slo_attainment"]) == 3 for name in rows)
    table = {row["policy"].split(" ")[0]: row for row in record["table"]}
    assert table["static_for_peak"]["score"] == 0.0 and table["oracle"]["score"] == pytest.approx(1.0)
    assert table["ppo"]["gpu_hours"] == pytest.approx(np.mean(per["ppo"]["gpu_hours"]), rel=1e-6)
    assert (out / "episode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # `eval` grades the saved policy on the same held-out episodes (a fleet's default: its config's
    # eval_episodes): the same record.
    again = tmp_path / "again.json"
    main(["eval", "--checkpoint", str(out), "--json", str(again)])
    assert json.loads(again.read_text())["table"] == record["table"]

    # --resume reads the fleet's checkpoint back (its config and env checked) and, the run done,
    # trains nothing more; --no-eval keeps the folder's evaluation. Another config is refused.
    main(["train", "--task", FLEET, "--out", str(out), *TINY, "--updates", "2", "--resume", "--no-eval",
          "--no-progress"])
    assert [int(r["update"]) for r in read_metrics(out)] == [1, 2]
    assert json.loads((out / "eval.json").read_text())["table"] == record["table"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["train", "--task", FLEET, "--out", str(out), *TINY, "--updates", "3", "--resume", "--no-progress"])
    assert "num_updates: 2 (checkpoint) != 3 (requested)" in capsys.readouterr().err

    for baselines, message in (("best_static", "unknown baselines ['best_static']"),
                               ("hpa,oracle", "lack ['static_for_peak']: the fleet's score is graded between")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(["eval", "--checkpoint", str(out), "--episodes", "2", "--baselines", baselines])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_fleet_config_refuses_a_memory_wrapper_through_the_cli(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", FLEET, "--out", str(tmp_path / "run"), "--set", "history_windows=2"])
    assert exit_info.value.code == 2
    assert not (tmp_path / "run").exists()


def test_a_fleet_config_round_trips_through_toml():
    config = from_dict({"task": FLEET, "num_envs": 8, "default_logit": 5.0, "desync_envs": True})
    assert load_config_text(config.to_toml()) == config


def load_config_text(text: str):
    """A TrainConfig from the TOML text `TrainConfig.to_toml` wrote."""
    import tomllib

    return from_dict(tomllib.loads(text))
