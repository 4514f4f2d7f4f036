"""Day-scale real LLM traffic: per-minute load curves in data/traces/day/*.npz, and their statistics.

Source: the Azure LLM inference trace 2024 (one week of code and one week of conversation requests,
CC-BY-4.0, Stojkovic et al., DynamoLLM, HPCA 2025), as the per-minute totals that wattproof/wattproof
derived from the two raw one-week CSVs (data/traces/day/azure2024-llm-minutes.csv; provenance,
licences and the cross-checks of its totals in data/traces/day/PROVENANCE.txt).

Each .npz holds, per minute since 00:00 UTC of the trace's first day (10 080 minutes, 7 days):

    requests        int64 [minutes]  requests that arrived in the minute          [requests]
    prompt_tokens   int64 [minutes]  sum of their context (prompt) tokens         [tokens]
    output_tokens   int64 [minutes]  sum of their generated (output) tokens       [tokens]
    start_utc       str   []         ISO time of minute 0 (00:00 UTC of day 0)
    minute_s        int64 []         length of one bin                            [s] (= 60)
    source          str   []         where the numbers come from

The bytes are reproducible (inferencegym_jax.generate.trace_compaction.npz_bytes), so PROVENANCE.txt
lists their sha256.

Usage:
    python scripts/day_traces.py data/traces/day/azure2024-llm-minutes.csv          # write the files
    python scripts/day_traces.py --check data/traces/day/azure2024-llm-minutes.csv  # fail if stale
    python scripts/day_traces.py --summary    # the statistics tables of docs/DAY_TRACES.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import re
import sys
from pathlib import Path

import numpy as np

from inferencegym_jax.generate.trace_compaction import npz_bytes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "traces" / "day"
PROVENANCE = "PROVENANCE.txt"
MINUTE_S = 60  # one bin [s]
DAY_MIN = 1440  # minutes per day
HOUR_MIN = 60  # minutes per hour
HELD_OUT_DAYS = 2  # last calendar days of each trace kept for evaluation (chronological split)
HEADER = ("minute,code_requests,code_context_tokens,code_generated_tokens,"
          "conv_requests,conv_context_tokens,conv_generated_tokens")
# The CSV's comment line that dates minute 0 of each service (written by the upstream script).
START_LINE = re.compile(r"code (\d{4}-\d{2}-\d{2}) \((\w+)\), conversation (\d{4}-\d{2}-\d{2}) \((\w+)\)")
# Output .npz name -> (CSV column prefix, source text).
TRACES = {
    "azure_code_2024_week.npz": ("code", "Azure LLM inference trace 2024, code "
                                         "(AzureLLMInferenceTrace_code_1week.csv)"),
    "azure_conv_2024_week.npz": ("conv", "Azure LLM inference trace 2024, conversation "
                                         "(AzureLLMInferenceTrace_conv_1week.csv)"),
}
# Files copied beside the data (not generated): licences and the upstream dataset card.
COPIED = ("AzureLLMInferenceDataset2024.md", "LICENSE-APACHE.txt", "LICENSE-CC-BY-4.0.txt")
SUMMARY_START = "<!-- day-traces-summary:start -->"
SUMMARY_END = "<!-- day-traces-summary:end -->"


def read_minutes_csv(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """Per-service arrays (see the module docstring) from the upstream per-minute CSV `path`.

    Raises ValueError when the header, a row's field count, the minute index, a count (negative)
    or the start-date comment is not as the upstream script writes them.
    """
    lines = path.read_text(encoding="ascii").splitlines()
    comments = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if line and not line.startswith("#")]
    if not body or body[0] != HEADER:
        raise ValueError(f"{path}: header={body[:1]!r}, expected {HEADER!r}")
    dated = [m for m in map(START_LINE.search, comments) if m]
    if len(dated) != 1:
        raise ValueError(f"{path}: start-date comment lines={len(dated)}, expected 1 matching {START_LINE.pattern!r}")
    code_day, code_wd, conv_day, conv_wd = dated[0].groups()
    rows = [line.split(",") for line in body[1:]]
    bad = [i for i, row in enumerate(rows) if len(row) != 7]
    if bad:
        raise ValueError(f"{path}: row {bad[0]} has {len(rows[bad[0]])} fields, expected 7")
    table = np.array(rows, dtype=np.int64)
    if not np.array_equal(table[:, 0], np.arange(len(table))):
        raise ValueError(f"{path}: minute column is not 0..{len(table) - 1} in order")
    if len(table) % DAY_MIN or table.min() < 0:
        raise ValueError(f"{path}: minutes={len(table)} (need a multiple of {DAY_MIN}), min value={table.min()} (>= 0)")
    out = {}
    for column, (day, weekday) in (("code", (code_day, code_wd)), ("conv", (conv_day, conv_wd))):
        start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
        if start.strftime("%A") != weekday:
            raise ValueError(f"{path}: {column} start {day} is a {start.strftime('%A')}, the comment says {weekday}")
        first = 1 if column == "code" else 4
        out[column] = {"requests": table[:, first], "prompt_tokens": table[:, first + 1],
                       "output_tokens": table[:, first + 2], "start_utc": np.array(start.isoformat()),
                       "minute_s": np.array(MINUTE_S, np.int64)}
    return out


def build(csv: Path) -> dict[str, bytes]:
    """Output file name -> bytes: the .npz of every trace and PROVENANCE.txt (needs `csv`'s bytes)."""
    services = read_minutes_csv(csv)
    files = {}
    for name, (column, source) in TRACES.items():
        files[name] = npz_bytes({**services[column], "source": np.array(source)})
    files[PROVENANCE] = provenance(files, csv).encode()
    return files


def load(name: str, folder: Path = OUT) -> dict[str, np.ndarray]:
    """The arrays of data/traces/day/`name` (one of TRACES)."""
    if name not in TRACES:
        raise ValueError(f"name={name!r} is not one of {sorted(TRACES)}")
    with np.load(folder / name) as arrays:
        return {key: arrays[key] for key in arrays.files}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def provenance(files: dict[str, bytes], csv: Path) -> str:
    """PROVENANCE.txt: sources, licences, the aggregation, and each file's sha256, size and totals."""
    raw = csv.read_bytes()
    lines = [_PROVENANCE_TEXT.strip(), "", "Files here (name  sha256  bytes[, totals over all minutes]):"]
    lines.append(f"  {csv.name}  {_sha(raw)}  {len(raw)} bytes  (input: upstream per-minute CSV, verbatim)")
    for name in COPIED:
        data = (csv.parent / name).read_bytes()
        lines.append(f"  {name}  {_sha(data)}  {len(data)} bytes")
    for name in TRACES:
        with np.load(io.BytesIO(files[name])) as a:
            totals = (f"minutes={len(a['requests'])} requests={int(a['requests'].sum())} "
                      f"prompt_tokens={int(a['prompt_tokens'].sum())} output_tokens={int(a['output_tokens'].sum())} "
                      f"start_utc={a['start_utc']}")
        lines.append(f"  {name}  {_sha(files[name])}  {len(files[name])} bytes, {totals}")
    lines += ["", "Regenerate: python scripts/day_traces.py data/traces/day/azure2024-llm-minutes.csv", ""]
    return "\n".join(lines)


_PROVENANCE_TEXT = """
Day-scale LLM request load curves (per-minute aggregates). Generated by scripts/day_traces.py from
azure2024-llm-minutes.csv (beside this file); do not edit by hand. Statistics: docs/DAY_TRACES.md.

Data: Azure LLM inference trace 2024, a sample of the traces of multiple LLM inference services in
Azure (collected May 2024): one week of code requests (2024-05-10 to 2024-05-16, UTC) and one week
of conversation requests (2024-05-12 to 2024-05-18, UTC); raw columns TIMESTAMP (UTC), ContextTokens,
GeneratedTokens. Dataset card: AzureLLMInferenceDataset2024.md (copied verbatim).
  Source repo: https://github.com/Azure/AzurePublicDataset, commit b469a113cedca53ddc3bdea71a143dc4b7d8700c
  (dataset card AzureLLMInferenceDataset2024.md, licence file LICENSE). The raw CSVs are not in the
  repository; the card links them (azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace/
  AzureLLMInferenceTrace_code_1week.csv and ..._conv_1week.csv; also GitHub release dataset-llm-2024).
  Licence: CC-BY-4.0 (LICENSE-CC-BY-4.0.txt = the repository's LICENSE, sha256 identical).
  Attribution: Jovan Stojkovic, Chaojie Zhang, Inigo Goiri, Josep Torrellas, Esha Choukse,
  'DynamoLLM: Designing LLM Inference Clusters for Performance and Energy Efficiency', HPCA 2025
  (arXiv:2408.00741). Data: Microsoft Azure, AzurePublicDataset.

Per-minute aggregation (the input CSV): wattproof/wattproof, file testdata/azure2024-llm-minutes.csv
at commit abc2b0238108cdef497fbc0fae70515eff317f92, written by its analysis/traces/azure2024_minutes.py
(same commit) from the two raw one-week CSVs: per service, minute m = 1440 x (day - first day) +
60 x hour + minute of each UTC TIMESTAMP (truncated to the minute), summing requests, ContextTokens
and GeneratedTokens; minute 0 is 00:00 UTC of that service's first day. No snapshot of that repository
could be fetched, so the file was copied out of the 28 text pages (16000 characters each, the last
5774) that a public code index returned for it and reassembled: every page's length matches and the
total, 437774 bytes, is the index's; the upstream file's own sha256 was not available. The exact
totals below confirm the copy.
Repository licence: Apache-2.0 (its ROADMAP: "Apache-2.0 license file"; its LICENSE could not be
read here; LICENSE-APACHE.txt is the Apache License 2.0 text, copied from data/traces/). The numbers
themselves derive from the CC-BY-4.0 data above: keep both attributions.

Independent cross-checks of the input's totals, all exact: a public notebook's full pass over the two
raw CSVs (repository folder data-center-flexibility-resource-adequacy) printed code 16,803,695 requests
and 42,579,982,075 tokens (ContextTokens + GeneratedTokens), conversation 27,303,999 requests and
47,429,468,868 tokens; other public scripts assert the code file has 16,803,695 rows and 691,989,454
bytes, one lists its sha256 as 71de5c55cbc35f8f1ed0b6b7806b4cd1e9764b0058469725a6aac98023a1448f
(third-party figure; the raw CSVs could not be downloaded here to verify it). The split between
prompt and output tokens and the minute placement are not independently checked.

What scripts/day_traces.py does: splits the CSV into one .npz per service, keeping every minute and
every count unchanged (int64; no request dropped, no rescaling), adds start_utc, minute_s and source.
"""


def _hourly(x: np.ndarray) -> np.ndarray:
    """Per-hour sums [hours] of per-minute values `x` [minutes]."""
    return x.reshape(-1, HOUR_MIN).sum(axis=1)


def day_dates(a: dict[str, np.ndarray]) -> list[dt.date]:
    """The calendar date (UTC) of each day of trace `a`."""
    start = dt.datetime.fromisoformat(str(a["start_utc"])).date()
    return [start + dt.timedelta(days=d) for d in range(len(a["requests"]) // DAY_MIN)]


def statistics(a: dict[str, np.ndarray]) -> dict[str, float | int | str]:
    """The docs/DAY_TRACES.md statistics of trace `a` (arrays as `load` returns them); units in keys."""
    req = a["requests"].astype(np.float64)
    hourly = _hourly(req) / (HOUR_MIN * MINUTE_S)  # [requests/s] per hour
    profile = hourly.reshape(-1, 24).mean(axis=0)  # hour-of-day (UTC) mean [requests/s]
    per_hour = req.reshape(-1, HOUR_MIN)
    cv = per_hour.std(axis=1) / per_hour.mean(axis=1)
    daily = req.reshape(-1, DAY_MIN).sum(axis=1)
    dates = day_dates(a)
    weekend = np.array([d.weekday() >= 5 for d in dates])
    if weekend.all() or not weekend.any():
        raise ValueError(f"start_utc={a['start_utc']}: the trace needs weekday and weekend days, has {dates}")
    return {
        "days": len(req) / DAY_MIN,
        "requests": int(req.sum()),
        "mean_rate_rps": float(req.sum() / (len(req) * MINUTE_S)),
        "diurnal_swing": float(profile.max() / profile.min()),
        "peak_hour_utc": int(profile.argmax()),
        "trough_hour_utc": int(profile.argmin()),
        "hourly_mean_over_peak": float(hourly.mean() / hourly.max()),
        "weekday_over_weekend": float(daily[~weekend].mean() / daily[weekend].mean()),
        "minute_cv_median": float(np.median(cv)),
        "poisson_cv_median": float(np.median(1.0 / np.sqrt(per_hour.mean(axis=1)))),
        "mean_prompt_tokens": float(a["prompt_tokens"].sum() / req.sum()),
        "mean_output_tokens": float(a["output_tokens"].sum() / req.sum()),
        "held_out": ", ".join(f"{d:%m-%d %a}" for d in dates[-HELD_OUT_DAYS:]),
    }


def summary_markdown(folder: Path = OUT) -> str:
    """The two Markdown tables of docs/DAY_TRACES.md (statistics per trace, totals per day)."""
    rows = ["| trace | days | requests | mean req/s | diurnal swing (peak/trough hour) | peak, trough hour (UTC) "
            "| hourly mean/peak | weekday/weekend | per-minute CV in an hour (median) | Poisson CV (median) "
            "| mean prompt tok | mean output tok | held-out days |", "|" + "---|" * 13]
    days = ["| trace | date (UTC) | requests | prompt tokens | output tokens | mean req/s | role |", "|" + "---|" * 7]
    for name in TRACES:
        a = load(name, folder)
        s = statistics(a)
        rows.append(f"| {name} | {s['days']:.0f} | {s['requests']:,} | {s['mean_rate_rps']:.2f} "
                    f"| {s['diurnal_swing']:.2f} | {s['peak_hour_utc']:02d}h, {s['trough_hour_utc']:02d}h "
                    f"| {s['hourly_mean_over_peak']:.3f} | {s['weekday_over_weekend']:.3f} "
                    f"| {s['minute_cv_median']:.3f} | {s['poisson_cv_median']:.3f} "
                    f"| {s['mean_prompt_tokens']:.1f} | {s['mean_output_tokens']:.1f} "
                    f"| {s['held_out']} |")
        dates = day_dates(a)
        for d, date in enumerate(dates):
            sl = slice(d * DAY_MIN, (d + 1) * DAY_MIN)
            n = int(a["requests"][sl].sum())
            role = "held out" if d >= len(dates) - HELD_OUT_DAYS else "train"
            days.append(f"| {name} | {date:%Y-%m-%d %a} | {n:,} | {int(a['prompt_tokens'][sl].sum()):,} "
                        f"| {int(a['output_tokens'][sl].sum()):,} | {n / (DAY_MIN * MINUTE_S):.2f} | {role} |")
    return "\n".join(rows) + "\n\n" + "\n".join(days) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, nargs="?", help="the upstream per-minute CSV (azure2024-llm-minutes.csv)")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default data/traces/day)")
    parser.add_argument("--check", action="store_true", help="fail if a file on disk differs from a fresh build")
    parser.add_argument("--summary", action="store_true", help="print the statistics tables of docs/DAY_TRACES.md")
    args = parser.parse_args()
    if args.summary:
        print(summary_markdown(args.out), end="")
        return
    if args.csv is None:
        parser.error("csv is required unless --summary")
    files = build(args.csv)
    if args.check:
        stale = [n for n, b in files.items() if not (args.out / n).is_file() or (args.out / n).read_bytes() != b]
        if stale:
            sys.exit(f"stale or missing in {args.out}: {stale}; rerun scripts/day_traces.py {args.csv}")
        print(f"{args.out}: {len(files)} files up to date")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
        print(f"{args.out / name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
