"""`inferencegym_jax.loadtest` and `inferencegym loadtest`: the rows, their physics, the pooled
request-level percentiles, determinism, one compilation for every rate, and the command line.

Every simulation here uses one run shape (RUN), so the module compiles the load test once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inferencegym_jax import loadtest, perf_model
from inferencegym_jax.cli import main
from inferencegym_jax.cli.loadtest_command import GPU_CHOICES
from inferencegym_jax.loadtest import ROW_KEYS, LoadPoint, mixture_quantiles, run_loadtest

RUN = {"seconds": 120, "warmup": 20, "episodes": 4}  # 480 measured seconds per row
LOW, HIGH = 2.0, 12.0  # [req/s] offered: ~13 % and ~80 % of A100 cap 64's 512/128 capacity (~14.4)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """A100, cap 64, fixed 512/128 (LoadPoint's defaults) at LOW and HIGH, and saturation."""
    return run_loadtest(LoadPoint(), [LOW, HIGH], saturation=True, seed=0, **RUN)


def test_rows_have_the_keys_in_order_and_the_saturation_row_last(rows):
    assert [list(r) for r in rows] == [list(ROW_KEYS)] * 3
    assert [r["rate"] for r in rows] == [LOW, HIGH, "saturation"]
    assert all(isinstance(r[k], float) and np.isfinite(r[k]) for r in rows for k in ROW_KEYS[1:])


def test_same_seed_same_rows_another_seed_others_and_no_retrace(rows):
    compiled = loadtest._episodes._cache_size()
    again = run_loadtest(LoadPoint(), [LOW, HIGH], seed=0, **RUN)
    assert again == rows[:2]
    other = run_loadtest(LoadPoint(), [7.3], seed=1, **RUN)  # another rate and seed: traced values
    assert loadtest._episodes._cache_size() == compiled
    assert other[0]["rate"] == 7.3 and run_loadtest(LoadPoint(), [LOW], seed=1, **RUN)[0] != rows[0]


def test_low_load_serves_what_arrives_and_waits_one_prefill(rows):
    """Conservation: below capacity completions per second match the offered rate (3,840 expected
    arrivals at HIGH: a Poisson sd of 1.6 %). TTFT at low load: a lone 512-token prompt takes one
    static prefill plus the per-request overhead, and waits at most one decode step in flight."""
    low, high = rows[0], rows[1]
    assert abs(high["requests_per_s"] / HIGH - 1.0) < 0.05
    assert abs(low["output_tokens_per_s"] / (128 * LOW) - 1.0) < 0.12  # 960 arrivals: sd 3.2 %
    profile = perf_model.get_profile("a100-80gb", "llama-3-8b", "fp16", "eagle")
    alone = float(perf_model.prefill_time(profile, 512)) + float(profile.request_overhead_s)
    step = float(perf_model.decode_step_time(profile, 64, 640))  # the longest step in flight at cap 64
    assert alone <= low["ttft_p50_s"] <= alone + step
    assert alone <= low["ttft_mean_s"] <= alone + step


def test_percentiles_are_ordered_and_load_shows(rows):
    low, high, sat = rows
    for r in rows:
        assert r["ttft_p50_s"] <= r["ttft_p90_s"] <= r["ttft_p99_s"]
    assert low["ttft_p99_s"] < high["ttft_p99_s"] < sat["ttft_p99_s"]
    assert low["tpot_mean_s"] < high["tpot_mean_s"] < sat["tpot_mean_s"]
    assert sat["requests_per_s"] >= max(low["requests_per_s"], high["requests_per_s"])
    assert sat["output_tokens_per_s"] >= high["output_tokens_per_s"]


def test_mixture_quantiles_match_a_large_sample():
    """Against 400,000 draws of a known mixture (three uniforms, one point mass, an empty
    component): each quantile within the sample's error."""
    rng = np.random.default_rng(0)
    low = np.array([0.05, 0.06, 0.5, 0.2, 9.0])
    high = np.array([0.09, 0.30, 2.5, 0.2, 9.5])
    weight = np.array([40.0, 30.5, 4.0, 25.0, 0.0])
    n = 400_000
    pick = rng.choice(len(low), size=n, p=weight / weight.sum())
    sample = rng.uniform(low[pick], high[pick])
    qs = (0.1, 0.5, 0.7, 0.9, 0.99)
    exact = mixture_quantiles(low, high, weight, qs)
    assert np.allclose(exact, np.quantile(sample, qs), rtol=0.01, atol=1e-3), (exact, np.quantile(sample, qs))
    assert exact[2] == 0.2  # the point mass holds [0.6025, 0.8525] of the CDF: the 0.7-quantile is it
    assert np.allclose(mixture_quantiles([0.0], [2.0], [1.0], (0.25, 0.5)), [0.5, 1.0])
    assert np.isnan(mixture_quantiles(low, high, np.zeros(5), (0.5,))).all()


def test_the_gpu_choices_are_the_libraries():
    assert GPU_CHOICES == loadtest.GPUS


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"gpu": "h200"}, "gpu='h200': must be one of ['a100-80gb', 'h100-sxm']"),
    ({"batch_size": 0}, "batch_size=0: must be an integer in [1, 512]"),
    ({"kv_budget": 0.0}, "kv_budget=0.0: must be a number in [0.1, 1]"),
    ({"spec_length": 9}, "spec_length=9"),
    ({"quant_tier": "fp8"}, "quant_tier='fp8'"),
    ({"prefill_disagg": 2}, "prefill_disagg=2"),
    ({"prompt": {"kind": "zipf", "low": 1, "high": 2}}, "prompt.kind='zipf'"),
    ({"output": {"kind": "lognormal", "low": 1, "high": 2}}, "'output.median1' is missing"),
])
def test_bad_points_name_the_field(kwargs, named):
    with pytest.raises(ValueError, match=None) as err:
        LoadPoint(**kwargs)
    assert named in str(err.value)


@pytest.mark.parametrize("rates", [[-1.0], [0.0], [float("nan")], [float("inf")], [2e4]])
def test_bad_rates_name_rates(rates):
    with pytest.raises(ValueError, match=r"rates: .* \(0, 10000\] req/s"):
        run_loadtest(LoadPoint(), rates, **RUN)


def one_line_error(argv: list[str], capsys) -> str:
    """`inferencegym <argv>` in-process: exit status 2 and one line on stderr, returned."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("inferencegym: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(("extra", "named"), [
    ([], "--rate: give at least one offered rate"),
    (["--rate", "-1"], "--rate: -1.0 is not a rate"),
    (["--rate", "2", "x"], "argument --rate: invalid float value: 'x'"),
    (["--rate", "2", "--batch-size", "600"], "--batch-size: batch_size=600: must be an integer in [1, 512]"),
    (["--rate", "2", "--prompt", "{bad"], "argument --prompt: '{bad' is not valid JSON"),
    (["--rate", "2", "--output", '{"kind": "poisson", "low": 1, "high": 2}'], "--output: output.kind='poisson'"),
    (["--rate", "2", "--quant-tier", "fp8"], "argument --quant-tier: invalid choice: 'fp8'"),
    (["--rate", "2", "--seconds", "0"], "argument --seconds: '0' must be a positive integer"),
    (["--rate", "2", "--warmup", "999999"], "--warmup: warmup=999999: must be an integer in [0, 999400]"),
    (["--rate", "2", "--json", "TMP"], "is a folder; give a file path"),
])
def test_bad_command_lines_are_one_line_naming_the_flag(extra, named, tmp_path, capsys):
    argv = ["loadtest", *[str(tmp_path) if a == "TMP" else a for a in extra]]
    assert named in one_line_error(argv, capsys)


def test_the_installed_command_writes_the_rows(tmp_path):
    """`inferencegym loadtest` through the installed entry point, once: table and JSON."""
    out = tmp_path / "rows.json"
    command = Path(sys.executable).parent / "inferencegym"
    argv = [str(command), "loadtest", "--rate", "3", "--seconds", "30", "--warmup", "5", "--episodes", "2",
            "--prompt", '{"kind": "lognormal", "median1": 250, "sigma1": 1.0, "low": 8, "high": 4096}',
            "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TTFT p99 ms" in proc.stdout and f"wrote {out}" in proc.stdout
    (row,) = json.loads(out.read_text())
    assert list(row) == list(ROW_KEYS) and row["rate"] == 3.0
    assert 0.05 < row["ttft_p50_s"] < row["ttft_p99_s"] < 1.0 and 2.0 < row["requests_per_s"] < 4.0
