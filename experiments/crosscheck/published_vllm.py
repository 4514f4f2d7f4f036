"""Published vLLM measurements against the two mixed-iteration compositions (issue 41).

Question: how does a real vLLM (V1) time a mixed chunked-prefill iteration? AISimulate charges a
prefill pass plus a decode step ("additive"); AIConfigurator's analytical backend and the project's
docs/DESIGN.md one forward pass over all tokens, weights read once ("one-forward"). This script
answers with real GPU measurements (experiments/crosscheck/README.md, "Published vLLM measurements"):

1. `natural_experiment`: a real vLLM 0.11.0 (V1) server, Llama-2-7B FP16 on one 80 GB GPU (an H100 by
   its prefill speed; SOURCES), traced by OpenTelemetry, one span per request (the public
   inference-sim/inference-sim repository, `eval/ground_truth/jan21-llama7b-train-1/traces.json`,
   commit e7a4aa37). vLLM's own `time_in_model_prefill` = first_token_ts - scheduled_ts
   (vllm/v1/metrics/stats.py) is the duration of the iteration that ran a request's prompt. For
   prompts that ran alone it gives the prefill pass; for prompts that ran beside k running decodes
   it gives the mixed iteration. Additive predicts the mixed one one decode step (~6.6 ms) longer;
   one-forward a fraction of a millisecond.
2. `replay`: the same 282 requests (their arrival instants, prompt and output lengths) through
   iteration_sim.py's scheduler (budget 4,096, cap 256, as the server ran), with the project's
   roofline for Llama-2-7B on H100 (a) as calibrated and (b) with its FLOP rate and bandwidth scaled to
   the trace's own lone requests, each in both compositions; mean TTFT / TPOT per phase of the load.
3. `closed_loop`: john musgrave's A100-40GB sweep (vLLM 0.23.0, Llama-3.1-8B-Instruct BF16, 1,024 / 128
   tokens, `--max-concurrency C --request-rate inf`), of which two numbers could be read: ~75 tokens/s
   at C = 1 and a 6.6x throughput gain at C = 8. The project's roofline with the 40 GB card's 1.555
   TB/s (a GpuSpec built here; the package is not edited), both compositions.

The reference's kernels (`ReferenceSteps`) are AIConfigurator's Llama-3.1-8B tables on 80 GB cards:
they do not apply to Llama-2-7B (32 KV heads, no GQA) nor to the 40 GB card, so they are not run.

    .venv-test/bin/python experiments/crosscheck/published_vllm.py            # writes published_vllm.json
    .venv-test/bin/python experiments/crosscheck/published_vllm.py --trace PATH  # traces.json elsewhere
    .venv-test/bin/python experiments/crosscheck/published_vllm.py --extract     # rewrites DATA from the mirror

The rows it reads are in the repository (DATA, data/inference_sim_vllm_0_11.json: the request rows of
the trace and the client/server TTFT pairs of the overhead run, extracted from a fetched copy of the
Apache-2.0 repository by `--extract`; its provenance is in the file).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import iteration_sim as its  # noqa: E402  (the scheduler and the project's step model)

OUT = HERE / "published_vllm.json"
# The rows this script reads, extracted from the public repository below (`extract`; PROVENANCE in the file).
DATA = HERE / "data" / "inference_sim_vllm_0_11.json"
MIRROR = Path("/work/.mirror/inference-sim+inference-sim/repo")  # `fetch github:inference-sim/inference-sim`
TRACE_COMMIT = "e7a4aa3715982f089bddd0441e85e0a7d1690ec2"
TRACE_PATH = "eval/ground_truth/jan21-llama7b-train-1/traces.json"
BUDGET_TRACE = 4096  # the server's --max-num-batched-tokens (its vllm.log, exp-config.yaml)
CAP_TRACE = 256  # its --max-num-seqs
BUDGET_A100_40 = 2048  # vLLM's V1 default for `vllm serve` on GPUs under 70 GiB (not stated in the post)
A100_40GB_BW = 1.555e12  # B/s, NVIDIA A100 40GB SXM datasheet
A100_40GB_HBM = 40e9  # B


# --------------------------------------------------------------------------------------------------
# The real trace


def spans(text: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(span, its attributes by key) of every span of an OpenTelemetry traces.json (one JSON document
    per line)."""
    for line in text.splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    yield sp, {x["key"]: next(iter(x["value"].values())) for x in sp["attributes"]}


def trace_rows(text: str) -> list[tuple[float, float, float, float, int, int]]:
    """(start [s, Unix], TTFT, e2e, time_in_model_prefill [s], prompt, output tokens) of every span of an
    OpenTelemetry traces.json, sorted by start."""
    return sorted(
        (
            int(sp["startTimeUnixNano"]) / 1e9,
            a["gen_ai.latency.time_to_first_token"],
            a["gen_ai.latency.e2e"],
            a["gen_ai.latency.time_in_model_prefill"],
            int(a["gen_ai.usage.prompt_tokens"]),
            int(a["gen_ai.usage.completion_tokens"]),
        )
        for sp, a in spans(text)
    )


def load_trace(path: Path | None) -> dict[str, np.ndarray]:
    """One row per request, sorted by arrival: arrival [s from the first], ttft, e2e, prefill [s]
    (vLLM's time_in_model_prefill), prompt and output tokens. Reads a traces.json at `path`, else the
    rows extracted into DATA."""
    rows = trace_rows(path.read_text()) if path is not None else json.loads(DATA.read_text())["trace"]["rows"]
    r = np.array(rows, np.float64)
    names = ("arrival", "ttft", "e2e", "prefill", "prompt", "output")
    out = {k: r[:, i] for i, k in enumerate(names)}
    out["arrival"] = out["arrival"] - out["arrival"][0]
    out["prompt"] = out["prompt"].astype(np.int64)
    out["output"] = out["output"].astype(np.int64)
    return out


def phases(tr: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Boolean masks of the load phases of this guidellm sweep (by arrival pattern): `synchronous`
    (one request at a time, the first 23, the very first one a cold start left out), `burst_1`
    (25 requests within 0.12 s at t = 90 s), `burst_2` (10 within 0.14 s at t = 474 s) and
    `constant` (every other request: constant-rate stages at 0.29-0.60 req/s)."""
    t = tr["arrival"]
    n = len(t)
    idx = np.arange(n)
    close = np.diff(t) < 0.1  # a burst: at least 5 arrivals in a row less than 0.1 s apart
    burst = np.zeros(n, bool)
    i = 0
    while i < n - 1:
        j = i
        while j < n - 1 and close[j]:
            j += 1
        if j - i >= 4:
            burst[i : j + 1] = True
        i = j + 1
    first_burst = int(np.argmax(burst))
    burst_1 = burst & (t < t[first_burst] + 5.0)
    burst_2 = burst & ~burst_1
    sync = (idx < first_burst) & (idx > 0)
    return {
        "synchronous": sync,
        "burst_1": burst_1,
        "burst_2": burst_2,
        "constant": ~(sync | burst_1 | burst_2) & (idx > 0),
    }


# --------------------------------------------------------------------------------------------------
# 1. The natural experiment: prefill iterations alone and beside running decodes


def concurrency(tr: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per request: its scheduling instant [s], how many other requests were decoding then (n_dec) and
    their summed context [tokens, estimated], and whether another prompt shared its prefill window."""
    t, ttft, pre, e2e, p = tr["arrival"], tr["ttft"], tr["prefill"], tr["e2e"], tr["prompt"]
    sched, first, end = t + ttft - pre, t + ttft, t + e2e
    n = len(t)
    n_dec, ctx, shared = np.zeros(n, np.int64), np.zeros(n), np.zeros(n, bool)
    for i in range(n):
        dec = (first < sched[i] - 1e-4) & (end > sched[i] + 0.5 * pre[i])
        dec[i] = False
        n_dec[i] = int(dec.sum())
        step = np.maximum((end[dec] - first[dec]) / np.maximum(tr["output"][dec] - 1, 1), 1e-3)
        ctx[i] = float(np.sum(p[dec] + (sched[i] - first[dec]) / step))
        other = (sched < sched[i] + pre[i]) & (first > sched[i])
        other[i] = False
        shared[i] = bool(other.any())
    return {"sched": sched, "n_dec": n_dec, "ctx": ctx, "shared_prefill": shared}


def natural_experiment(tr: dict[str, np.ndarray], steps: its.StepModel) -> dict[str, Any]:
    """Fit the lone prefill iterations, t = a + b p + c p^2 / 2, then the excess of the iterations that
    also ran k decodes; against the two compositions' predictions (measured and project kernels)."""
    c = concurrency(tr)
    p, pre = tr["prompt"].astype(np.float64), tr["prefill"]
    ok = ~c["shared_prefill"] & (np.arange(len(p)) > 0)  # the first request is a cold start (272 ms)
    solo = ok & (c["n_dec"] == 0)
    x = np.c_[np.ones_like(p), p, p * p / 2.0]
    coef, *_ = np.linalg.lstsq(x[solo], pre[solo], rcond=None)
    resid = pre - x @ coef
    tpot = (tr["e2e"] - tr["ttft"]) / np.maximum(tr["output"] - 1, 1)
    sync = phases(tr)["synchronous"] & (tr["output"] > 100)
    rows = []
    for k in (1, 2):
        m = ok & (c["n_dec"] == k)
        ctx_mean = float(c["ctx"][m].mean())
        pm = float(p[m].mean())
        lone = steps.mixed([int(pm)], [0], 0, 0.0)
        one = steps.mixed([int(pm)], [0], k, ctx_mean) - lone
        dec = steps.mixed([], [], k, ctx_mean)
        rows.append(
            {
                "running_decodes": k,
                "requests": int(m.sum()),
                "mean_prompt_tokens": pm,
                "mean_running_context_tokens": ctx_mean,
                "excess_mean_s": float(resid[m].mean()),
                "excess_median_s": float(np.median(resid[m])),
                "excess_sem_s": float(resid[m].std(ddof=1) / np.sqrt(m.sum())),
                "predicted_additive_measured_decode_step_s": float(np.mean(tpot[sync])) if k == 1 else None,
                "predicted_additive_project_kernels_s": dec,
                "predicted_one_forward_project_kernels_s": one,
                "queue_wait_mean_s": float((tr["ttft"] - pre)[m].mean()),
            }
        )
    one = ok & (c["n_dec"] == 1)
    bins = []
    for lo, hi in ((0, 1000), (1000, 2000), (2000, 3000), (3000, 3601)):
        m = one & (p >= lo) & (p < hi)
        bins.append(
            {
                "prompt_tokens": [lo, hi],
                "requests": int(m.sum()),
                "excess_mean_s": float(resid[m].mean()),
                "lone_requests": int((solo & (p >= lo) & (p < hi)).sum()),
            }
        )
    return {
        "one_running_decode_by_prompt_length": bins,
        "lone_fit": {
            "a_s": float(coef[0]),
            "b_s_per_token": float(coef[1]),
            "c_s_per_pair": float(coef[2]),
            "requests": int(solo.sum()),
            "rms_s": float(np.sqrt(np.mean(resid[solo] ** 2))),
        },
        "lone_queue_wait_mean_s": float((tr["ttft"] - pre)[solo].mean()),
        "lone_queue_wait_median_s": float(np.median((tr["ttft"] - pre)[solo])),
        "synchronous_tpot_mean_s": float(np.mean(tpot[sync])),
        "by_running_decodes": rows,
    }


# --------------------------------------------------------------------------------------------------
# Step models: the project's roofline for any model / GPU constant


class ProfileSteps(its.ProjectSteps):
    """iteration_sim.ProjectSteps on `perf_model.build_profile(gpu_spec, model, "fp16", ...)` with the
    shipped calibration of `calib_gpu` (the package's get_profile serves Llama-3-8B only). `gpu_spec`
    may be a GpuSpec built here (A100-40GB); the package is not edited."""

    def __init__(
        self,
        gpu: str,
        model: str,
        additive: bool,
        flops_scale: float = 1.0,
        bw_scale: float = 1.0,
        gpu_spec: Any = None,
        calib_gpu: str | None = None,
    ) -> None:
        from inferencegym_jax import perf_model, profiles

        cal = perf_model.load_calibration()
        if gpu_spec is not None:  # a GPU the package does not list: its constants, a shipped calibration
            profiles.GPUS[gpu] = gpu_spec
            cal = {**cal, "gpus": {**cal["gpus"], gpu: cal["gpus"][calib_gpu or gpu]}}
        try:
            prof = perf_model.build_profile(gpu, model, "fp16", "eagle", cal)
        finally:
            if gpu_spec is not None:
                del profiles.GPUS[gpu]
        self.additive = additive
        self._use_profile(prof, flops_scale, bw_scale)
        self.parity = {}


def a100_40gb_spec() -> Any:
    """The A100-80GB GpuSpec with the 40 GB card's HBM size and bandwidth (NVIDIA datasheet)."""
    from inferencegym_jax import profiles

    return dataclasses.replace(
        profiles.GPUS["a100-80gb"], name="a100-40gb", hbm_bytes=A100_40GB_HBM, peak_hbm_bw=A100_40GB_BW
    )


def refit_to_trace(tr: dict[str, np.ndarray], lone: dict[str, Any], target_dec: float) -> tuple[float, float]:
    """FLOP scale so the project's lone 2,000-token prefill matches the trace's lone-prefill fit there,
    then bandwidth scale so its batch-1 decode at the synchronous requests' mean context matches their
    mean TPOT (twice round). Returns (flops_scale, bw_scale)."""
    target_pre = lone["a_s"] + lone["b_s_per_token"] * 2000 + lone["c_s_per_pair"] * 2000**2 / 2
    sync = phases(tr)["synchronous"] & (tr["output"] > 100)
    ctx = float(np.mean(tr["prompt"][sync] + tr["output"][sync] / 2))
    scales = [1.0, 1.0]

    def pre_gap(x: float) -> float:
        return ProfileSteps("h100-sxm", "llama-2-7b", False, x, scales[1]).mixed([2000], [0], 0, 0.0) - target_pre

    def dec_gap(x: float) -> float:
        return ProfileSteps("h100-sxm", "llama-2-7b", False, scales[0], x).mixed([], [], 1, ctx) - target_dec

    for _ in range(2):
        scales[0] = its._bisect(pre_gap)
        scales[1] = its._bisect(dec_gap)
    return scales[0], scales[1]


# --------------------------------------------------------------------------------------------------
# 2. Replaying the trace


def replay(tr: dict[str, np.ndarray], steps: ProfileSteps, queue_wait_s: float) -> dict[str, Any]:
    """All requests at their real arrival instants and lengths through iteration_sim.simulate; per phase
    the mean TTFT (plus the measured lone arrival-to-schedule wait, which the simulator does not model)
    and mean TPOT, measured and simulated."""
    r = its.simulate(
        tr["arrival"],
        tr["prompt"],
        np.maximum(tr["output"], 1),
        CAP_TRACE,
        steps,
        steps.kv_capacity,
        budget_tokens=BUDGET_TRACE,
    )
    ttft_sim = r.first_token - r.arrival + queue_wait_s
    e2e_sim = r.finish - r.arrival + queue_wait_s
    out = {}
    for name, m in phases(tr).items():
        md = m & (tr["output"] > 1)
        tpot_meas = (tr["e2e"] - tr["ttft"])[md] / (tr["output"][md] - 1)
        tpot_sim = (e2e_sim - ttft_sim)[md] / (tr["output"][md] - 1)
        out[name] = {
            "requests": int(m.sum()),
            "ttft_mean_s": {"measured": float(tr["ttft"][m].mean()), "simulated": float(ttft_sim[m].mean())},
            "ttft_max_s": {"measured": float(tr["ttft"][m].max()), "simulated": float(ttft_sim[m].max())},
            "tpot_mean_s": {"measured": float(tpot_meas.mean()), "simulated": float(tpot_sim.mean())},
        }
    return out


# --------------------------------------------------------------------------------------------------
# The per-request overhead: client-side against server-side TTFT of the same requests

OVERHEAD_RUN = "eval/ground_truth/jan20-prefill-llama7b-tp1-1"  # despite its name: CodeLlama-34B (its vllm.log)


def _git_text(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(MIRROR), "show", f"{TRACE_COMMIT}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def overhead_pairs() -> dict[str, Any]:
    """From the fetched mirror: per guidellm stage, each request's client-side TTFT (request sent -> first
    streamed token), vLLM's server-side TTFT (arrival -> first token) and time_in_model_prefill [s], joined
    on the completion id. Same vLLM 0.11.0 deployment family as the trace, CodeLlama-34B-Instruct BF16,
    one GPU, prompts ~2,000-3,000 tokens, streaming."""
    srv = {
        a["gen_ai.request.id"]: (a["gen_ai.latency.time_to_first_token"], a["gen_ai.latency.time_in_model_prefill"])
        for _, a in spans(_git_text(f"{OVERHEAD_RUN}/traces.json"))
    }
    doc = json.loads(_git_text(f"{OVERHEAD_RUN}/guidellm-results.json"))
    stages = []
    for b in doc["benchmarks"]:
        pairs = [[r["time_to_first_token_ms"] / 1e3, *srv[r["response_id"] + "-0"]]
                 for r in b["requests"]["successful"] if r["response_id"] + "-0" in srv]
        stages.append({"strategy": b["config"]["strategy"]["type_"], "client_ttft_server_ttft_prefill_s": pairs})
    return {"client": f"guidellm {doc['metadata']['guidellm_version']}, openai_http text completions, streaming",
            "stages": stages}


def request_overhead() -> dict[str, Any]:
    """Client-side minus server-side TTFT of the same requests, per guidellm stage, and vLLM's own
    arrival -> scheduled wait (TTFT - time_in_model_prefill), from the pairs extracted into DATA."""
    data = json.loads(DATA.read_text())["overhead"]
    stages = []
    for stage in data["stages"]:
        pairs = np.array(stage["client_ttft_server_ttft_prefill_s"], np.float64)
        d, w = pairs[:, 0] - pairs[:, 1], pairs[:, 1] - pairs[:, 2]
        stages.append(
            {
                "strategy": stage["strategy"],
                "requests": len(d),
                "client_minus_server_ttft_mean_s": float(d.mean()),
                "client_minus_server_ttft_median_s": float(np.median(d)),
                "client_minus_server_ttft_p10_p90_s": [float(np.percentile(d, 10)), float(np.percentile(d, 90))],
                "server_arrival_to_scheduled_mean_s": float(w.mean()),
            }
        )
    return {
        "source": f"https://github.com/inference-sim/inference-sim/tree/{TRACE_COMMIT}/{OVERHEAD_RUN}",
        "client": data["client"],
        "stages": stages,
    }


def extract() -> None:
    """Write DATA from the fetched mirror of inference-sim/inference-sim (`fetch github:inference-sim/
    inference-sim`): the trace's request rows and the overhead run's TTFT pairs, with their provenance."""
    doc = {
        "provenance": {
            "repository": "https://github.com/inference-sim/inference-sim",
            "commit": TRACE_COMMIT,
            "licence": "Apache-2.0 (the repository's LICENSE at that commit)",
            "files": [TRACE_PATH, f"{OVERHEAD_RUN}/traces.json", f"{OVERHEAD_RUN}/guidellm-results.json"],
            "server": "vLLM API server version 0.11.0 (V1), one GPU; trace run: meta-llama/Llama-2-7b-hf, "
                      "non-default args {'max_model_len': 8192, 'max_num_batched_tokens': 4096, 'max_num_seqs': 256} "
                      "(its vllm.log; exp-config.yaml: max_num_batched_tokens 4096, max_num_seqs 256)",
            "extracted_by": "python experiments/crosscheck/published_vllm.py --extract",
        },
        "trace": {"fields": ["start_unix_s", "ttft_s", "e2e_s", "time_in_model_prefill_s", "prompt_tokens",
                             "output_tokens"],
                  "rows": trace_rows(_git_text(TRACE_PATH))},
        "overhead": overhead_pairs(),
    }
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(doc, indent=1) + "\n")


# --------------------------------------------------------------------------------------------------
# 3. Closed loop at fixed concurrency (`vllm bench serve --max-concurrency C --request-rate inf`)


def closed_loop(
    steps: its.StepModel, conc: int, n_req: int, prompt: int, output: int, budget: int, cap: int = 256
) -> dict[str, float]:
    """C requests in flight, a new one issued the instant one finishes, until n_req are done; the
    scheduler of iteration_sim.simulate (running first, then FCFS admission, the last chunk cut),
    iteration by iteration. Returns vllm bench serve's output throughput, mean TTFT and mean TPOT."""
    waiting = [0.0] * min(conc, n_req)
    issued = len(waiting)
    active: list[dict[str, Any]] = []
    now = 0.0
    ttft: list[float] = []
    tpot: list[float] = []
    finish: list[float] = []
    while len(finish) < n_req:
        dec = [a for a in active if a["done"] >= prompt]
        left = budget - len(dec)
        ks: list[int] = []
        ss: list[int] = []
        chunked: list[tuple[dict[str, Any], int]] = []
        for a in active:
            if a["done"] < prompt and left > 0:
                k = min(prompt - a["done"], left)
                ks, ss, left = ks + [k], ss + [a["done"]], left - k
                chunked.append((a, k))
        while waiting and waiting[0] <= now and len(active) < cap and left > 0:
            a = {"arr": waiting.pop(0), "done": 0, "gen": 0}
            active.append(a)
            k = min(prompt, left)
            ks, ss, left = ks + [k], ss + [0], left - k
            chunked.append((a, k))
        if not dec and not chunked:
            now = waiting[0]
            continue
        now += steps.mixed(ks, ss, len(dec), float(sum(prompt + a["gen"] for a in dec)))
        for a in dec:
            a["gen"] += 1
        for a, k in chunked:
            a["done"] += k
            if a["done"] >= prompt:
                a["gen"], a["first"] = 1, now
        for a in [a for a in active if a["gen"] >= output]:
            active.remove(a)
            ttft.append(a["first"] - a["arr"])
            tpot.append((now - a["first"]) / max(output - 1, 1))
            finish.append(now)
            if issued < n_req:
                waiting.append(now)
                issued += 1
    return {
        "concurrency": conc,
        "requests": n_req,
        "output_tokens_per_s": n_req * output / max(finish),
        "ttft_mean_s": float(np.mean(ttft)),
        "tpot_mean_s": float(np.mean(tpot)),
    }


def musgrave_a100_40gb() -> dict[str, Any]:
    """The A100-40GB sweep's two readable numbers against the project's roofline at 1.555 TB/s, both
    compositions, C in 1..64 with C x 20 requests of 1,024 / 128 tokens (the post's command); also with
    the FLOP rate scaled to AIConfigurator's measured A100 2,048-token prefill (iteration_sim.json
    static_comparison refit; same SMs and clocks on the 40 GB card), since the shipped A100 prefill is
    slow against the measured GEMMs (README, "Kernel refit study")."""
    refit = json.loads((HERE / "iteration_sim.json").read_text())["static_comparison"]["a100-sxm-80gb/fp16"]["refit"]
    fs = float(refit["flops_scale"])
    out: dict[str, Any] = {
        "budget_tokens_assumed": BUDGET_A100_40,
        "prefill_flops_scale": fs,
        "variants": {},
        "measured": {"c1_tokens_per_s_about": 75.0, "c8_gain_over_c1": 6.6},
    }
    for name, additive, scale in (
        ("project-one-forward", False, 1.0),
        ("project-additive", True, 1.0),
        ("project-prefill-refit-one-forward", False, fs),
        ("project-prefill-refit-additive", True, fs),
    ):
        steps = ProfileSteps(
            "a100-40gb", "llama-3-8b", additive, flops_scale=scale, gpu_spec=a100_40gb_spec(), calib_gpu="a100-80gb"
        )
        rows = [closed_loop(steps, c, c * 20, 1024, 128, BUDGET_A100_40) for c in (1, 2, 4, 8, 16, 32, 64)]
        base = rows[0]["output_tokens_per_s"]
        for r in rows:
            r["gain_over_c1"] = r["output_tokens_per_s"] / base
        out["variants"][name] = rows
    return out


# --------------------------------------------------------------------------------------------------
# Sources (what could be read, quoted exactly) and the driver

SOURCES: list[dict[str, Any]] = [
    {
        "id": "inference-sim-jan21-llama7b",
        "url": "https://github.com/inference-sim/inference-sim/blob/e7a4aa3715982f089bddd0441e85e0a7d1690ec2/"
        "eval/ground_truth/jan21-llama7b-train-1/traces.json",
        "licence": "Apache-2.0 (the repository's LICENSE at that commit)",
        "date": "run 2026-01-21 (vllm.log timestamps); committed 2026-01-29",
        "used": True,
        "settings": {
            "vllm": "0.11.0, V1 engine ('Initializing a V1 LLM engine (v0.11.0)'), CUDA graphs and torch.compile on",
            "model": "meta-llama/Llama-2-7b-hf",
            "dtype": "torch.float16",
            "tensor_parallel_size": 1,
            "max_num_batched_tokens": 4096,
            "max_num_seqs": 256,
            "max_model_len": 4096,
            "chunked_prefill": "enabled ('Chunked prefill is enabled with max_num_batched_tokens=4096')",
            "prefix_caching": "enabled (vLLM default; random prompts, prefix_tokens 0)",
            "sampling": "temperature 0.6, top_p 0.9 (the model's generation config), FlashInfer top-p/top-k sampler",
            "gpu": "not named in the log: an 80 GB card ('Model loading took 12.5524 GiB', 'Available KV cache "
            "memory: 58.12 GiB', 'GPU KV cache size: 119,008 tokens'); an H100 by its speed: a lone 3,500-token "
            "prefill takes ~78 ms, 2 x 6.6e9 x 3500 / 0.078 s = ~590 TFLOP/s, above an A100's 312 TFLOP/s FP16 "
            "peak; SXM (not PCIe) assumed",
            "load": "guidellm sweep (profile.yaml: rate-type sweep, max-requests 25, rate 12, random-seed 42, "
            "prompt_tokens 1700 stdev 1200 in [2, 3500], output_tokens 800 stdev 500 capped at 500): a "
            "synchronous stage, a throughput stage (all at once), constant-rate stages",
        },
        "metric_definitions": {
            "time_to_first_token": "first token - arrival at the server (vllm/v1/metrics/stats.py, RequestStateStats)",
            "time_in_model_prefill": "first_token_ts - scheduled_ts ('Prefill interval is from first SCHEDULED to "
            "first NEW_TOKEN', vllm/v1/metrics/stats.py)",
            "tpot_here": "(e2e - time_to_first_token) / (completion_tokens - 1), server side",
            "sample": "282 spans (one llm_request span per request); no client-side timings for this run "
            "(its guidellm-results.json is not stored)",
        },
    },
    {
        "id": "johnmusgrave-a100-40gb",
        "url": "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on",
        "date": "not in the stored copy",
        "used": True,
        "settings": {
            "gpu": "NVIDIA A100 40GB (Lambda)",
            "model": "meta-llama/Llama-3.1-8B-Instruct, BF16",
            "vllm": "0.23.0",
            "server": "vllm serve meta-llama/Llama-3.1-8B-Instruct (defaults)",
            "command": "vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random "
            "--random-input-len 1024 --random-output-len 128 --ignore-eos --max-concurrency $C "
            "--num-prompts $((C*20)) --request-rate inf (C in 1 2 4 8 16 32 64)",
            "max_num_batched_tokens": "not stated (default)",
        },
        "quotes": [
            "decode at one request per time runs at about 75 tokens/sec, roughly 77% of the GPU's "
            "memory-bandwidth ceiling",
            "Batching buys throughput almost for free up to a concurrency of 8, a 6.6x gain with almost "
            "no latency cost",
            "The knee sits at C=8",
        ],
        "not_verified": "the per-concurrency table (throughput, TTFT, TPOT): the stored copy of the page holds only "
        "its opening; whether '75 tokens/sec' is output throughput or 1/TPOT is not said there",
    },
    {
        "id": "sarathi-2308.16369",
        "url": "https://arxiv.org/abs/2308.16369 (ar5iv.labs.arxiv.org/html/2308.16369)",
        "date": "2023-08-31 (arXiv v1)",
        "used": True,
        "settings": {"engine": "the authors' own (not vLLM)", "gpus": "LLaMA-13B on A6000, LLaMa-33B on A100"},
        "quotes": [
            "the prefill chunk saturates GPU compute, while the decode requests 'piggyback' and cost up to "
            "an order of magnitude less compared to a decode-only batch"
        ],
        "not_verified": "the paper's per-batch timing tables (the stored copy holds the abstract and introduction)",
    },
    {
        "id": "not-used",
        "used": False,
        "entries": [
            "LambdaLabsML/vllm-benchmark results/prompt_10/1xA100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json "
            "(2024-09-08): vLLM V0 era, 10 ShareGPT prompts at rate inf, mean_ttft_ms 126.87, mean_itl_ms 114.99 "
            "(multi-step scheduling): variable lengths, one point, not comparable",
            "yobitelcomm/bench docs/recipes/concurrency-sweep.md: H100-80GB-HBM3, vLLM 0.21.0, Llama-3.1-8B-Instruct, "
            "conc 1/4/16/64 (ttft_p50 13.98 / 22.75 / 41.69 / 86.92 ms, tpot_p50 6.48 / 6.59 / 10.94 / 46.91 ms): "
            "the workload's lengths are not published where they could be read",
            "Microsoft ND-H100-v5 Llama 3.1 8B posts (techcommunity.microsoft.com, 2025-08-26), Ori blog, vLLM "
            "PR #4600 (v0.4.2, ShareGPT): only the opening of each page is stored, or V0 with ShareGPT lengths",
        ],
    },
]


def run(trace: Path | None) -> dict[str, Any]:
    """Every analysis; returns the JSON document."""
    t0 = time.process_time()
    tr = load_trace(trace)
    h100 = ProfileSteps("h100-sxm", "llama-2-7b", False)
    nat = natural_experiment(tr, h100)
    fs, bs = refit_to_trace(tr, nat["lone_fit"], nat["synchronous_tpot_mean_s"])
    variants = {
        "project-one-forward": ProfileSteps("h100-sxm", "llama-2-7b", False),
        "project-additive": ProfileSteps("h100-sxm", "llama-2-7b", True),
        "project-refit-one-forward": ProfileSteps("h100-sxm", "llama-2-7b", False, fs, bs),
        "project-refit-additive": ProfileSteps("h100-sxm", "llama-2-7b", True, fs, bs),
    }
    wait = nat["lone_queue_wait_mean_s"]
    rep = {name: replay(tr, steps, wait) for name, steps in variants.items()}
    return {
        "generated_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": "python experiments/crosscheck/published_vllm.py",
        "sources": SOURCES,
        "trace_phases": {k: int(v.sum()) for k, v in phases(tr).items()},
        "natural_experiment": nat,
        "refit_to_trace": {
            "flops_scale": fs,
            "bw_scale": bs,
            "note": "FLOP rate to the lone 2,000-token prefill fit, bandwidth to the synchronous TPOT",
        },
        "replay": rep,
        "musgrave_a100_40gb": musgrave_a100_40gb(),
        "request_overhead": request_overhead(),
        "reference_kernels": "not run: AIConfigurator's tables are Llama-3.1-8B on 80 GB cards; the trace is "
        "Llama-2-7B and the sweep a 40 GB card",
        "cpu_s": time.process_time() - t0,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None, help="a traces.json (default: the rows in DATA)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--extract", action="store_true", help="rewrite DATA from the fetched mirror and stop")
    args = ap.parse_args(argv)
    if args.extract:
        extract()
        print(f"wrote {DATA}")
        return
    doc = run(args.trace)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("natural_experiment", "refit_to_trace", "replay")}, indent=1))
    for name, rows in doc["musgrave_a100_40gb"]["variants"].items():
        print(
            name,
            [
                (
                    r["concurrency"],
                    round(r["output_tokens_per_s"], 1),
                    round(r["gain_over_c1"], 2),
                    round(r["ttft_mean_s"] * 1e3, 1),
                    round(r["tpot_mean_s"] * 1e3, 2),
                )
                for r in rows
            ],
        )


if __name__ == "__main__":
    main()
