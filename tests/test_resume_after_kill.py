"""A real `inferencegym train`, killed with SIGKILL after a checkpoint and resumed with
`--resume`, ends bit-identical to an uninterrupted run and leaves no partial files.

Three processes of the command, as a user runs it: the killed one, then (side by side) the resume
and an uninterrupted run of the same config. They share a persistent JAX compilation cache, so
only the first compiles the PPO program; the cache holds the same executables a compile would
give, so it changes no number, only the test's time.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from flax import serialization

from training.checkpoint import FILENAME, read_header

# The slow tier (scripts/run_tests.sh --slow, which CI runs): training killed and resumed in
# subprocesses; tests/test_checkpoint.py checks a stop and resume in one process.
pytestmark = pytest.mark.slow

# Enough updates that, at ~10 ms per checkpointed update, the run is still going when the test
# has seen its first checkpoint; tiny shapes, so a run is import + compile + ~1-2 s.
UPDATES = 50
TINY = ["--task", "1", "--set", "num_envs=4", "--set", "num_steps=4", "--set", "num_minibatches=1",
        "--set", "update_epochs=1", "--set", "actor_widths=[8]", "--set", "critic_widths=[8]",
        "--set", "checkpoint_every=1", "--updates", str(UPDATES)]
RUN_TIMEOUT_S = 240  # per process: a generous bound on a loaded 2-core machine
RUN_FILES = {"checkpoint.msgpack", "config.toml", "metrics.csv", "reward_curve.png"}


def _start(out: Path, log: Path, cache: Path, *extra: str) -> subprocess.Popen:
    """`inferencegym train --out OUT ... --no-eval --no-progress` in a child process."""
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    command = [sys.executable, "-m", "inferencegym_jax.cli", "train", "--out", str(out), *extra,
               "--no-eval", "--no-progress"]
    with log.open("w") as f:
        return subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env)


def _checkpoint_update(out: Path) -> int:
    """Updates done by OUT's checkpoint; 0 before the first one is written."""
    try:
        return int(read_header(out)["update"])
    except ValueError:
        return 0


def _kill_after_first_checkpoint(proc: subprocess.Popen, out: Path, log: Path) -> int:
    """Poll until OUT holds a checkpoint after >= 1 update, SIGKILL the run; its update then."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while _checkpoint_update(out) < 1:
        assert proc.poll() is None, f"the run ended before a checkpoint:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    return _checkpoint_update(out)


def _finish(proc: subprocess.Popen, log: Path) -> str:
    """Wait for a run; its output (the test fails with it when the run failed)."""
    try:
        code = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert code == 0, output[-3000:]
    return output


def _state(out: Path) -> tuple[bytes, dict]:
    """(the final checkpoint's payload bytes, the RunnerState dict it decodes to)."""
    record = serialization.msgpack_restore((out / FILENAME).read_bytes())
    return record["payload"], serialization.msgpack_restore(record["payload"])


def _metrics(out: Path) -> list[dict[str, str]]:
    """metrics.csv's rows as written, without the wall-time column."""
    with (out / "metrics.csv").open(newline="") as f:
        return [{k: v for k, v in row.items() if k != "chunk_seconds"} for row in csv.DictReader(f)]


def _leaves(tree: dict) -> list[np.ndarray]:
    """The arrays of a nested state dict, in key order."""
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    return [np.asarray(tree)]


def test_sigkill_then_resume_is_bit_identical_and_leaves_no_partial_files(tmp_path):
    killed, uninterrupted, cache = tmp_path / "killed", tmp_path / "uninterrupted", tmp_path / "jax-cache"
    logs = {name: tmp_path / f"{name}.log" for name in ("killed", "resumed", "uninterrupted")}
    at = _kill_after_first_checkpoint(_start(killed, logs["killed"], cache, *TINY), killed, logs["killed"])
    assert 1 <= at < UPDATES, f"killed at update {at}: not mid-run"

    resumed = _start(killed, logs["resumed"], cache, "--resume")
    reference = _start(uninterrupted, logs["uninterrupted"], cache, *TINY)
    printed = _finish(resumed, logs["resumed"])
    _finish(reference, logs["uninterrupted"])
    assert f"trained {UPDATES - at} updates" in printed  # it continued from the checkpoint

    payload, state = _state(killed)
    ref_payload, ref_state = _state(uninterrupted)
    params, ref_params = _leaves(state["params"]), _leaves(ref_state["params"])
    assert ref_params and len(params) == len(ref_params)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(params, ref_params))
    assert payload == ref_payload  # and everything else: optimiser, normalisers, envs, key, update
    assert int(np.asarray(state["update"])) == UPDATES
    assert _metrics(killed) == _metrics(uninterrupted)  # every update's row once, none cut short
    assert [int(r["update"]) for r in _metrics(killed)] == list(range(1, UPDATES + 1))
    assert {p.name for p in killed.iterdir()} == RUN_FILES  # no temporary or partial files
