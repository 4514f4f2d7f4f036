"""`inferencegym_jax.loadtest` and `inferencegym loadtest`: the rows, their physics, the pooled
request-level percentiles (`inferencegym_jax.request_stats`: the grid CDF against the exact
quantiles), determinism, batching, one compilation for every rate, and the command line.

Every simulation here uses one run shape (RUN) and batches of 4, so the module compiles the load
test once (the slow tier once more, for batches of 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize

from inferencegym_jax import loadtest, perf_model, request_stats
from inferencegym_jax.cli import main
from inferencegym_jax.cli.loadtest_command import ENGINE_CHOICES, GPU_CHOICES, STRATA_CHOICES
from inferencegym_jax.loadtest import ROW_KEYS, LoadPoint, run_loadtest
from inferencegym_jax.request_stats import GRID_RATIO, TtftCdf, mixture_quantiles
from inferencegym_jax.serving.mixed import MEASURED_REQUEST_OVERHEAD_S
from inferencegym_jax.serving.types import ENGINES
from inferencegym_jax.traffic import workload

RUN = {"seconds": 120, "warmup": 20, "episodes": 4}  # 480 measured seconds per row
LOW, HIGH = 2.0, 12.0  # [req/s] offered: ~13 % and ~80 % of A100 cap 64's 512/128 capacity (~14.4)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """A100, cap 64, fixed 512/128 (LoadPoint's defaults) at LOW and HIGH, and saturation."""
    return run_loadtest(LoadPoint(engine="fluid"), [LOW, HIGH], saturation=True, seed=0, **RUN)


def test_rows_have_the_keys_in_order_and_the_saturation_row_last(rows):
    assert [list(r) for r in rows] == [list(ROW_KEYS)] * 3
    assert [r["rate"] for r in rows] == [LOW, HIGH, "saturation"]
    assert all(isinstance(r[k], float) and np.isfinite(r[k]) for r in rows for k in ROW_KEYS[1:])


def test_same_seed_same_rows_another_seed_others_and_no_retrace(rows):
    compiled = loadtest._episodes._cache_size()
    again = run_loadtest(LoadPoint(engine="fluid"), [LOW, HIGH], seed=0, **RUN)
    assert again == rows[:2]
    other = run_loadtest(LoadPoint(engine="fluid"), [7.3], seed=1, **RUN)  # another rate and seed: traced values
    assert loadtest._episodes._cache_size() == compiled
    assert other[0]["rate"] == 7.3 and run_loadtest(LoadPoint(engine="fluid"), [LOW], seed=1, **RUN)[0] != rows[0]


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


def test_the_mixed_engine_at_low_load_waits_one_iteration_then_its_own():
    """The mixed engine (`serving.mixed`): a lone 512-token prompt rides one iteration beside the
    decodes (at least a lone prefill pass of it) after the iteration in flight (at most a decode
    step of the full cap beside such a chunk), plus the measured per-request overhead; completions
    keep up with arrivals below capacity, and the tail grows with load."""
    low, high = run_loadtest(LoadPoint(engine="mixed"), [LOW, HIGH], seed=0, **RUN)
    profile = perf_model.get_profile("a100-80gb", "llama-3-8b", "fp16", "eagle")
    alone = float(perf_model.prefill_time(profile, 512)) + MEASURED_REQUEST_OVERHEAD_S
    worst = 2.0 * float(perf_model.mixed_step_time(profile, 64, 640, 0, 512))
    assert alone <= low["ttft_p50_s"] <= low["ttft_mean_s"] <= MEASURED_REQUEST_OVERHEAD_S + worst
    assert abs(high["requests_per_s"] / HIGH - 1.0) < 0.05
    assert low["ttft_p50_s"] <= low["ttft_p90_s"] <= low["ttft_p99_s"] < high["ttft_p99_s"]


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


CELL = GRID_RATIO - 1.0  # a grid cell's width relative to its lower point (0.225 %)


def random_uniforms(rng, n):
    """n uniform components like an engine's: log-normal starts around 60 ms, widths from 0 (point
    masses) to ~0.1 s, some far out (2e3 s), a fifth of weight 0."""
    low = rng.lognormal(np.log(0.06), 1.0, n)
    low[:5] = 2e3 + rng.random(5)
    high = low + rng.exponential(0.03, n) * (rng.random(n) > 0.2)
    high[5:10] = low[5:10] * (1 + 1e-9)  # narrower than a cell, some straddling a grid point
    return low, high, rng.exponential(1.0, n) * (rng.random(n) > 0.2)


def test_the_grid_cdf_matches_the_exact_quantiles_of_uniform_mixtures():
    """The grid CDF is exact at the grid points, so each quantile is within one cell (CELL of the
    quantile) of the exact one; the mean is exact. Fed in three calls, as episodes are."""
    rng = np.random.default_rng(0)
    qs = (0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0)
    for _ in range(4):
        low, high, w = random_uniforms(rng, 3000)
        acc = TtftCdf()
        for part in np.array_split(np.arange(3000), 3):
            acc.add_uniform(low[part], high[part], w[part])
        exact = mixture_quantiles(low, high, w, qs)
        assert np.all(np.abs(acc.quantiles(qs) - exact) <= CELL * exact + 1e-12), (acc.quantiles(qs), exact)
        assert acc.mean() == pytest.approx((w * (low + high)).sum() / 2 / w.sum(), rel=1e-12)
    empty = TtftCdf()
    empty.add_uniform([0.1], [0.2], [0.0])
    assert np.isnan(empty.quantiles((0.5,))).all() and np.isnan(empty.mean())
    acc = TtftCdf()
    acc.add_uniform([0.0, 0.05], [2.0, 0.05], [1.0, 0.0])
    assert np.allclose(acc.quantiles((0.25, 0.5)), [0.5, 1.0], rtol=CELL)
    with pytest.raises(ValueError, match="uniform TTFT components: .* NaN or infinite"):
        acc.add_uniform([np.nan, 0.1], [0.2, 0.2], [1.0, 1.0])
    beyond = TtftCdf()  # past the grid's top: linear from GRID_HIGH_S to the largest TTFT seen
    beyond.add_uniform([0.1, 2e4], [0.1, 3e4], [1.0, 1.0])
    assert np.allclose(beyond.quantiles((0.5, 0.75, 1.0)), [0.1, (1e4 + 3e4) / 2, 3e4], rtol=CELL)


def exact_shexp_quantile(shift, scale, weight, q):
    """The q-quantile of a mixture of shifted exponentials, by root finding on its exact CDF."""
    def cdf(x):
        return (weight * -np.expm1(-np.maximum(x - shift, 0.0) / scale)).sum() / weight.sum() - q
    return optimize.brentq(cdf, 0.0, 1e3, xtol=1e-15, rtol=1e-15)


def test_exponential_pieces_overstate_quantiles_by_at_most_the_stated_error():
    """One exponential (shift 0, mean 1 s): over 400 quantiles in (0, 0.9999) the grid's quantile
    exceeds the exact one by at most EXP_QUANTILE_ERROR x the mean (plus a grid cell), and the
    bound is reached; a random mixture of five with uniforms beside them: within the same bound
    (the largest scale), every quantile; the mean exact."""
    acc = TtftCdf()
    acc.add_shifted_exponential([0.0], [1.0], [3.0])
    acc.add_shifted_exponential([0.5], [1.0], [0.0])  # weight 0: ignored
    qs = np.linspace(0.0, 0.9999, 401)[1:]
    exact = -np.log1p(-qs)
    over = acc.quantiles(qs) - exact
    bound = request_stats.EXP_QUANTILE_ERROR
    assert np.all(over >= -CELL * exact) and np.all(over <= bound + CELL * exact), over
    assert over.max() > 0.9 * bound
    assert acc.mean() == pytest.approx(1.0, rel=1e-12)
    rng = np.random.default_rng(1)
    shift, scale, weight = rng.uniform(0.02, 0.3, 5), rng.uniform(0.005, 0.2, 5), rng.uniform(0.1, 2.0, 5)
    mixed = TtftCdf()
    with pytest.raises(ValueError, match="shifted-exponential TTFT components"):
        mixed.add_shifted_exponential([0.1], [np.inf], [1.0])
    mixed.add_shifted_exponential(shift, scale, weight)
    for q, got in zip((0.01, 0.5, 0.9, 0.99, 0.999), mixed.quantiles((0.01, 0.5, 0.9, 0.99, 0.999))):
        want = exact_shexp_quantile(shift, scale, weight, q)
        assert -CELL * want <= got - want <= bound * scale.max() + CELL * want, (q, got, want)
    assert mixed.mean() == pytest.approx((weight * (shift + scale)).sum() / weight.sum(), rel=1e-12)


def test_the_accumulator_holds_o_grid_floats_whatever_it_is_fed():
    """Three accumulators of GRID_POINTS + 2 float64 and three scalars, after 1 and after 50 folds
    of 3,000 components each."""
    rng = np.random.default_rng(2)
    acc = TtftCdf()

    def footprint():
        arrays = [v for v in vars(acc).values() if isinstance(v, np.ndarray)]
        scalars = [v for v in vars(acc).values() if not isinstance(v, np.ndarray)]
        assert all(isinstance(v, float) for v in scalars) and len(scalars) == 3
        return sum(a.size for a in arrays)

    acc.add_uniform(*random_uniforms(rng, 3000))
    once = footprint()
    for _ in range(49):
        acc.add_uniform(*random_uniforms(rng, 3000))
        acc.add_shifted_exponential(rng.uniform(0.02, 0.3, 100), rng.uniform(0.01, 0.1, 100), rng.random(100))
    assert footprint() == once == 3 * (request_stats.GRID_POINTS + 2)


def test_batches_fold_every_episode_once_in_order_whatever_the_batching(monkeypatch):
    """Every episode's key is split first, then batches are sliced: 4 episodes in one batch, 7 in
    two (the second padded with a repeated key, its episode dropped) and 8 in two fold bit for
    bit the same episodes, in order (all batches of 4: one compilation, that of `rows`)."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    add = loadtest.Pooled.add
    monkeypatch.setattr(loadtest.Pooled, "add",
                        lambda self, ep: (seen.append((ep.completed, ep.first_token.requests)), add(self, ep)))
    pooled = {n: loadtest.simulate(LoadPoint(engine="fluid"), HIGH, seed=0, batch=4, **{**RUN, "episodes": n})
              for n in (4, 7, 8)}
    assert [p.intervals for p in pooled.values()] == [n * RUN["seconds"] for n in (4, 7, 8)] and len(seen) == 19
    four, seven, eight = seen[:4], seen[4:11], seen[11:]
    same = [np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(seven, eight)]
    assert same == [True] * 7 and all(np.array_equal(a[1], b[1]) for a, b in zip(four, eight))
    assert not np.array_equal(eight[6][1], eight[7][1])  # episodes differ: the equalities above mean something


@pytest.mark.slow
def test_rows_do_not_depend_on_the_batch_size(rows):
    """4 episodes in two batches of 2 give rows[0] (one batch of 4) up to float32 rounding: XLA
    compiles each batch shape on its own (another key per episode would move them by percents).
    Slow tier: a second compilation (~5 s)."""
    two = run_loadtest(LoadPoint(engine="fluid"), [LOW], seed=0, batch=2, **RUN)[0]
    assert all(two[k] == pytest.approx(rows[0][k], rel=1e-6) for k in ROW_KEYS[1:]), (two, rows[0])


def test_the_gpu_and_engine_choices_are_the_libraries():
    assert GPU_CHOICES == loadtest.GPUS
    assert ENGINE_CHOICES == ENGINES
    assert STRATA_CHOICES == workload.LENGTH_STRATA_RULES


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"gpu": "h200"}, "gpu='h200': must be one of ['a100-80gb', 'h100-sxm']"),
    ({"batch_size": 0}, "batch_size=0: must be an integer in [1, 512]"),
    ({"kv_budget": 0.0}, "kv_budget=0.0: must be a number in [0.1, 1]"),
    ({"spec_length": 9}, "spec_length=9"),
    ({"quant_tier": "fp8"}, "quant_tier='fp8'"),
    ({"prefill_disagg": 2}, "prefill_disagg=2"),
    ({"engine": "exact"}, "engine='exact': must be one of ['fluid', 'mixed']"),
    ({"length_strata": "law"}, "length_strata='law': must be one of ['moments', 'clamped']"),
    ({"slo_accounting": "interval"}, "slo_accounting='interval': must be one of ['admission', 'completion', 'request"),
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
            "--engine", "mixed", "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TTFT p99 ms" in proc.stdout and f"wrote {out}" in proc.stdout
    (row,) = json.loads(out.read_text())
    assert list(row) == list(ROW_KEYS) and row["rate"] == 3.0
    assert 0.02 < row["ttft_p50_s"] < row["ttft_p99_s"] < 1.0 and 2.0 < row["requests_per_s"] < 4.0
