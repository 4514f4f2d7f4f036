"""`inferencegym train` and `inferencegym eval` end to end on task 1 (tiny shapes)."""

from __future__ import annotations

import json

import pytest

from inferencegym_jax.cli import main
from training.config import load_config
from training.loop import read_metrics

TINY = ["--set", "num_envs=8", "--set", "num_steps=4", "--set", "num_minibatches=2", "--set", "update_epochs=1",
        "--set", "actor_widths=[16]", "--set", "critic_widths=[16]", "--set", "checkpoint_every=2"]


def test_train_then_eval_from_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    main(["train", "--task", "1", "--out", str(out), *TINY, "--updates", "3", "--eval-episodes", "4",
          "--baselines", "vllm_default", "--no-progress"])
    printed = capsys.readouterr().out
    assert "resolved config" in printed and "graded evaluation" in printed and "vllm_default" in printed
    for name in ("config.toml", "metrics.csv", "checkpoint.msgpack", "reward_curve.png", "episode.png", "eval.json"):
        assert (out / name).is_file(), name
    config = load_config(out / "config.toml")
    assert config.task == "InferenceGym-Task1-v0" and config.num_updates == 3 and config.num_envs == 8
    assert [int(r["update"]) for r in read_metrics(out)] == [1, 2, 3]
    record = json.loads((out / "eval.json").read_text())
    assert set(record["scores"]) == {"ppo", "vllm_default"} and len(record["scores"]["ppo"]) == 4
    assert record["updates"] == 3 and record["env_steps"] == 3 * 8 * 4
    assert all(0.0 <= s <= 1.0 for s in record["scores"]["ppo"])

    # The saved policy, evaluated on the same held-out keys, scores exactly as at the end of training.
    again = tmp_path / "again.json"
    main(["eval", "--checkpoint", str(out), "--episodes", "4", "--json", str(again), "--baselines", "vllm_default"])
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
