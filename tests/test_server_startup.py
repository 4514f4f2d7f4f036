"""`inferencegym serve`'s start-up (issue 43): JAX's persistent compilation cache in the folder
the docs name (a restart loads what the first start compiled; --no-compile-cache keeps nothing),
and /baseline in bounded memory, bit for bit evaluate.evaluate's. The restart's time on every
task is measured by scripts/bench_server.py (BENCHMARKS.md), not asserted here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import httpx
import jax
import numpy as np
import pytest
from served import _free_port  # tests/served.py

import inferencegym_jax as ig
from inferencegym_jax import baselines, evaluate
from inferencegym_jax.cli import build_parser
from inferencegym_jax.cli.serve_command import DEFAULT_CACHE_DIR, compile_cache_dir

TASK = "InferenceGym-Task1-v1"
REPORT = re.compile(r"\((\d+) programs compiled, (\d+) loaded from JAX's compilation cache\)")
CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "INFERENCEGYM_CACHE_DIR")


def test_the_cache_folder_is_the_option_then_jaxs_variable_then_ours_then_the_default():
    env = {"JAX_COMPILATION_CACHE_DIR": "/j", "INFERENCEGYM_CACHE_DIR": "/i"}
    assert compile_cache_dir("/o", env) == Path("/o")
    assert compile_cache_dir(None, env) == Path("/j")
    assert compile_cache_dir(None, {"INFERENCEGYM_CACHE_DIR": "/i"}) == Path("/i")
    assert compile_cache_dir(None, {}) == Path(DEFAULT_CACHE_DIR).expanduser()
    assert build_parser().parse_args(["serve", "--no-compile-cache"]).no_compile_cache
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--no-compile-cache", "--compile-cache", "/o"])


def _compile_in_child(tmp_path: Path, off: bool) -> list[Path]:
    """Files JAX's cache wrote under a folder named by $INFERENCEGYM_CACHE_DIR after a child
    process set the cache as `serve` does (or turned it off, with JAX's own variable set)."""
    folder = tmp_path / ("off" if off else "on")
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env.update({"INFERENCEGYM_CACHE_DIR": str(folder)} if not off else {"JAX_COMPILATION_CACHE_DIR": str(folder)})
    code = ("from inferencegym_jax.cli.serve_command import compile_cache_dir, use_compile_cache\n"
            f"use_compile_cache(None if {off} else compile_cache_dir(None))\n"
            "import jax; jax.jit(lambda x: x * 2 + 1)(1.0).block_until_ready()\n")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    return sorted(folder.glob("*")) if folder.is_dir() else []


def test_the_cache_variable_is_used_and_no_compile_cache_keeps_nothing(tmp_path):
    assert _compile_in_child(tmp_path, off=False), "nothing cached under $INFERENCEGYM_CACHE_DIR"
    assert _compile_in_child(tmp_path, off=True) == []


def _start(cache: Path, log: Path) -> tuple[subprocess.Popen, tuple[int, int]]:
    """`serve --compile-cache cache` on one task and one session, once /health answers: the
    process and its (compiled, loaded) counts."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "inferencegym_jax.cli", "serve", "--task", TASK,
                                 "--port", str(port), "--max-sessions", "1", "--compile-cache", str(cache)],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.25)
    else:
        proc.kill()
        pytest.fail(f"serve did not start: {log.read_text()[-3000:]}")
    found = REPORT.search(log.read_text())
    assert found, log.read_text()[-3000:]
    return proc, (int(found[1]), int(found[2]))


def _stop(proc: subprocess.Popen, log: Path) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    # uvicorn shuts down, then raises the signal it caught again: -SIGTERM
    assert proc.wait(timeout=300) in (0, -signal.SIGTERM), log.read_text()[-3000:]
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


@pytest.mark.slow  # two servers of their own, the first from an empty cache: ~25 s on 2 cores
def test_a_restart_loads_every_program_the_first_start_compiled(tmp_path):
    """The first start (an empty cache) compiles and writes the cache; the second compiles
    nothing. Stopping right after start-up also stops /baseline's background compilation."""
    pytest.importorskip("openenv", reason="the [server] extra is not installed")
    cache = tmp_path / "cache"
    first, (compiled, loaded) = _start(cache, tmp_path / "first.err")
    _stop(first, tmp_path / "first.err")
    assert compiled > 0 and loaded == 0 and any(cache.iterdir())
    second, (compiled_again, loaded_again) = _start(cache, tmp_path / "second.err")
    _stop(second, tmp_path / "second.err")
    assert (compiled_again, loaded_again) == (0, compiled)


@pytest.mark.slow  # the fast tier's 15-min budget (2026-12-06: 16 min 50 s with the reservation task's tests)
def test_baseline_batches_are_graded_bit_for_bit_as_evaluate_grades_them():
    """core._evaluate_bounded (run and graded batch by batch) against evaluate.evaluate (all
    episodes graded at once) on one episode, a ragged batch and two batches plus one episode."""
    from inferencegym_jax.server.core import _evaluate_bounded

    env, params = ig.make(TASK)
    pool = types.SimpleNamespace(env=env, params=params, task_id=TASK)
    key = evaluate.evaluation_key(3)
    policy = evaluate.as_policy_pytree(baselines.baseline_policies(env, params, TASK)["random"])
    for episodes in (1, 3, 17):
        expected = evaluate.evaluate(env, params, policy, key, episodes, TASK, batch_size=8)
        got = _evaluate_bounded(pool, policy, key, episodes)
        leaves = jax.tree_util.tree_leaves((expected.scores, expected.breakdown, expected.metrics))
        for want, have in zip(leaves, jax.tree_util.tree_leaves((got.scores, got.breakdown, got.metrics))):
            np.testing.assert_array_equal(np.asarray(have), np.asarray(want))
        assert got.feedback == expected.feedback
