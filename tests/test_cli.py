"""The `inferencegym` command: a light import, one-line errors before any long computation, and
the shipped training config of the task asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

import inferencegym_jax as ig
from inferencegym_jax.cli import env_commands, main

COMMANDS = ("rollout", "baselines", "train", "eval", "sweep", "bench")


class LongComputationStarted(AssertionError):
    """Raised by the stand-ins of the long computations: the command got past its checks."""


@pytest.fixture(autouse=True)
def _no_long_computations(monkeypatch):
    """Training, sweeps and baseline tables fail the test if a command reaches them."""
    import training.loop
    import training.sweep

    def started(*args, **kwargs):
        raise LongComputationStarted("the command started its long computation")

    monkeypatch.setattr(training.loop, "run_training", started)
    monkeypatch.setattr(training.sweep, "run_sweep", started)
    monkeypatch.setattr(env_commands, "baseline_table", started)


def one_line_error(argv: list[str], capsys) -> str:
    """Run `main(argv)`, expecting exit status 2 and exactly one line on stderr; return it."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("inferencegym: error: ") and err.count("\n") == 1, err
    return err


def test_import_and_help_load_no_heavy_modules():
    """`inferencegym --help` is fast: neither the import nor the help loads JAX, the trainer,
    pandas, matplotlib, an optimiser or a network library."""
    code = (
        "import runpy, sys\n"
        "import inferencegym_jax.cli\n"
        "sys.argv = ['inferencegym', '--help']\n"
        "try:\n"
        "    runpy.run_module('inferencegym_jax.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'jax', 'jaxlib', 'training', 'pandas', 'matplotlib', 'optax', 'distrax', 'tqdm', 'flax'}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: inferencegym") and all(c in proc.stdout for c in COMMANDS)


def test_unknown_task_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", "99", "--out", str(tmp_path / "run")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2
    assert last.startswith("inferencegym train: error: argument --task: '99' is not a task")
    assert all(env_id in last for env_id in ig.registered_envs())


@pytest.mark.parametrize(("extra", "named"), [
    (["--set", "lr=abc"], "'lr'"),
    (["--set", "num_minibatches=3"], "'num_minibatches'"),
    (["--set", "lr"], "KEY=VALUE"),
    (["--config", "no/such/config.toml"], "no/such/config.toml"),
])
def test_bad_training_config_is_one_line_before_training(extra, named, tmp_path, capsys):
    out = tmp_path / "run"
    err = one_line_error(["train", "--task", "1", "--out", str(out), *extra], capsys)
    assert named in err
    assert not out.exists()  # nothing written: the config was rejected first


def test_task_without_a_shipped_config_names_it_and_asks_for_config(tmp_path, capsys, monkeypatch):
    import training.config

    monkeypatch.setattr(training.config, "shipped_configs", lambda: ["ppo_task1"])
    err = one_line_error(["train", "--task", "2", "--out", str(tmp_path / "run")], capsys)
    assert "InferenceGym-Task2-v0" in err and "['ppo_task1']" in err and "--config" in err


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_train_without_config_uses_the_tasks_shipped_config(number, tmp_path, monkeypatch):
    import training.ppo
    from training.config import load_config

    class Stop(Exception):
        pass

    def stop(config, *args, **kwargs):
        raise Stop(config)

    monkeypatch.setattr(training.ppo, "make_train", stop)
    out = tmp_path / "run"
    with pytest.raises(Stop) as stopped:
        main(["train", "--task", str(number), "--out", str(out), "--updates", "2"])
    expected = load_config(f"ppo_task{number}", num_updates=2)
    assert stopped.value.args[0] == expected
    assert load_config(out / "config.toml") == expected  # the resolved config, written first


def test_unusable_output_paths_fail_before_computing(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    err = one_line_error(["baselines", "--task", "1", "--json", str(tmp_path)], capsys)
    assert "is a folder" in err
    err = one_line_error(["baselines", "--task", "1", "--json", str(a_file / "out.json")], capsys)
    assert "is not a folder" in err and str(a_file) in err
    err = one_line_error(["sweep", "--task", "1", "--grid", "lr=1e-3", "--out", str(a_file / "sweep")], capsys)
    assert "--out" in err and "is not a folder" in err
    err = one_line_error(["train", "--task", "1", "--out", str(a_file)], capsys)  # OSError from mkdir
    assert str(a_file) in err
