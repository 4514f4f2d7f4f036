"""Trace replay: shipped data match their provenance, replay is exact and jittable, and task 4's
documented numbers hold."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import rollout

import inferencegym_jax as ig
from inferencegym_jax import perf_model
from inferencegym_jax.files import shipped
from inferencegym_jax.generate import trace_compaction
from inferencegym_jax.traffic import traces, workload

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT.parent / "shared" / "data" / "traces"
TASK4 = "InferenceGym-Task4-v0"
MIX = "azure-code-2023,azure-conv-2023,"


def _data_file(name: str) -> bytes:
    return shipped("data").joinpath("traces", name).read_bytes()


def test_shipped_files_match_their_provenance_sha256():
    text = _data_file("PROVENANCE.txt").decode()
    listed = dict(re.findall(r"^  (\S+)  ([0-9a-f]{64})  ", text, flags=re.M))
    assert set(traces.TRACE_FILES.values()) <= set(listed)
    for name, digest in listed.items():
        assert hashlib.sha256(_data_file(name)).hexdigest() == digest, name


@pytest.mark.skipif(not RAW.is_dir(), reason="raw traces (../shared/data/traces) not present")
def test_compaction_reproduces_the_shipped_files():
    files = trace_compaction.trace_folder(RAW)
    assert set(files) == {*trace_compaction.TRACES, *trace_compaction.LICENCES, "PROVENANCE.txt"}
    for name, data in files.items():
        assert _data_file(name) == data, f"data/traces/{name} is stale: rerun scripts/compact_traces.py"


def test_requests_are_the_raw_trace_statistics():
    code, conv = traces.load_requests("azure-code-2023"), traces.load_requests("azure-conv-2023")
    # docs/DESIGN.md (Data): 1 h of code (~2.6 req/s) and conversation (~5.5 req/s) traffic.
    assert abs(len(code.arrival_s) / code.duration_s - 2.6) < 0.1
    assert abs(len(conv.arrival_s) / conv.duration_s - 5.5) < 0.1
    for r in (code, conv):
        assert np.all(np.diff(r.arrival_s) >= 0) and r.arrival_s[0] == 0.0
        assert r.prompt_tokens.min() >= 1 and r.output_tokens.min() >= 1
    gaps = np.diff(code.arrival_s)
    assert gaps.std() / gaps.mean() > 10  # docs/DESIGN.md (Data): "very bursty: inter-arrival CV ~13"


def test_trace_arrays_layout():
    tr = traces.load_trace(MIX)
    code, conv = traces.load_requests("azure-code-2023"), traces.load_requests("azure-conv-2023")
    arrival = np.asarray(tr.arrival_s)
    assert arrival.shape[0] == workload.NUM_CLASSES and tr.prompt_cumsum.shape == arrival.shape
    assert np.all(arrival[:, 0] == -np.inf) and np.all(np.isinf(arrival[2, 1:]))
    n = np.isfinite(arrival[:, 1:]).sum(axis=1)
    # Aligned on the common clock: the window starts at the later origin and ends at the
    # earlier end, and both classes share its length.
    start = max(code.origin, conv.origin)
    end = min(r.origin + np.timedelta64(int(r.duration_s * 1e6), "us").item() for r in (code, conv))
    window = (end - start).total_seconds()
    np.testing.assert_allclose(np.asarray(tr.duration_s)[:2], window, rtol=1e-6)
    assert np.isinf(np.asarray(tr.duration_s)[2])
    offset = (start - code.origin).total_seconds()
    expected_code = np.flatnonzero((code.arrival_s >= offset) & (code.arrival_s <= offset + window))
    assert n[0] == len(expected_code)
    np.testing.assert_allclose(arrival[0, 1 : n[0] + 1], code.arrival_s[expected_code] - offset, atol=5e-4)
    np.testing.assert_allclose(float(tr.prompt_cumsum[0, -1]), code.prompt_tokens[expected_code].sum(), rtol=1e-6)
    for row in range(2):
        assert np.all(np.diff(arrival[row, 1 : n[row] + 1]) >= 0)
        assert np.all(np.diff(np.asarray(tr.output_cumsum[row])) >= 0)
    thinned = traces.load_trace(MIX, keep_one_in=2)
    np.testing.assert_array_equal(np.asarray(thinned.arrival_s[:2, 1:3]), arrival[:2, [1, 3]])


def test_bad_specs_raise_value_errors_naming_the_field():
    for spec, match in (("nope", "unknown trace"), ("a,b", "one trace name per class"), (",,", "names no trace")):
        with pytest.raises(ValueError, match=match):
            traces.load_trace(spec)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="trace_keep_one_in"):
            traces.load_trace(MIX, keep_one_in=bad)
    with pytest.raises(ValueError, match="trace"):
        ig.make(TASK4, workload={"trace": "azure-code-2023,nope,"})


def test_single_trace_goes_to_the_standard_class():
    tr = traces.load_trace("mooncake-conversation")
    n = np.isfinite(np.asarray(tr.arrival_s)[:, 1:]).sum(axis=1)
    assert n.tolist() == [0, len(traces.load_requests("mooncake-conversation").arrival_s), 0]


def test_replay_is_exact_jitted_and_keyed():
    """Arrivals per interval are exactly the trace's requests in [offset + t, offset + t + dt)."""
    env, params = ig.make(TASK4)
    wl, steps = params.workload, 200
    horizon = jnp.float32(steps)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def episode(key):
        state = workload.init(key, wl, horizon)

        def body(state, t):
            state, arrivals = workload.step(jax.random.key(0), state, t.astype(jnp.float32), jnp.float32(1.0), wl)
            return state, arrivals

        return state.phase_s, jax.lax.scan(body, state, jnp.arange(steps))[1]

    arrival = np.asarray(wl.trace.arrival_s)
    prompt_cs = np.asarray(wl.trace.prompt_cumsum, np.float64)
    output_cs = np.asarray(wl.trace.output_cumsum, np.float64)
    phases = []
    for seed in range(3):
        phase, arrivals = episode(jax.random.key(seed))
        phase = np.float32(phase)
        phases.append(float(phase))
        assert 0.0 <= phase <= float(jnp.min(wl.trace.duration_s)) - steps
        bounds = phase + np.arange(steps + 1, dtype=np.float32)  # float32, as the replay computes them
        for c in range(2):
            idx = np.searchsorted(arrival[c], bounds, side="left") - 1
            np.testing.assert_array_equal(np.asarray(arrivals.count[:, c]), np.diff(idx))
            tol = 4.0 * np.spacing(np.float32(prompt_cs[c, -1]))
            np.testing.assert_allclose(np.asarray(arrivals.prompt_tokens[:, c]), np.diff(prompt_cs[c, idx]), atol=tol)
            np.testing.assert_allclose(np.asarray(arrivals.output_tokens[:, c]), np.diff(output_cs[c, idx]), atol=tol)
        assert float(arrivals.count[:, 2].sum()) == 0.0
    assert len(set(phases)) == 3  # each key its own offset
    again = (np.asarray(episode(jax.random.key(1))[1].count) for _ in range(2))
    np.testing.assert_array_equal(*again)


def _config() -> dict:
    return tomllib.loads(shipped("configs").joinpath("tasks", "task4.toml").read_text())


def test_task4_documented_numbers():
    """Each number task4.toml derives from the trace and the roofline (see its comments)."""
    config = _config()
    env, params = ig.make(TASK4)
    tr = params.workload.trace
    n = np.isfinite(np.asarray(tr.arrival_s)[:, 1:]).sum(axis=1)
    np.testing.assert_allclose(np.asarray(params.workload.class_mix), n / n.sum(), atol=1e-3)
    profile = perf_model.get_profile("a100-80gb")
    # An idle server meets each tenant's TTFT SLO at its 99th-percentile prompt.
    for c, name in enumerate(("azure-code-2023", "azure-conv-2023")):
        p99 = np.percentile(traces.load_requests(name).prompt_tokens, 99)
        ttft = float(perf_model.prefill_time(profile, p99) + profile.request_overhead_s)
        assert ttft < config["server"]["ttft_slo_s"][c]
    # Load: the full trace's prompt tokens nearly fill an A100's prefill rate, half of it does not.
    full = traces.load_trace(MIX)
    num_requests = np.isfinite(np.asarray(full.arrival_s)[:, 1:]).sum()
    mean_prompt = float(np.sum(np.asarray(full.prompt_cumsum)[:, -1]) / num_requests)
    prefill_rate = mean_prompt / float(perf_model.prefill_time(profile, mean_prompt))
    full_rate = float(np.sum(np.asarray(full.prompt_cumsum)[:, -1] / np.asarray(full.duration_s)))
    assert config["workload"]["trace_keep_one_in"] == 2
    assert 0.8 < full_rate / prefill_rate < 1.0
    assert 0.35 < (full_rate / 2) / prefill_rate < 0.5
    # Cost budget: above one A100 at the offered output rate, below two.
    per_1k_one_gpu = profile.price_per_hour / 3600.0 / float(params.reward.throughput_ref) * 1000.0
    assert per_1k_one_gpu < config["reward"]["cost_budget_per_1k"] < 2 * per_1k_one_gpu


def test_task4_default_is_beatable_and_h100_serves_more():
    """One compiled program: (A100, default), (A100, disaggregated), (H100, default)."""
    env, a100 = ig.make(TASK4)
    _, h100 = ig.make(TASK4, gpu="h100-sxm")
    params = jax.tree_util.tree_map(lambda *x: jnp.stack(x), a100, a100, h100)
    default = jnp.asarray([9, 0, 5, 0, 0], jnp.int32)  # kv 1.0, spec 0, batch 32, FP16
    disagg = jnp.asarray([9, 0, 6, 1, 0], jnp.int32)  # batch 64, prefill on a second GPU
    actions = jnp.stack([default, disagg, default])

    def run(p, a):
        def one(key):  # one episode; the offset into the trace comes from the key
            _, (_, reward, _, _, info, _) = rollout(env, p, key, lambda t: a, 100)
            m = info["metrics"]
            return reward, m.tokens_per_s, m.slo_violation_rate, m.ttft_p50_s

        return jax.tree_util.tree_map(jnp.mean, jax.vmap(one)(jax.random.split(jax.random.key(3), 8)))

    reward, tokens, violations, ttft = (np.asarray(x) for x in jax.jit(jax.vmap(run))(params, actions))
    assert reward[1] > reward[0] + 0.03 and violations[1] < 0.5 * violations[0]
    assert tokens[2] > tokens[0] and ttft[2] < ttft[0] and violations[2] < violations[0]
