"""The performance model against published measurements (docs/DESIGN.md's calibration points and
the shipped kernel profiles), the physical floors, and docs/FIDELITY.md being up to date.

The anchors are defined once, in inferencegym_jax.generate.fidelity, which also renders the
doc; these tests hold each one to its tolerance (or, for a miss explained in the doc, to its
bound) and check the most important ones again directly against perf_model.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferencegym_jax import perf_model
from inferencegym_jax.generate import fidelity
from inferencegym_jax.profiles import DRAFTS, GPUS, MODELS, PRECISIONS, SPEC_LENGTHS

ROOT = Path(__file__).resolve().parents[1]
A100, H100 = perf_model.get_profile("a100-80gb"), perf_model.get_profile("h100-sxm")
_decode, _prefill = jax.jit(perf_model.decode_step_time), jax.jit(perf_model.prefill_time)
_draft = jax.jit(perf_model.draft_token_time)


def test_every_anchor_is_within_tolerance_or_explained():
    failures = []
    for a in fidelity.all_anchors():
        if a.status == "MISS":
            failures.append(f"{a.name}: error {a.error:+.1%} > tolerance {a.tolerance:.0%}")
        if a.status == "explained":
            assert a.note and a.bound is not None and abs(a.error) <= a.bound
        if a.kind in ("input", "fit"):
            assert abs(a.error) <= a.tolerance, a.name  # inputs and fits are met exactly
    assert not failures, "\n".join(failures)


def test_every_design_calibration_point_has_an_anchor():
    names = " / ".join(a.name for a in fidelity.all_anchors())
    for needle in ("A100 single-sequence decode", "A100 1,024-token prefill", "H100 1,024-token prefill",
                   "H100 TPOT", "kv_budget 0.1", "kv_budget 1.0", "EAGLE-style draft, chat data, k = 8",
                   "n-gram draft, k = 8", "H100 FP8", "INT4 (W4A16)", "INT4 decode-step", "KV transfer",
                   "A100 price", "H100 price", "eta_bw", "eta_f", "knee", "per-step serving overhead",
                   "per-request overhead", "LLMServingSim", "Vidur Llama-2-7B"):
        assert needle in names, needle
    kinds = {a.kind for a in fidelity.all_anchors()}
    assert {"kernel", "end-to-end", "fit", "input", "arithmetic"} <= kinds


def test_fidelity_doc_is_up_to_date():
    doc = ROOT / "docs" / "FIDELITY.md"
    assert doc.read_text() == fidelity.render(), "rerun scripts/fidelity_report.py"


# ----------------------------------------------------------------- direct checks of the anchors


def _kernels(profile: perf_model.Profile) -> perf_model.Profile:
    return fidelity.kernels_only(profile)


def test_design_kernel_anchors_directly():
    # docs/DESIGN.md: A100 single-sequence decode 9.7 ms and 1,024-token prefill 75 ms (linear and
    # elementwise ops of 32 layers, Vidur); H100 1,024-token prefill about 22.7 ms. 10 %.
    assert abs(float(perf_model.decode_step_time(_kernels(A100), 1, 0)) / 9.7e-3 - 1) < 0.10
    assert abs(float(perf_model.prefill_time(_kernels(A100), 1024)) / 75e-3 - 1) < 0.10
    assert abs(float(perf_model.prefill_time(_kernels(H100), 1024)) / 22.7e-3 - 1) < 0.10
    # The H100 vLLM TPOT (6.48 ms at batch 1) is what the per-step overhead is fitted to.
    assert abs(float(perf_model.decode_step_time(H100, 1, 1024)) - 6.48e-3) < 2e-6


def test_kv_capacity_and_acceptance_tables_directly():
    for budget, tokens in ((0.1, 46.5e3), (1.0, 465e3)):
        assert abs(float(perf_model.kv_capacity_tokens(A100, budget)) / tokens - 1) < 0.01
    for draft in DRAFTS:
        profile = perf_model.get_profile(draft=draft)
        got = [float(perf_model.tokens_per_step(profile, k)) for k in SPEC_LENGTHS]
        np.testing.assert_allclose(got, DRAFTS[draft].tokens_per_step, rtol=1e-6)
    eagle, ngram = perf_model.get_profile(draft="eagle"), perf_model.get_profile(draft="ngram")
    for k in SPEC_LENGTHS[1:]:  # per workload: n-gram lookup accepts less than EAGLE on chat
        assert float(perf_model.tokens_per_step(ngram, k)) < float(perf_model.tokens_per_step(eagle, k))


def test_kv_transfer_of_a_1k_prompt():
    # docs/DESIGN.md: 131 MB, about 0.4 ms over NVLink (A100's 300 GB/s per direction).
    t = float(perf_model.kv_transfer_time(A100, 1000))
    assert abs(1000 * float(A100.kv_bytes_per_token) / 131e6 - 1) < 0.01
    assert abs(t / 0.4e-3 - 1) < 0.20
    assert float(perf_model.kv_transfer_time(H100, 1000)) < t


@pytest.mark.parametrize("draft", ["eagle", "ngram"])
def test_speculation_gain_falls_as_batch_grows(draft):
    """Verify is a forward over B * (k + 1) tokens: the per-token gain shrinks with the batch.

    At a 512-token context it turns into a loss by batch 512. (With long contexts the verify
    pass also amortises KV reads over k + 1 tokens, so some gain survives at large batch.)
    """
    profile = perf_model.get_profile(draft=draft)
    batches = jnp.asarray([1, 4, 16, 64, 256, 512], jnp.float32)

    def per_token(k):
        return perf_model.decode_step_time(profile, batches, 512.0, k) / perf_model.tokens_per_step(profile, k)

    for k in (2, 4, 8):
        gain = np.asarray(per_token(0) / per_token(k))
        assert np.all(np.diff(gain) < 0), (k, gain)
        assert gain[-1] < 1.0  # at batch 512 speculation costs more than it saves
    assert float(per_token(0)[0] / per_token(4)[0]) > 1.3  # and helps at batch 1


# ----------------------------------------------------------------- physical floors


@pytest.mark.parametrize("gpu", list(GPUS))
def test_never_faster_than_peak_bandwidth_or_peak_flops(gpu):
    """Every decode (any draft length), prefill (one or many prompts) and draft pass takes at
    least the time to read its bytes at peak bandwidth and to run its FLOPs at peak rate."""
    g, m = GPUS[gpu], MODELS["llama-3-8b"]
    batch = jnp.asarray([1, 3, 16, 64, 200, 512], jnp.float32)[:, None, None]
    ctx = jnp.asarray([1, 128, 1024, 8192], jnp.float32)[None, :, None]
    spec = jnp.asarray(SPEC_LENGTHS, jnp.float32)[None, None, :]
    for quant, q in PRECISIONS.items():
        peak = g.peak_flops_8bit if (q.uses_8bit_compute and g.peak_flops_8bit > 0) else g.peak_flops_bf16
        weights = q.bytes_per_weight * m.params_linear + 2.0 * m.params_lm_head
        for draft in DRAFTS:
            p = perf_model.get_profile(gpu, quant=quant, draft=draft)
            t = _decode(p, batch, ctx, spec)
            n = batch * (spec + 1.0)
            kv = batch * ctx * m.kv_bytes_per_token
            flops = 2.0 * (m.params_linear + m.params_lm_head) * n + 4.0 * m.n_layers * m.d_model * ctx * n
            floor = jnp.maximum((weights + kv) / g.peak_hbm_bw, flops / peak)
            assert bool(jnp.all(t >= floor)), (quant, draft, float(jnp.min(t / floor)))
            d = _draft(p, batch, ctx)
            assert bool(jnp.all(d >= 2.0 * DRAFTS[draft].draft_params / g.peak_hbm_bw))
        # prefill of S prompts of L tokens: linear FLOPs, causal attention FLOPs, weights read
        seqs = jnp.asarray([1, 4, 16], jnp.float32)[:, None]
        length = jnp.asarray([1, 100, 1000, 8000], jnp.float32)[None, :]
        tokens, sq = seqs * length, seqs * length * length
        t = _prefill(p, tokens, seqs, sq)
        flops = 2.0 * m.params_linear * tokens + 2.0 * m.n_layers * m.d_model * sq
        floor = jnp.maximum(flops / peak, weights / g.peak_hbm_bw)
        assert bool(jnp.all(t >= floor)), (quant, float(jnp.min(t / floor)))
        assert float(perf_model.kv_transfer_time(p, 1000)) >= 1000 * m.kv_bytes_per_token / g.kv_link_bw * (1 - 1e-6)


def test_report_floor_grid_holds():
    low, count = fidelity.floor_ratio()
    assert count > 1000 and low >= 1.0


def test_times_are_finite_and_jittable_over_the_grid():
    t = jax.jit(jax.vmap(perf_model.decode_step_time, in_axes=(None, 0, None, None)))(
        A100, jnp.arange(1, 513, dtype=jnp.float32), 4096.0, 2.0
    )
    assert t.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(t))) and bool(jnp.all(jnp.diff(t) > 0))
