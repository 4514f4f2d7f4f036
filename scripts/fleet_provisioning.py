"""Writes data/fleet/provisioning.json: the phases of bringing up an inference replica (node
start, image pull, weight load, vLLM engine start; a new node and a warm one) and the GPUs'
prices, each value with its sources (url, title, date, quote), as issue 42's fleet tasks need
them. How each value is chosen from its sources: data/fleet/PROVENANCE.md (typical: the median
of the timed runs, else of the other candidates; low and high: their extremes).

    python scripts/fleet_provisioning.py   # rewrites the JSON; PROVENANCE.md lists its sha256
"""
# ruff: noqa: E501 (each source's quote is kept verbatim on one line)
import json
import statistics
from pathlib import Path

S = {
 "ms_coldstart": dict(url="https://techcommunity.microsoft.com/blog/linuxandopensourceblog/dissecting-llm-container-cold-start-where-the-time-actually-goes/4508831",
   title="Dissecting LLM Container Cold-Start: Where the Time Actually Goes (robcronin, Microsoft Linux and Open Source Blog)", date="2026-04-15",
   quote="Dropping gzip from an LLM container image gives a 1.35x cold-start speedup for llama.cpp (pull-bound) but only 1.02x for vLLM (startup-bound) - same GPU, same image, same registry."),
 "bentoml": dict(url="https://bentoml.com/blog/cold-starting-llms-on-kubernetes-in-under-30-seconds",
   title="Cold-Starting LLMs on Kubernetes in Under 30 Seconds (Fog Dong, Sherlock Xu, BentoML)", date="2025-04-11",
   quote="For Llama 3.1 8B, the cold start timeline may look like this: Deployment Timeline: Image Pull: 5-6 min, Layer Extract: 3-4 min, Config & Start: ~2 min (container of 20.2 GB including 15 GB of model weights)"),
 "tensorfuse_cold": dict(url="https://tensorfuse.io/docs/blogs/reducing_gpu_cold_start",
   title="Reducing GPU Cold Start Time when using vLLM (Samarth Rawat, Tensorfuse)", date="2025-09-01",
   quote="meta-llama/Llama-3.1-8B-Instruct on L40S, no cache: Model download | 61 seconds; Weight loading | 33 seconds; Dynamo bytecode transformation | 10 seconds; Graph compilation | 42 seconds; Graph capture | 54 seconds; Init engine and imports | 94 seconds"),
 "tensorfuse_warm": dict(url="https://tensorfuse.io/docs/blogs/reducing_gpu_cold_start",
   title="Reducing GPU Cold Start Time when using vLLM (Samarth Rawat, Tensorfuse)", date="2025-09-01",
   quote="with /root/.cache persisted: Model download | 0 seconds; Weight loading | 18 seconds; Dynamo bytecode transformation | 10 seconds; Graph compilation | 13 seconds; Graph capture | 7 seconds; Init engine and imports | 34 seconds"),
 "tensorfuse_snap": dict(url="https://tensorfuse.io/docs/blogs/snapshotter_graphs",
   title="Tensorfuse blog: snapshotter (The Cold Start Problem)", date="undated (page stored in the search corpus)",
   quote="With traditional Docker using overlayfs, pulling a 10 GB image from a registry to an instance takes 7-10 minutes."),
 "wmx_node": dict(url="https://ai.wmx.dev/architecture/lessons/cold-start",
   title="Cold start (ai.wmx.dev architecture lessons)", date="undated (page stored in the search corpus)",
   quote="a warm buffer of low-priority pause pods holds a node warm so a real pod preempts instead of waiting on provisioning"),
 "ai_on_gke": dict(url="https://github.com/GoogleCloudPlatform/ai-on-gke/blob/2b1e1a9b529f2908ba02d10e147c10a9e8058028/best-practices/startup-latency.md",
   title="GoogleCloudPlatform/ai-on-gke best-practices/startup-latency.md (Best Practices for Faster Workload Cold Start), commit 2b1e1a9b529f2908ba02d10e147c10a9e8058028", date="commit date not retrievable (stored version)",
   quote="Nvidia Triton Server (5.4GB container image) end-to-end startup time (from workload creation to server up for traffic) can be reduced from 191s to 30s."),
 "wilsch": dict(url="https://github.com/MariusWilsch/public-wilsch-ai-pages/blob/adccb6ba452cb37f21b6d03a75001143f185bf82/global/serverless-llm-cold-start-research.md",
   title="Serverless LLM Cold Start Research (MariusWilsch/public-wilsch-ai-pages), commit adccb6ba452cb37f21b6d03a75001143f185bf82", date="2025-12-02",
   quote="Experienced ~3 minute cold starts on RunPod with vLLM (Qwen3-14B). ... Model load | ~7s; torch.compile | ~53s; CUDA graph capture | ~63s; Other init | ~77s; Total | ~200s"),
 "karp_3102": dict(url="https://github.com/aws/karpenter-provider-aws/issues/3102",
   title="aws/karpenter-provider-aws issue #3102: Node take 100s to start", date="about 2022-12 (from the issue number; the stored excerpt shows no date)",
   quote="Node take 100s to start"),
 "cloudpilot_148": dict(url="https://github.com/cloudpilot-ai/karpenter-provider-gcp/pull/148",
   title="cloudpilot-ai/karpenter-provider-gcp PR #148: fix: give longer time before deleting empty nodes", date="2025-11-09",
   quote="After launching a GPU node, it may show as ready but still require about a minute to allocate GPU resources."),
 "kunwar": dict(url="https://www.kunwar.page/chapter/052-the-model-cold-start-problem-and-pre-cached-weights",
   title="Chapter 52: The model cold-start problem and pre-cached weights", date="undated (page stored in the search corpus)",
   quote="Image pull. The runtime container image (vLLM, TensorRT-LLM, etc.) is pulled from a registry. The image is typically 2-5 GB. Pull time depends on the network and image cache; typically 30-60 seconds for a fresh pull, near-instant if cached."),
 "paperscode": dict(url="https://paperscode.org/articles/cut-kubernetes-cold-start-times/",
   title="Cut Kubernetes cold start times for serverless LLMs", date="2026-06-26",
   quote="Image pull from registry | 60-180 s (typical range, 70B model, fresh node)"),
 "wmx": dict(url="https://ai.wmx.dev/architecture/lessons/cold-start",
   title="Cold start (ai.wmx.dev architecture lessons)", date="undated (page stored in the search corpus)",
   quote="digest-pinning so the pull policy is IfNotPresent and a warm node never re-pulls"),
 "ca_3464": dict(url="https://github.com/kubernetes/autoscaler/issues/3464",
   title="kubernetes/autoscaler issue #3464: gpuLabel detected but not used, causing additional node scale-up (comment by ddseapy, AWS)", date="2020-08-28",
   quote="the GPU machines successfully join the cluster and pods start running within 4-6 minutes."),
 "codalab": dict(url="https://github.com/codalab/codalab-worksheets/issues/4042",
   title="codalab-worksheets issue #4042: GKE auto scale + nvidia driver installation takes some time when spinning up new VMs", date="2022-03-06",
   quote="Worker manager GPU pool (9 minutes to start a worker) ... At 45 the VM came up (4.5 minutes) At 49 the nvidia drivers are installed (4.5 minutes)"),
 "ca_gpu_code": dict(url="https://gitea.cncfstack.com/kubernetes/autoscaler/commits/branch/master/cluster-autoscaler/utils/gpu",
   title="kubernetes/autoscaler commit history of cluster-autoscaler/utils/gpu (mirror): commit message of the GPU-readiness workaround (see also https://github.com/kubernetes/autoscaler/pull/461)", date="2017-11 (PR #461, merged)",
   quote="When a machine with GPU becomes ready it can take up to 15 minutes before it reports that GPU is allocatable."),
 "blis_readme": dict(url="https://github.com/inference-sim/inference-sim/blob/f90a1e3a6787da17c2cd463dab6fb2660b1b1760/README.md",
   title="BLIS (inference-sim) README, autoscaling example config, commit f90a1e3a6787da17c2cd463dab6fb2660b1b1760", date="2026-08-22",
   quote="provisioning_delay: mean: 120.0 # 2-minute provisioning delay (seconds) stddev: 30.0"),
 "blis_phase2": dict(url="https://github.com/inference-sim/inference-sim/blob/f90a1e3a6787da17c2cd463dab6fb2660b1b1760/docs/configs/phase2-autoscaler.yaml",
   title="BLIS docs/configs/phase2-autoscaler.yaml (H100 TP=1), commit f90a1e3a6787da17c2cd463dab6fb2660b1b1760", date="2026-08-22",
   quote="loading_delay: mean=240s (4 min), stddev=30s - observed K8s node-to-serving latency"),
 "serverlessllm": dict(url="https://app.argminai.com/arxiv-dashboard/papers/2401.14351v2",
   title="Summary of ServerlessLLM: Low-Latency Serverless Inference for Large Language Models (Fu et al., OSDI 2024; arXiv 2401.14351)", date="2024-01-25",
   quote="Checkpoints are hundreds of GB, downloads can take tens of seconds (e.g., 130GB ~ 26s at 5GB/s), and loading into GPU memory can take tens of seconds (e.g., OPT-30B 34s, LLaMA-2-70B 84s)."),
 "vllm_19824": dict(url="https://github.com/vllm-project/vllm/issues/19824",
   title="vllm-project/vllm issue #19824: [Feature]: Improve startup time UX", date="2025-06-19",
   quote="Llama-70B-Fp8 on TP=8 ... ~10s to load weights --- from hot page cache; ~15s to convert dynamo bytecode; ~70s to run torch.compile; ~60s to capture the cudagraphs"),
 "piphipsi": dict(url="https://study.piphipsi.com/phases/17-infrastructure-and-production/10-cold-start-mitigation/",
   title="Cold Start Mitigation for Serverless LLMs (course lesson)", date="undated (page stored in the search corpus)",
   quote="The engine loads weights into HBM: 45-120s depending on model size and storage speed."),
 "vllm_20264": dict(url="https://github.com/vllm-project/vllm/issues/20264",
   title="vllm-project/vllm issue #20264: vllm taking high startup time even with persisting the torch compile between pod scaling", date="2025-06-30",
   quote="init engine (profile, create kv cache, warmup model) took 34.11 seconds ... even though the init engine shows 30.93s, the reponse is received after 59s in total."),
 "vllm_16716": dict(url="https://github.com/vllm-project/vllm/issues/16716",
   title="vllm-project/vllm issue #16716: vllm 0.8.3 v1 engine CUDA Graph Capturing time is too long", date="2025-04-16",
   quote="When I launch vllm 0.8.3 server, the capture time of cuda graph is always 65s"),
 "giext_550": dict(url="https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/550",
   title="kubernetes-sigs/gateway-api-inference-extension PR #550: Configure the vllm deployment with best practices for startup", date="2025-03-21",
   quote="torch.compile takes 28.77 s in total ... Memory profiling takes 34.26 seconds ... total_gpu_memory (79.19GiB)"),
 # prices
 "sky_aws": dict(url="https://github.com/skypilot-org/skypilot-catalog/blob/001367d22a0033fac286a8c71aeac7109e431bcb/catalogs/v7/aws/vms.csv",
   title="SkyPilot catalog v7 aws/vms.csv (AWS list prices scraped by SkyPilot), commit 001367d22a0033fac286a8c71aeac7109e431bcb", date="commit date not retrievable (stored version)",
   quote="p4de.24xlarge,A100-80GB,8.0,...,40.96575,...,us-east-1 ; p5.48xlarge,H100,8.0,...,98.32,...,us-east-1"),
 "sky_lambda": dict(url="https://github.com/skypilot-org/skypilot-catalog/blob/11580132cea293395776b033c8533714d42abb4e/catalogs/v7/lambda/vms.csv",
   title="SkyPilot catalog v7 lambda/vms.csv (Lambda list prices), commit 11580132cea293395776b033c8533714d42abb4e", date="commit date not retrievable (stored version)",
   quote="gpu_8x_a100_80gb_sxm4,A100-80GB,8.0,240.0,1800.0,14.32,us-east-1 ; gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,3.29,us-east-1"),
 "pricegpu": dict(url="https://pricegpu.pages.dev/blog/h100-vs-a100-cloud-price",
   title="H100 vs A100 Cloud Pricing: When the Upgrade Pays Off (pricegpu)", date="early 2026 (as stated on the page)",
   quote="A100 80GB SXM | $1.49 - $2.49 / hr | Lambda, CoreWeave, vast.ai, RunPod ; H100 SXM 80GB | $2.49 - $3.99 / hr | CoreWeave, Lambda, Crusoe, RunPod"),
 "costhawk": dict(url="https://costhawk.ai/glossary/gpu-instance",
   title="GPU Instance (CostHawk glossary)", date="undated (page stored in the search corpus)",
   quote="Instance cost: ~$2.00/hr on-demand (AWS p4d equivalent) ... a 1-year reserved A100 runs approximately $1.20/hr"),
 "digiteria": dict(url="https://digiterialabs.com/ai/insights/cloud-gpu-pricing-q1-2026",
   title="Cloud GPU Pricing Shifts in Q1 2026 (Digiteria Labs)", date="2026 Q1",
   quote="Tier-2 providers (CoreWeave, Lambda, Crusoe) are pricing H100 on-demand at $2.49-2.85/GPU/hr ... 1-year reserved (committed use) pricing has settled at 35-40% off on-demand for H100 instances"),
 "disintermediate": dict(url="https://disintermediate.global/insights/gpu-cloud-pricing-models",
   title="How GPU Cloud Pricing Works: On-Demand, Reserved, and Spot (Disintermediate)", date="2026 Q1 (as stated on the page)",
   quote="AWS charges $98.32/hour for a p5.48xlarge instance (8 H100 GPUs at 80GB each). Lambda Labs charges around $24/hour for equivalent capacity. ... A 1-year reserved p5.48xlarge with partial upfront payment runs approximately $52/hour effective rate; a 47% discount."),
 "computingpower": dict(url="https://computingpower.org/providers/pricing-models-explained",
   title="On-Demand vs Reserved vs Spot: Cloud GPU Pricing Models Compared", date="2026-04-30",
   quote="The same H100 might cost $4.99/hr on demand, around $3.20/hr on a one-year commitment, and under $1/hr on the spot market ... Reserved instance 30-55%"),
 "deploybase": dict(url="https://deploybase.ai/articles/gpu-reserved-vs-spot-vs-on-demand-complete-pricing-guide",
   title="GPU Reserved vs Spot vs On-Demand: Complete Pricing Guide (DeployBase)", date="undated (page stored in the search corpus)",
   quote="RunPod offers H100 SXM reserved at approximately $1.94/hour versus $2.69/hour on-demand, delivering 28% savings."),
}

def c(src, value, low=None, high=None, role="measurement", note=""):
    return dict(value=value, low=value if low is None else low, high=value if high is None else high,
                role=role, note=note, source=S[src])

def entry(unit, description, cands):
    meas = [x["value"] for x in cands if x["role"] == "measurement"]
    pool = meas or [x["value"] for x in cands if x["role"] in ("estimate", "derived", "list_price")]
    typical = round(statistics.median(pool), 4)
    low = round(min(x["low"] for x in cands), 4)
    high = round(max(x["high"] for x in cands), 4)
    srcs = []
    for x in cands:
        if x["source"] not in srcs:
            srcs.append(x["source"])
    return dict(unit=unit, description=description, low=low, typical=typical, high=high, candidates=cands, source=srcs)

phases = {
 "node_acquire": {
  "description": "Scale-up request to a GPU node that is Ready with its GPU allocatable (cloud VM allocation and boot, kubelet join, NVIDIA driver / device plugin). Cluster-autoscaler or Karpenter path.",
  "cold_node": entry("s", "new node", [
     c("ca_3464", 300, 240, 360, "measurement", "AWS GPU nodes, operator report: join + pods running in 4-6 min; value = midpoint; GPU type not stated; includes starting the (unnamed) pods."),
     c("codalab", 540, note="GKE GPU pool, one logged run: VM up at 4.5 min, NVIDIA driver installed 4.5 min later (daemonset install); GPU type not stated."),
     c("blis_readme", 120, 90, 150, "assumption", "BLIS example node-pool provisioning_delay (mean 120 s, stddev 30 s; low/high = mean -/+ 1 sd), H100 8-GPU nodes; a configured default, not a measurement."),
     c("karp_3102", 160, 160, 160, "derived", "EC2 node launched by Karpenter to Ready in 100 s (instance type not stated) + about 60 s until a GPU node's GPU is allocatable (cloudpilot-ai/karpenter-provider-gcp PR #148, 2025-11-09, quoted in its own source entry)."),
     c("cloudpilot_148", 0, 0, 0, "context", "GPU-specific part: a GPU node Ready but its GPU not yet allocatable for about a minute (used in the karp_3102 derived value)"),
     c("ca_gpu_code", 900, 900, 900, "bound", "upper bound: GPU allocatable can lag node Ready by up to 15 min (cluster-autoscaler's GPU node readiness workaround)."),
  ]),
  "warm_node": entry("s", "node already running", [
     c("wmx_node", 0, role="estimate", note="by definition of the warm case: the node is up (warm buffer / pre-provisioned pool), nothing to acquire."),
  ]),
 },
 "image_pull": {
  "description": "Pulling and unpacking the serving container image (vLLM image, weights not baked in) onto the node, plus container creation.",
  "cold_node": entry("s", "image not on the node", [
     c("kunwar", 45, 30, 60, "estimate", "2-5 GB runtime image, fresh pull; value = midpoint."),
     c("paperscode", 120, 60, 180, "estimate", "fresh node, same-region registry; value = midpoint."),
     c("tensorfuse_snap", 510, 420, 600, "estimate", "10 GB vLLM/SGLang/TRT-LLM image with overlayfs; value = midpoint."),
     c("ai_on_gke", 191, 30, 191, "bound", "GKE, 5.4 GB Triton image: workload creation to server up 191 s without, 30 s with image streaming; includes the server's own start, so bounds the pull from above (and image streaming from below)."),
     c("bentoml", 540, 480, 600, "bound", "Llama 3.1 8B image of 20.2 GB that includes 15 GB of weights: pull 5-6 min + extract 3-4 min; counts weights too, so only bounds the high end."),
     c("ms_coldstart", 0, 0, 0, "context", "no number retrievable (excerpt only): for vLLM on A100 80GB the pull is not the dominant phase (gzip removal: 1.02x end-to-end)."),
  ]),
  "warm_node": entry("s", "image already cached on the node", [
     c("wmx", 0, role="estimate", note="IfNotPresent pull policy with a digest-pinned image: a node that already ran the image does not re-pull."),
  ]),
 },
 "weights": {
  "description": "Getting the ~16 GB BF16 Llama-3(.1)-8B safetensors onto the node (download when not cached) and loading them into HBM.",
  "cold_node": entry("s", "weights not on local disk (downloaded at start)", [
     c("tensorfuse_cold", 94, note="Llama-3.1-8B-Instruct, L40S: model download 61 s (Hugging Face) + weight loading 33 s."),
     c("serverlessllm", 12.8, 12.8, 12.8, "derived", "scaled to 16 GB from the paper's figures: download at 5 GB/s (16/5 = 3.2 s) + load at LLaMA-2-70B's 84 s per 140 GB (16/140*84 = 9.6 s)."),
     c("piphipsi", 82.5, 45, 120, "estimate", "HBM load only, 'depending on model size and storage speed'; value = midpoint."),
  ]),
  "warm_node": entry("s", "weights on local disk or page cache", [
     c("tensorfuse_warm", 18, note="Llama-3.1-8B-Instruct, L40S, weights cached on the node's volume."),
     c("wilsch", 7, note="Qwen3-14B (about 28 GB BF16) on RunPod with the model cached; GPU not stated."),
     c("vllm_19824", 10, note="Llama-70B-FP8, TP=8 (about 8.8 GB per GPU), hot page cache, H100-class node (robertgshaw2 measurement quoted in the issue)."),
     c("serverlessllm", 9.6, 9.6, 9.6, "derived", "16/140 * 84 s (LLaMA-2-70B load time scaled to 16 GB)."),
  ]),
 },
 "engine_start": {
  "description": "vLLM from process start to ready, weights excluded: imports, torch.compile (Dynamo + Inductor), KV-cache profiling, CUDA-graph capture, API server up.",
  "cold_node": entry("s", "no torch.compile / kernel cache on the node", [
     c("tensorfuse_cold", 200, note="Llama-3.1-8B-Instruct, L40S: Dynamo 10 + graph compilation 42 + graph capture 54 + init engine and imports 94 s."),
     c("wilsch", 193, note="Qwen3-14B on RunPod, vLLM, no compile cache: torch.compile 53 + CUDA graph capture 63 + other init 77 s (model load 7 s excluded); GPU not stated."),
     c("giext_550", 63.03, 63.03, 63.03, "bound", "lower bound from parts only: torch.compile 28.77 s + memory profiling 34.26 s on an 80 GB GPU (graph capture and imports not counted)."),
     c("vllm_16716", 65, 65, 65, "bound", "lower bound from one part only: CUDA-graph capture 65 s (Llama-2-7B with LoRA enabled, vLLM 0.8.3)."),
     c("ms_coldstart", 0, 0, 0, "context", "no number retrievable (excerpt only): vLLM cold start on A100 80GB is 'startup-bound' (JIT compilation dominates)."),
  ]),
  "warm_node": entry("s", "torch.compile cache persisted on the node", [
     c("tensorfuse_warm", 64, note="Llama-3.1-8B-Instruct, L40S: Dynamo 10 + compilation 13 (cache) + capture 7 + init engine and imports 34 s."),
     c("vllm_20264", 58, 34.11, 59, "measurement", "Llama-3.2 Q8 pod with the torch.compile cache reused: first response 59 s after start minus 0.9 s model loading = 58 s; logged 'init engine' alone 34.11 s (low)."),
  ]),
 },
}

# context entries are not candidates for low/high: drop them from ranges but keep the source.
for ph in phases.values():
    for case in ("cold_node", "warm_node"):
        e = ph[case]
        real = [x for x in e["candidates"] if x["role"] != "context"]
        ctx = [x for x in e["candidates"] if x["role"] == "context"]
        e2 = entry(e["unit"], e["description"], real)
        e2["context"] = [dict(note=x["note"], source=x["source"]) for x in ctx]
        for x in ctx:
            if x["source"] not in e2["source"]:
                e2["source"].append(x["source"])
        ph[case] = e2

def price_entry(desc, cands):
    return entry("$/GPU-hour", desc, cands)

prices = {
 "a100-80gb": {
  "on_demand": price_entry("on-demand list price per GPU-hour, one A100-SXM4-80GB", [
     c("sky_aws", round(40.96575 / 8, 4), role="list_price", note="AWS p4de.24xlarge us-east-1 $40.96575/h / 8 GPUs (pre-June-2025 list; AWS announced GPU price cuts in June 2025, post-cut p4de price not retrieved)."),
     c("sky_lambda", round(14.32 / 8, 4), role="list_price", note="Lambda gpu_8x_a100_80gb_sxm4 $14.32/h / 8 GPUs."),
     c("pricegpu", 1.99, 1.49, 2.49, "estimate", "neocloud range early 2026; value = midpoint."),
     c("costhawk", 2.00, role="estimate", note="'~$2.00/hr on-demand (AWS p4d equivalent)' for one A100 80GB."),
  ]),
 },
 "h100-sxm": {
  "on_demand": price_entry("on-demand list price per GPU-hour, one H100-SXM5-80GB", [
     c("sky_aws", round(98.32 / 8, 4), role="list_price", note="AWS p5.48xlarge us-east-1 $98.32/h / 8 GPUs (pre-June-2025 list; 'up to 45%' cut announced June 2025, post-cut price not retrieved)."),
     c("sky_lambda", 3.29, role="list_price", note="Lambda gpu_1x_h100_sxm5 $3.29/h."),
     c("pricegpu", 3.24, 2.49, 3.99, "estimate", "neocloud range early 2026; value = midpoint."),
     c("digiteria", 2.67, 2.49, 2.85, "estimate", "tier-2 providers Q1 2026; value = midpoint."),
     c("disintermediate", 3.00, role="estimate", note="Lambda ~$24/h for 8 H100 = $3.00 per GPU-hour, Q1 2026."),
  ]),
 },
}
disc = entry("fraction of on-demand", "1-year reserved / committed-use discount (1 - reserved/on-demand)", [
     c("disintermediate", 0.47, role="estimate", note="AWS p5.48xlarge 1-yr RI partial upfront ~$52/h vs $98.32/h."),
     c("computingpower", round(1 - 3.20 / 4.99, 4), 0.30, 0.55, "estimate", "H100 $4.99 -> ~$3.20 one-year; generic reserved range 30-55%."),
     c("digiteria", 0.375, 0.35, 0.40, "estimate", "H100 1-yr reserved 35-40% off; value = midpoint."),
     c("deploybase", round(1 - 1.94 / 2.69, 4), role="estimate", note="RunPod H100 SXM $1.94 reserved vs $2.69 on-demand."),
     c("costhawk", round(1 - 1.20 / 2.00, 4), role="estimate", note="A100 $1.20 1-yr reserved vs $2.00 on-demand."),
])
for gpu in prices.values():
    od = gpu["on_demand"]
    gpu["reserved_1y"] = dict(
        unit="$/GPU-hour",
        description="on_demand.typical * (1 - reserved_discount_1y); low uses the largest discount, high the smallest",
        low=round(od["typical"] * (1 - disc["high"]), 4),
        typical=round(od["typical"] * (1 - disc["typical"]), 4),
        high=round(od["typical"] * (1 - disc["low"]), 4),
        source=disc["source"] + od["source"],
    )

doc = dict(
 about="Provisioning delay phases and GPU prices for one Llama-3(.1)-8B BF16 replica served by vLLM on one A100-80GB or H100-SXM (issue 42 fleet tasks). See PROVENANCE.md beside this file.",
 derivation=dict(
   typical="median of the candidate values whose role is 'measurement'; if there is none, median of those whose role is 'list_price', 'estimate' or 'derived'",
   low="minimum of the candidate lows (all roles except 'context')",
   high="maximum of the candidate highs (all roles except 'context')",
   roles=dict(measurement="a timed run reported by whoever ran it", list_price="a provider list price (scraped catalog)",
              estimate="a publisher's stated typical value or range without raw data", derived="computed here from a source's numbers (note says how)",
              assumption="a simulator's configured default", bound="a one-sided limit (a part of the phase, or a timeout/maximum)",
              context="a source that informs the phase but gives no number (kept for provenance, not used in ranges)")),
 cases=dict(cold_node="a new GPU node: node acquisition, uncached image, weights downloaded, no compile cache",
            warm_node="a running node that served this model before: image, weights and torch.compile cache on the node"),
 phases=phases,
 prices=prices,
 reserved_discount_1y=disc,
 repo_prices_checked={"a100-80gb": 2.74, "h100-sxm": 3.24, "unit": "$/GPU-hour", "where": "inferencegym_jax/profiles.py (cites /work/shared/DESIGN.md)"},
)
out = Path(__file__).resolve().parents[1] / "data" / "fleet" / "provisioning.json"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(doc, indent=1, ensure_ascii=True) + "\n")
for n, ph in phases.items():
    for case in ("cold_node", "warm_node"):
        e = ph[case]
        print(n, case, e["low"], e["typical"], e["high"])
for g, p in prices.items():
    for k, e in p.items():
        print(g, k, e["low"], e["typical"], e["high"])
print("disc", disc["low"], disc["typical"], disc["high"])
for case in ("cold_node", "warm_node"):
    print(case, [sum(ph[case][k] for ph in phases.values()) for k in ("low","typical","high")])
