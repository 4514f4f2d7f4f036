"""The `inferencegym` command: a light import, one-line errors before any long computation, and
the shipped training config of the task asked for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import inferencegym_jax as ig
from inferencegym_jax import tasks
from inferencegym_jax.cli import bench, env_commands, main
from inferencegym_jax.cli.common import ppo_config_name
from inferencegym_jax.cli.training_commands import DEFAULT_CONFIG, DEFAULT_TASK

COMMANDS = ("rollout", "baselines", "train", "eval", "sweep", "bench", "plot", "serve")


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
    monkeypatch.setattr(env_commands, "rollout_row", started)
    monkeypatch.setattr(bench, "_task_rows", started)


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
    pandas, matplotlib, an optimiser, a network library or the server's web stack."""
    code = (
        "import runpy, sys\n"
        "import inferencegym_jax.cli\n"
        "sys.argv = ['inferencegym', '--help']\n"
        "try:\n"
        "    runpy.run_module('inferencegym_jax.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'jax', 'jaxlib', 'training', 'pandas', 'matplotlib', 'optax', 'distrax', 'tqdm', 'flax',\n"
        "         'openenv', 'fastapi', 'uvicorn', 'pydantic'}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: inferencegym") and all(c in proc.stdout for c in COMMANDS)


def test_unknown_task_is_one_line_listing_the_tasks(tmp_path, capsys):
    err = one_line_error(["train", "--task", "99", "--out", str(tmp_path / "run")], capsys)
    assert err.startswith("inferencegym: error: argument --task: '99' is not a task: no task 99 is registered")
    assert "newest version" in err and all(env_id in err for env_id in ig.registered_envs())
    assert "inferencegym train --help" in err


# Bad arguments: (argv, with OUT for a run folder that must not appear, what the line must say).
BAD_ARGUMENTS = [
    (["rollout", "--task", "InferenceGym-Task9-v0"], "'InferenceGym-Task9-v0' is not a task"),
    (["bench", "--tasks", "0"], "argument --tasks: '0' is not a task"),
    (["train", "--updates", "-1", "--out", "OUT"], "argument --updates: '-1' must be a positive integer"),
    (["train", "--updates", "0", "--out", "OUT"], "argument --updates: '0' must be a positive integer"),
    (["train", "--eval-episodes", "0", "--out", "OUT"], "argument --eval-episodes"),
    (["rollout", "--episodes", "0"], "argument --episodes: '0' must be a positive integer"),
    (["baselines", "--episodes", "-3"], "argument --episodes: '-3'"),
    (["eval", "--checkpoint", "OUT", "--episodes", "0"], "argument --episodes"),
    (["bench", "--envs", "0"], "argument --envs: '0' must be a positive integer"),
    (["bench", "--envs", "8", "-2"], "argument --envs: '-2'"),
    (["sweep", "--grid", "lr=1e-3", "--seeds", "0", "--out", "OUT"], "argument --seeds: '0'"),
    (["train", "--set", "lr=abc", "--out", "OUT"], "config key 'lr' must be a number, got 'abc'"),
    (["train", "--set", "lr=-1", "--out", "OUT"], "config key 'lr' = -1.0 out of range"),
    (["train", "--set", "nonsense_key=1", "--out", "OUT"], "unknown config key 'nonsense_key'"),
    (["train", "--set", "num_minibatches=3", "--out", "OUT"], "'num_minibatches' = 3 must divide"),
    (["train", "--set", "lr", "--out", "OUT"], "KEY=VALUE"),
    (["train", "--set", "seed=4294967296", "--out", "OUT"], "config key 'seed' = 4294967296 out of range"),
    (["sweep", "--grid", "lr=1e-3", "--set", "seed=4294967295", "--seeds", "2", "--out", "OUT"],
     "--seeds 2: the seeds 4294967295 .. 4294967296 go past the largest seed"),
    (["train", "--config", "no/such/config.toml", "--out", "OUT"], "config file 'no/such/config.toml' does not exist"),
    (["train", "--config", "no_such_shipped_config", "--out", "OUT"], "unknown config 'no_such_shipped_config'"),
    (["rollout", "--seed", "18446744073709551616"], "argument --seed: '18446744073709551616' is not a seed"),
    (["rollout", "--seed", "-1"], "in [0, 2**32 - 1 = 4294967295]"),
    (["baselines", "--seed", "4294967296"], "argument --seed: '4294967296' is not a seed"),
    (["train", "--seed", "18446744073709551616", "--out", "OUT"], "argument --seed"),
    (["train", "--eval-seed", "x", "--out", "OUT"], "argument --eval-seed: 'x' is not a seed"),
    (["eval", "--checkpoint", "OUT", "--eval-seed", "-1"], "argument --eval-seed"),
    (["train", "--resume", "--out", "OUT"], "--resume: no checkpoint in"),
    (["eval", "--checkpoint", "OUT"], "no checkpoint at"),
    (["train", "--task", "1"], "the following arguments are required: --out"),
]


@pytest.mark.parametrize(("argv", "named"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_are_one_line_before_any_work(argv, named, tmp_path, capsys):
    out = tmp_path / "run"
    err = one_line_error([str(out) if a == "OUT" else a for a in argv], capsys)
    assert named in err, err
    assert "Traceback" not in err
    assert not out.exists()  # nothing written


def test_bad_config_files_are_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    invalid = tmp_path / "invalid.toml"
    invalid.write_text("lr = = 3\n")
    assert f"config {str(invalid)!r} is not valid TOML" in one_line_error(
        ["train", "--config", str(invalid), "--out", str(out)], capsys)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("nonsense = 1\n")
    assert "unknown config key 'nonsense'" in one_line_error(["train", "--config", str(unknown), "--out", str(out)],
                                                             capsys)
    assert "config file" in one_line_error(["train", "--config", str(tmp_path), "--out", str(out)], capsys)
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["train", "--task", "9", "--out", "OUT"],
    ["rollout", "--seed", "18446744073709551616"],
    ["train", "--set", "lr=abc", "--out", "OUT"],
    ["baselines", "--json", "TMP"],
])
def test_the_command_in_a_process_prints_no_traceback(argv, tmp_path):
    """The same errors from a real process (`python -m inferencegym_jax.cli`): one line, status 2."""
    argv = [str(tmp_path / "run") if a == "OUT" else str(tmp_path) if a == "TMP" else a for a in argv]
    proc = subprocess.run([sys.executable, "-m", "inferencegym_jax.cli", *argv], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("inferencegym: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "run").exists()


def test_task_without_a_shipped_config_names_it_and_asks_for_config(tmp_path, capsys, monkeypatch):
    import training.config

    monkeypatch.setattr(training.config, "shipped_configs", lambda: ["ppo_task1"])
    err = one_line_error(["train", "--task", "2", "--out", str(tmp_path / "run")], capsys)
    assert tasks.newest_version(2) in err and "['ppo_task1']" in err and "--config" in err


@pytest.mark.parametrize("task", ["1", "2", "3", "4", "InferenceGym-Task3-v0", None])
def test_train_without_config_uses_the_tasks_shipped_config(task, tmp_path, monkeypatch):
    """A number trains its task's newest version with that version's shipped config; a full id
    (an older version) its own; neither --task nor --config the main job."""
    import inferencegym_jax.training_setup
    from inferencegym_jax.training_setup import load_config

    class Stop(Exception):
        pass

    def stop(config, *args, **kwargs):
        raise Stop(config)

    monkeypatch.setattr(inferencegym_jax.training_setup, "make_train", stop)
    out = tmp_path / "run"
    with pytest.raises(Stop) as stopped:
        main(["train", *(["--task", task] if task else []), "--out", str(out), "--updates", "2"])
    env_id = tasks.resolve_id(task) if task else DEFAULT_TASK
    name = ppo_config_name(env_id) if task else DEFAULT_CONFIG
    assert stopped.value.args[0] == load_config(name, num_updates=2)
    assert stopped.value.args[0].task == env_id
    assert not out.exists()  # nothing is written before every check has passed


def test_the_resolved_config_is_written_before_training(tmp_path):
    from inferencegym_jax.training_setup import load_config

    out = tmp_path / "run"
    tiny = ["--set", "num_envs=4", "--set", "num_steps=4", "--set", "num_minibatches=1", "--set", "actor_widths=[8]"]
    with pytest.raises(LongComputationStarted):
        main(["train", "--task", "1", "--out", str(out), *tiny, "--no-progress"])
    assert load_config(out / "config.toml") == load_config(ppo_config_name(tasks.newest_version(1)), num_envs=4,
                                                           num_steps=4, num_minibatches=1, actor_widths=[8])
    assert sorted(p.name for p in out.iterdir()) == ["config.toml"]


@pytest.fixture
def places(tmp_path):
    """FILE: a file; TAKEN: a folder whose eval.json, sweep.csv are folders; RO: a folder the
    user cannot write."""
    (tmp_path / "FILE").write_text("not a folder")
    for name in ("eval.json", "sweep.csv"):
        (tmp_path / "TAKEN" / name).mkdir(parents=True)
    (tmp_path / "RO").mkdir()
    return tmp_path


# Unusable output paths: (argv with paths relative to `places`, what the line must say).
BAD_OUTPUTS = [
    (["baselines", "--task", "1", "--json", "."], "--json '.' is a folder; give a file path"),
    (["baselines", "--task", "1", "--json", "FILE/out.json"], "FILE' is not a folder"),
    (["baselines", "--task", "1", "--json", "FILE/deeper/out.json"], "FILE' is not a folder"),
    (["baselines", "--task", "1", "--json", "RO/out.json"], "RO' is not writable"),
    (["eval", "--checkpoint", "TAKEN", "--json", "TAKEN"], "--json 'TAKEN' is a folder"),
    (["bench", "--envs", "1", "--json", "."], "--json '.' is a folder"),
    (["bench", "--envs", "1", "--plot", "FILE/plot.png"], "FILE' is not a folder"),
    (["sweep", "--task", "1", "--grid", "lr=1e-3", "--out", "FILE"], "--out 'FILE': '{places}/FILE' is not a folder"),
    (["sweep", "--task", "1", "--grid", "lr=1e-3", "--out", "FILE/sweep"], "FILE' is not a folder"),
    (["sweep", "--task", "1", "--grid", "lr=1e-3", "--out", "TAKEN"], "'TAKEN/sweep.csv' is a folder"),
    (["sweep", "--task", "1", "--grid", "lr=1e-3", "--out", "RO/sweep"], "RO' is not writable"),
    (["train", "--task", "1", "--out", "FILE"], "--out 'FILE': '{places}/FILE' is not a folder"),
    (["train", "--task", "1", "--out", "FILE/run"], "FILE' is not a folder"),
    (["train", "--task", "1", "--out", "TAKEN"], "'TAKEN/eval.json' is a folder"),
    (["train", "--task", "1", "--out", "RO"], "RO' is not writable"),
]


@pytest.mark.parametrize(("argv", "named"), BAD_OUTPUTS, ids=[" ".join(a) for a, _ in BAD_OUTPUTS])
def test_unusable_output_paths_fail_before_computing(argv, named, places, capsys, monkeypatch):
    """Checked before any computation (the stand-ins fail the test if one starts). A read-only
    folder is simulated through os.access: this machine's tests may run as root, who can write
    anywhere (test_read_only_folders_for_real checks it for real where it can)."""
    real_access = os.access

    def access(path, mode, **kwargs):
        return False if os.path.abspath(path) == str(places / "RO") else real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.chdir(places)
    before = sorted(p.relative_to(places) for p in places.rglob("*"))
    assert named.format(places=places) in one_line_error(argv, capsys)
    assert sorted(p.relative_to(places) for p in places.rglob("*")) == before  # nothing written


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only folder")
def test_read_only_folders_for_real(tmp_path, capsys):
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o555)
    for argv in (["baselines", "--task", "1", "--json", str(read_only / "b.json")],
                 ["train", "--task", "1", "--out", str(read_only / "run")],
                 ["sweep", "--task", "1", "--grid", "lr=1e-3", "--out", str(read_only)]):
        assert "is not writable" in one_line_error(argv, capsys)


def test_the_clis_seed_limit_is_the_one_keys_have():
    """cli.common keeps its own MAX_SEED (--help must not import JAX); it must not drift."""
    from inferencegym_jax.cli import common
    from inferencegym_jax.traffic import sampling

    assert common.MAX_SEED == sampling.MAX_SEED == 2**32 - 1
