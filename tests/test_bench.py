"""`inferencegym bench` runs end to end on tiny sizes and writes its table, JSON and figure."""

from __future__ import annotations

import json
import os

from inferencegym_jax import bench


def test_bench_writes_rows_json_and_figure(tmp_path, capsys):
    out, png = tmp_path / "bench.json", tmp_path / "scaling.png"
    bench.main(["--tasks", "1", "--envs", "4", "--steps", "3", "--numpy-steps", "2", "--repeats", "1",
                "--no-ppo", "--no-grade", "--json", str(out), "--plot", str(png)])
    rows = json.loads(out.read_text())["rows"]
    assert {(r["impl"], r["num_envs"]) for r in rows} == {("jax", 4), ("numpy", 4)}
    for r in rows:
        assert r["task"] == "InferenceGym-Task1-v0" and r["steps_per_sec"] > 0 and r["median_s"] > 0
        assert r["compile_s"] > 0 if r["impl"] == "jax" else r["compile_s"] == 0
        assert r["memory_mb"] is None or r["memory_mb"] > 0
    table = capsys.readouterr().out
    assert "| jax | Task1 | 4 |" in table and "x |" in table  # the jax/numpy ratio column
    assert png.stat().st_size > 10_000


def test_xla_cpu_options_script_compares_options_and_bits():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "xla_cpu_options.py"
    out = subprocess.run([sys.executable, str(script), "--task", "InferenceGym-Task1-v0", "--envs", "4", "--steps", "2",
                          "--rounds", "1", "--option", 'min/max={"xla_cpu_enable_fast_min_max": true}'],
                         capture_output=True, text=True, check=True).stdout
    assert "| default | " in out and "| 1.00x |" in out and "0.0e+00" in out
    assert 'min/max `{"xla_cpu_enable_fast_min_max": true}`' in out


def test_cli_xla_flags_only_where_measured_and_never_over_the_users(monkeypatch):
    import jaxlib

    from inferencegym_jax import cli

    monkeypatch.setattr(jaxlib, "__version__", "0.10.2")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert cli.use_xla_cpu_flags()
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2 " + cli.XLA_CPU_FLAGS
    assert not cli.use_xla_cpu_flags()  # already there: not added twice
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")  # the user's choice stands
    assert not cli.use_xla_cpu_flags() and os.environ["XLA_FLAGS"].endswith("=dot")
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(jaxlib, "__version__", "0.11.0")  # not measured there; XLA aborts on unknown flags
    assert not cli.use_xla_cpu_flags() and "XLA_FLAGS" not in os.environ
