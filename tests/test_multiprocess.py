"""Two JAX processes (jax.distributed, CPU collectives over 127.0.0.1) give one process's numbers.

tests/multiprocess_worker.py runs a graded evaluation (random baseline, 16 episodes of task 1)
and 2 PPO updates (8 envs of a probe), both split over every device, in three processes at
once: the two of one distributed run (one CPU device each, launched with the variables
`sharding.initialize_distributed` reads) and a single-process reference with 2 host devices.
The two processes must hold the same results, bit for bit (each gathers the whole of them), and
those must be the reference's: the evaluation bit for bit (the same per-device program, no
communication), the training to tests/test_sharding.py's tolerance (its all-reduces run by
another runtime, gloo; bit for bit too on jaxlib 0.10.2).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import sharding

# The slow tier (scripts/run_tests.sh --slow, which CI runs): three JAX processes at once;
# tests/test_sharding.py checks the sharded programs in one process.
pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("multiprocess_worker.py")
# The package's root as this process imported it (the checkout or site-packages): the workers
# import the same files, whatever the working directory.
PACKAGE_ROOT = str(Path(ig.__file__).resolve().parents[1])
TIMEOUT_S = 240  # all three together; about 60 s on 2 idle cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(host_devices: int, launch: dict[str, str]) -> dict[str, str]:
    """This process's environment without any launch or SLURM variables, plus `launch`."""
    env = {k: v for k, v in os.environ.items() if k not in sharding.LAUNCH_VARIABLES and not k.startswith("SLURM_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={host_devices}".strip()
    return {**env, **launch}


def _run_all(tmp_path: Path, runs: dict[str, dict[str, str]]) -> dict[str, dict[str, np.ndarray]]:
    """Start one worker per entry (name -> environment) at once; their npz results by name.

    Fails with every worker's output if one fails or they take longer than TIMEOUT_S together;
    no worker outlives the call.
    """
    procs, logs = {}, {}
    try:
        for name, env in runs.items():
            logs[name] = (tmp_path / f"{name}.log").open("w")
            procs[name] = subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / f"{name}.npz")], env=env,
                                           cwd=tmp_path, stdout=logs[name], stderr=subprocess.STDOUT)
        deadline = time.monotonic() + TIMEOUT_S
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs.values()):
                break  # one failed: the others may wait for it forever
            time.sleep(0.5)
        codes = {name: p.poll() for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in logs.values():
            f.close()
    if any(code != 0 for code in codes.values()):
        shown = "\n".join(f"--- {name} (exit {codes[name]}):\n{(tmp_path / f'{name}.log').read_text()[-4000:]}"
                          for name in runs)
        raise AssertionError(f"workers failed or ran past {TIMEOUT_S} s (exit None: killed)\n{shown}")
    return {name: dict(np.load(tmp_path / f"{name}.npz")) for name in runs}


def _relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    if np.array_equal(a, b):
        return 0.0
    if not np.issubdtype(a.dtype, np.floating):
        return float("inf")
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-30)))


def test_two_processes_match_one_process_with_two_devices(tmp_path):
    port = _free_port()

    def process(rank: int) -> dict[str, str]:
        return _environment(1, {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
                                "JAX_PROCESS_ID": str(rank)})

    out = _run_all(tmp_path, {"process0": process(0), "process1": process(1), "reference": _environment(2, {})})
    first, second, reference = out["process0"], out["process1"], out["reference"]
    # (process index, process count, device count)
    assert first.pop("process").tolist() == [0, 2, 2] and second.pop("process").tolist() == [1, 2, 2]
    assert reference.pop("process").tolist() == [0, 1, 2]

    assert set(first) == set(second) == set(reference)
    assert any(k.startswith("random") for k in first) and any(k.startswith("runner") for k in first)
    unequal = [k for k in first if not np.array_equal(first[k], second[k])]
    assert not unequal, f"the two processes hold different results: {unequal}"
    differences = {k: _relative_difference(reference[k], first[k]) for k in reference}
    unequal = {k: d for k, d in differences.items() if d and k.startswith("random")}
    assert not unequal, f"evaluation differs from one process: {unequal}"
    worst = max(differences, key=differences.__getitem__)
    assert differences[worst] <= 1e-4, f"{worst}: {differences[worst]} relative to one process"


def test_initialize_distributed_reads_a_launch_or_nothing():
    # nothing to join (one process, or a SLURM step of one task): no jax.distributed call
    assert sharding.initialize_distributed({}) is False
    assert sharding.initialize_distributed({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) is False
    launch = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES, JAX_PROCESS_ID"):
        sharding.initialize_distributed({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234"})
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES='two'"):
        sharding.initialize_distributed({**launch, "JAX_NUM_PROCESSES": "two"})
    with pytest.raises(ValueError, match=r"JAX_PROCESS_ID=2 must be in \[0, JAX_NUM_PROCESSES=2\)"):
        sharding.initialize_distributed({**launch, "JAX_PROCESS_ID": "2"})
    with pytest.raises(ValueError, match="SLURM_NTASKS"):
        sharding.initialize_distributed({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "many"})
