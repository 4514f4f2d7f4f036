"""Compact the raw request traces of ../shared/data/traces into data/traces/*.npz.

Each output file holds one trace as plain arrays, one entry per request, in arrival order:

    arrival_s       float64 (N,)  [s] arrival time since the trace's first request
    prompt_tokens   int32   (N,)  [tokens] prompt (context) length
    output_tokens   int32   (N,)  [tokens] generated length
    origin          str     ()    wall-clock time of the first request, ISO 8601 without a time
                                  zone ("" when the trace only has relative times); traces with
                                  an origin can be aligned on a common clock
    source          str     ()    repository path of the raw file it came from

Mooncake traces also keep, from their 512-token prefix-block hashes,

    prefix_hit_tokens int32 (N,)  [tokens] leading prompt tokens whose blocks appeared in an
                                  earlier request (what an unbounded prefix cache could reuse)

The files are written byte for byte reproducibly (fixed zip timestamps, fixed member order), so
their sha256 in data/traces/PROVENANCE.txt identifies them; `--check` verifies the files on disk
against a fresh compaction.

Usage: python scripts/compact_traces.py [--raw ../shared/data/traces] [--out data/traces] [--check]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RAW = ROOT.parent / "shared" / "data" / "traces"
DEFAULT_OUT = ROOT / "data" / "traces"
MOONCAKE_BLOCK_TOKENS = 512  # block size of Mooncake's hash_ids (FAST25-release README)

# output name -> (raw file relative to the raw folder, repository path of the raw file, reader)
TRACES = {
    "azure_code_2023.npz": ("azure_llm_2023/AzureLLMInferenceTrace_code.csv",
                            "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv", "azure"),
    "azure_conv_2023.npz": ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
                            "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv", "azure"),
    "mooncake_conversation.npz": ("mooncake_fast25/conversation_trace.jsonl",
                                  "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl",
                                  "mooncake"),
    "mooncake_synthetic.npz": ("mooncake_fast25/synthetic_trace.jsonl",
                               "kvcache-ai/Mooncake FAST25-release/traces/synthetic_trace.jsonl", "mooncake"),
}
# Licence and card files copied verbatim beside the compacted traces.
LICENCES = {
    "LICENSE-CC-BY-4.0.txt": "azure_llm_2023/LICENSE-CC-BY-4.0.txt",
    "AzureLLMInferenceDataset2023.md": "azure_llm_2023/AzureLLMInferenceDataset2023.md",
    "LICENSE-APACHE.txt": "mooncake_fast25/LICENSE-APACHE.txt",
    "Mooncake-FAST25-README.md": "mooncake_fast25/FAST25-release-README.md",
}


def read_azure(path: Path) -> dict[str, np.ndarray]:
    """TIMESTAMP (wall clock, 100 ns digits), ContextTokens, GeneratedTokens."""
    lines = path.read_text().splitlines()
    if lines[0].strip() != "TIMESTAMP,ContextTokens,GeneratedTokens":
        raise ValueError(f"{path}: unexpected header {lines[0]!r}")
    stamps, prompt, output = [], [], []
    for line in lines[1:]:
        stamp, context, generated = line.split(",")
        # "2023-11-16 18:17:03.9799600": microseconds are the first six fraction digits.
        day, clock = stamp.split(" ")
        whole, frac = clock.split(".")
        stamps.append(dt.datetime.fromisoformat(f"{day}T{whole}.{frac[:6].ljust(6, '0')}"))
        prompt.append(int(context))
        output.append(int(generated))
    origin = stamps[0]
    arrival = np.array([(s - origin).total_seconds() for s in stamps], np.float64)
    return {
        "arrival_s": arrival,
        "prompt_tokens": np.array(prompt, np.int32),
        "output_tokens": np.array(output, np.int32),
        "origin": np.array(origin.isoformat()),
    }


def read_mooncake(path: Path) -> dict[str, np.ndarray]:
    """timestamp [ms, relative], input_length, output_length, hash_ids (512-token blocks)."""
    arrival, prompt, output, hits = [], [], [], []
    seen: set[int] = set()
    for line in path.read_text().splitlines():
        row = json.loads(line)
        arrival.append(row["timestamp"] / 1e3)
        prompt.append(row["input_length"])
        output.append(row["output_length"])
        leading = 0
        for block in row["hash_ids"]:
            if block not in seen:
                break
            leading += 1
        hits.append(min(leading * MOONCAKE_BLOCK_TOKENS, row["input_length"]))
        seen.update(row["hash_ids"])
    return {
        "arrival_s": np.array(arrival, np.float64) - arrival[0],
        "prompt_tokens": np.array(prompt, np.int32),
        "output_tokens": np.array(output, np.int32),
        "prefix_hit_tokens": np.array(hits, np.int32),
        "origin": np.array(""),
    }


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz (what np.load reads) with fixed member order and timestamps: reproducible bytes."""
    buffer = io.BytesIO()
    # Stored, not deflated: compressed bytes could differ between zlib versions.
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asanyarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def compact(raw: Path) -> dict[str, bytes]:
    """Output file name -> bytes, for every trace and licence file."""
    readers = {"azure": read_azure, "mooncake": read_mooncake}
    out: dict[str, bytes] = {}
    for name, (relative, source, kind) in TRACES.items():
        arrays = readers[kind](raw / relative)
        if not np.all(np.diff(arrays["arrival_s"]) >= 0):
            raise ValueError(f"{relative}: arrivals are not sorted")
        arrays["source"] = np.array(source)
        out[name] = npz_bytes(arrays)
    for name, relative in LICENCES.items():
        out[name] = (raw / relative).read_bytes()
    return out


def provenance(files: dict[str, bytes], raw: Path) -> str:
    """The PROVENANCE.txt text: sources, licences, what was kept, and each file's sha256."""
    upstream = {
        "azure": (raw / "azure_llm_2023" / "PROVENANCE.txt").read_text().strip(),
        "mooncake": (raw / "mooncake_fast25" / "PROVENANCE.txt").read_text().strip(),
    }
    lines = [
        "Request traces for trace-replay workloads (inferencegym_jax/traces.py).",
        "Generated by scripts/compact_traces.py from ../shared/data/traces; do not edit by hand.",
        "",
        "Azure LLM inference trace 2023 (code, conversation): CC-BY-4.0 (LICENSE-CC-BY-4.0.txt,",
        "dataset card AzureLLMInferenceDataset2023.md). Attribution: Patel et al., 'Splitwise:",
        "Efficient generative LLM inference using phase splitting', ISCA 2024.",
        "Mooncake FAST'25 traces (conversation, synthetic): Apache-2.0 (LICENSE-APACHE.txt, README",
        "Mooncake-FAST25-README.md). Attribution: Qin et al., 'Mooncake: Trading More Storage for Less",
        "Computation', FAST 2025.",
        "",
        "Compaction: one .npz per trace with arrival_s (float64 s since the first request),",
        "prompt_tokens and output_tokens (int32), origin (ISO wall-clock time of the first request;",
        "empty for Mooncake, whose timestamps are relative) and source. Azure timestamps keep",
        "microseconds (the raw files have 100 ns digits). Mooncake hash_ids are reduced to",
        "prefix_hit_tokens (512 x leading blocks already seen, capped at the prompt length). No",
        "request is dropped or reordered. Request counts below are the rows of the raw files (the",
        "upstream PROVENANCE counts newlines, and the Azure files end without one: one row more).",
        "",
        "Files (sha256, bytes):",
    ]
    for name in sorted(files):
        digest = hashlib.sha256(files[name]).hexdigest()
        extra = ""
        if name.endswith(".npz"):
            with np.load(io.BytesIO(files[name])) as arrays:
                extra = f", {len(arrays['arrival_s'])} requests over {arrays['arrival_s'][-1]:.1f} s"
        lines.append(f"  {name}  {digest}  {len(files[name])} bytes{extra}")
    lines += ["", "Upstream provenance of the raw files:", "", upstream["azure"], "", upstream["mooncake"], ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=DEFAULT_RAW, help="folder of the raw traces")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="fail if a file on disk differs")
    args = parser.parse_args()
    files = compact(args.raw)
    files["PROVENANCE.txt"] = provenance(files, args.raw).encode()
    if args.check:
        stale = [n for n, b in files.items() if not (args.out / n).exists() or (args.out / n).read_bytes() != b]
        if stale:
            sys.exit(f"stale or missing in {args.out}: {stale}; rerun scripts/compact_traces.py")
        print(f"{args.out}: {len(files)} files up to date")
        return
    for name, data in files.items():
        write_atomic(args.out / name, data)
        print(f"{args.out / name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
