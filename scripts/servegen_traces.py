"""Per-client LLM request rates over 14 days: Alibaba ServeGen's m-large traces, and their statistics.

Source: alibaba/ServeGen (Apache-2.0; Xiang et al., "ServeGen: Workload Characterization and
Generation of Large Language Model Serving in Production", arXiv:2505.09999), folder
data/language/m-large: one file chunk-<i>-trace.csv per client i of the largest language model on
Alibaba Cloud Model Studio (Bailian), one row per 600-s window, 2016 windows (14 days). Provenance,
licence and column meanings: data/traces/servegen/PROVENANCE.txt.

The .npz written here holds (C clients, W = 2016 windows, rows sorted by client index):

    requests  int32   (C, W)  the client's requests in the window            [requests per 600-s window]
                              (= ServeGen's rate [req/s] x 600 s, a whole number in every row; the
                              rate in req/s is requests / window_s)
    client    int32   (C,)    the chunk index i of chunk-<i>-trace.csv (ServeGen's client id)
    window_s  int64   ()      length of one window                           [s] (= 600)
    source    str     ()      repository URL and commit

The cv column and the fitted inter-arrival law (pattern, param1, param2) are not kept; they stay in
the source files (PROVENANCE.txt says where).

The bytes are reproducible (inferencegym_jax.generate.trace_compaction.npz_bytes), so PROVENANCE.txt
lists their sha256, and the sha256 of the inputs (the chunk-<i>-trace.csv files' bytes concatenated
in ascending i).

Usage:
    python scripts/servegen_traces.py SERVEGEN_DIR            # a checkout's root: write the files
    python scripts/servegen_traces.py --git GIT_DIR [--commit C]   # or read a (bare) git repository
    python scripts/servegen_traces.py --check SERVEGEN_DIR    # fail if a shipped file differs
    python scripts/servegen_traces.py --summary               # the statistics of docs/DAY_TRACES.md
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from inferencegym_jax.files import atomic_write_bytes
from inferencegym_jax.generate.trace_compaction import npz_bytes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "traces" / "servegen"
NPZ = "servegen_m_large_2wk.npz"
PROVENANCE = "PROVENANCE.txt"
LICENSE = "LICENSE-APACHE.txt"  # = the source repository's LICENSE, verbatim
REPO_URL = "https://github.com/alibaba/ServeGen"
COMMIT = "f891d1189eb32b3868dfc443800c4150548c282a"  # the snapshot read (2025-06-09)
FOLDER = "data/language/m-large"  # the inputs, relative to the repository root
CHUNK = re.compile(r"chunk-(\d+)-trace\.csv")
WINDOW_S = 600  # one trace row [s] (timestamps step by 600 in every file)
WINDOWS = 2016  # rows per file: 14 days x 144 windows
DAY_W = 144  # windows per day (86 400 s / 600 s)
HOUR_W = 6  # windows per hour (3600 s / 600 s)
WEEK_H = 168  # hours per week
# Stored count type: int32, not uint16: uint16 holds at most 65 535 requests per window and the
# busiest client-window here has 279 269 (PROVENANCE.txt); arrays() checks that every count fits.
REQUESTS_DTYPE = np.int32
WHOLE_TOL = 1e-6  # [requests] largest |rate x 600 s - nearest integer| taken as a whole number (float64 parse error
# of a decimal rate is ~1e-11 requests at the largest count, 279 269; the smallest real miss, 1/600 req/s x 600 s, is 1)
PATTERNS = ("Gamma", "Weibull")  # the inter-arrival laws ServeGen knows (servegen/workload_types.py)
SEED = 0  # seed of the random half of the clients in the statistics
HALVES = 100  # random halves (seeds SEED..SEED + 99) whose error spread the summary lists
TOP = (1, 5, 10, 20)  # top-client counts whose share of requests the summary lists
SUMMARY_START = "<!-- servegen-summary:start -->"
SUMMARY_END = "<!-- servegen-summary:end -->"


def read_dir(root: Path) -> dict[int, bytes]:
    """Client index -> bytes of every chunk-<i>-trace.csv in `root`/data/language/m-large."""
    folder = root / FOLDER
    if not folder.is_dir():
        raise ValueError(f"SERVEGEN_DIR={root}: no folder {FOLDER} (pass a ServeGen checkout's root)")
    return {int(m.group(1)): p.read_bytes() for p in folder.iterdir() if (m := CHUNK.fullmatch(p.name))}


def read_git(git_dir: Path, commit: str) -> dict[int, bytes]:
    """Client index -> bytes of every chunk-<i>-trace.csv of `commit` in the git repository `git_dir`."""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True).stdout

    names = git("ls-tree", "--name-only", commit, f"{FOLDER}/").decode().split()
    return {int(m.group(1)): git("show", f"{commit}:{name}")
            for name in names if (m := CHUNK.fullmatch(name.rsplit("/", 1)[-1]))}


def parse_chunk(client: int, data: bytes) -> np.ndarray:
    """int64 (WINDOWS,) [requests per 600-s window]: rate x 600 s of every row of one chunk-<client>-trace.csv.

    Raises ValueError when a row is not `timestamp,rate,cv,pattern,param1,param2` with timestamps
    0, 600, ..., rate and cv >= 0, the pattern one of PATTERNS exactly where rate > 0, or the rate
    not a whole number of requests per 600 s.
    """
    rows = [line.split(",") for line in data.decode("ascii").splitlines()]
    where = f"chunk-{client}-trace.csv"
    if len(rows) != WINDOWS or any(len(r) != 6 for r in rows):
        raise ValueError(f"{where}: rows={len(rows)} (expected {WINDOWS}) of 6 fields each")
    table = np.array([[float(r[0]), float(r[1]), float(r[2])] for r in rows])
    if not np.array_equal(table[:, 0], np.arange(WINDOWS) * WINDOW_S):
        raise ValueError(f"{where}: timestamps are not 0, {WINDOW_S}, ..., {(WINDOWS - 1) * WINDOW_S}")
    rate, cv = table[:, 1], table[:, 2]
    if rate.min() < 0 or cv.min() < 0 or not np.isfinite(table).all():
        raise ValueError(f"{where}: rate min={rate.min()}, cv min={cv.min()} (both must be finite and >= 0)")
    named = np.array([r[3] in PATTERNS for r in rows])
    if not np.array_equal(named, rate > 0) or any(r[3] not in ("", *PATTERNS) for r in rows):
        raise ValueError(f"{where}: pattern must be one of {PATTERNS} where rate > 0 and empty where rate == 0")
    counts = rate * WINDOW_S
    miss = np.abs(counts - np.round(counts))
    if miss.max() > WHOLE_TOL:
        w = int(miss.argmax())
        raise ValueError(f"{where}: row {w} (timestamp {w * WINDOW_S} s): rate={rows[w][1]} req/s x {WINDOW_S} s = "
                         f"{float(counts[w])!r} requests, not a whole number (off by {miss[w]:.3g} > {WHOLE_TOL}); the "
                         "requests array stores exact counts, so this input cannot be stored without loss")
    return np.round(counts).astype(np.int64)


def arrays(inputs: dict[int, bytes]) -> dict[str, np.ndarray]:
    """The .npz arrays (module docstring) of the input files `inputs` (client index -> bytes)."""
    if not inputs:
        raise ValueError(f"no chunk-<i>-trace.csv inputs found under {FOLDER}")
    clients = sorted(inputs)
    counts = np.array([parse_chunk(i, inputs[i]) for i in clients], np.int64)
    top = int(np.iinfo(REQUESTS_DTYPE).max)
    if counts.max() > top:
        raise ValueError(f"requests per window max={counts.max()} exceeds {np.dtype(REQUESTS_DTYPE).name} (<= {top})")
    return {"requests": counts.astype(REQUESTS_DTYPE),
            "client": np.array(clients, np.int32), "window_s": np.array(WINDOW_S, np.int64),
            "source": np.array(f"{REPO_URL} commit {COMMIT}, {FOLDER}/chunk-<i>-trace.csv")}


def inputs_sha256(inputs: dict[int, bytes]) -> str:
    """sha256 of the input files' bytes concatenated in ascending client index."""
    digest = hashlib.sha256()
    for i in sorted(inputs):
        digest.update(inputs[i])
    return digest.hexdigest()


def build(inputs: dict[int, bytes], licence: bytes) -> dict[str, bytes]:
    """Output file name -> bytes: the .npz, the licence (verbatim) and PROVENANCE.txt."""
    files = {NPZ: npz_bytes(arrays(inputs)), LICENSE: licence}
    files[PROVENANCE] = provenance(files, inputs).encode()
    return files


def load(folder: Path = OUT) -> dict[str, np.ndarray]:
    """The arrays of `folder`/servegen_m_large_2wk.npz."""
    with np.load(folder / NPZ) as a:
        return {key: a[key] for key in a.files}


def load_rate(folder: Path = OUT) -> np.ndarray:
    """float64 (C, W) [req/s]: the shipped requests / window_s (ServeGen's rate column)."""
    a = load(folder)
    return a["requests"].astype(np.float64) / float(a["window_s"])


def provenance(files: dict[str, bytes], inputs: dict[int, bytes]) -> str:
    """PROVENANCE.txt: source, licence, column meanings, and the inputs' and outputs' sha256 and totals."""
    total = sum(len(b) for b in inputs.values())
    with np.load(io.BytesIO(files[NPZ])) as npz:
        counts = npz["requests"]
    requests, top = int(counts.sum(dtype=np.int64)), int(counts.max())
    lines = [_PROVENANCE_TEXT.strip(), "",
             f"Inputs: {len(inputs)} files chunk-<i>-trace.csv, i = {min(inputs)}..{max(inputs)}, {total} bytes;",
             f"  sha256 of their bytes concatenated in ascending i: {inputs_sha256(inputs)}", "",
             "Files here (name  sha256  bytes[, totals]):"]
    for name in (NPZ, LICENSE):
        data = files[name]
        extra = (f", clients={counts.shape[0]} windows={counts.shape[1]} requests={requests} "
                 f"max_window_requests={top}"
                 if name == NPZ else "")
        lines.append(f"  {name}  {hashlib.sha256(data).hexdigest()}  {len(data)} bytes{extra}")
    lines += ["", "Regenerate (from a checkout, or from a git repository at the commit above):",
              "  python scripts/servegen_traces.py SERVEGEN_DIR",
              f"  python scripts/servegen_traces.py --git SERVEGEN_GIT_DIR --commit {COMMIT}",
              "Check: the same with --check (rebuilds in memory, compares with the bytes here).", ""]
    return "\n".join(lines)


_PROVENANCE_TEXT = f"""
Per-client LLM request rates over 14 days (600-s windows). Generated by scripts/servegen_traces.py;
do not edit by hand. Statistics: docs/DAY_TRACES.md (section ServeGen).

Source: {REPO_URL}, commit {COMMIT} (2025-06-09, "Fix SyntaxError in
clientpool.py"), files {FOLDER}/chunk-<i>-trace.csv, i = 0..161 (one per client; the folder's
chunk-<i>-dataset.json length distributions are not used).
Licence: Apache-2.0 (LICENSE-APACHE.txt = the repository's LICENSE, verbatim; the same Apache 2.0
text as data/traces/day/LICENSE-APACHE.txt up to whitespace: that copy has a leading empty line
and no final newline, so the two sha256 differ).
Attribution: Yuxing Xiang, Xue Li, Kun Qian, Wenyuan Yu, Ennan Zhai, Xin Jin, "ServeGen: Workload
Characterization and Generation of Large Language Model Serving in Production", arXiv:2505.09999
(2025). Data: Alibaba Cloud Model Studio (Bailian), model "m-large" (the largest language model of
the release; the paper does not name it).

Input columns (no header): timestamp_s, rate, cv, pattern, param1, param2. Meanings, as ServeGen's
own code reads them (servegen/clientpool.py, ClientPool._load_data; servegen/construct.py,
_sample_iats; servegen/workload_types.py, ClientWindow and ArrivalPat):
  timestamp_s  start of the window [s] since the trace start; a row covers [t, next t), 600 s here
               (ClientPoolView._process_client). examples/generate_realistic.py reads
               timestamp 64800 as 18:00, so t = 0 is 00:00 of the first day; the time zone, the
               date and the weekday are not published (neither README nor code gives one).
  rate         the client's mean request rate in the window [req/s]: every rate x 600 s here is a
               whole number (requests in the window / 600 s); the README's rate_fn is in
               "requests per second" and generate_workload splits an aggregate rate by these rates.
  cv           coefficient of variation of the client's inter-arrival times in the window [1].
  pattern, param1, param2: the inter-arrival law fitted to the window: "Gamma" (shape a, scale) or
               "Weibull" (shape c, scale), as scipy.stats.gamma(a=param1, scale=param2) and
               weibull_min(c=param1, scale=param2) in _sample_iats. Empty (and rate = cv = 0) in a
               window the loader treats as no data (trace[t] = None).
Observed here, not documented upstream: the smallest nonzero rate x 600 s is 10 requests, so a
window with fewer than about 10 requests appears as rate 0 (windows below a threshold are dropped,
our reading); about 69 % of client-windows are 0. Totals over clients therefore slightly undercount.

What scripts/servegen_traces.py does: keeps, for every window of every client, rate x 600 s as the
exact request count (`requests`, int32; the script fails unless every rate x 600 s is a whole number
to within 1e-6; int32, not uint16, because the largest count, max_window_requests below, exceeds
65 535), sorted by client index. rate [req/s] = requests / 600 s, exactly the source's rate.
No rescaling, no window dropped.
Not kept: the cv column and the inter-arrival law (pattern, param1, param2) of each window. They
stay upstream, columns 3 to 6 of {FOLDER}/chunk-<i>-trace.csv at the commit above, where
ServeGen's ClientPool._load_data (servegen/clientpool.py) reads them to sample inter-arrival times.
"""


def _rae(actual: np.ndarray, lag: int, first: int) -> float:
    """Relative absolute error of the forecast x[t - lag] for x[t], t >= first: sum |err| / sum x."""
    x = actual[first:]
    return float(np.abs(x - actual[first - lag:len(actual) - lag]).sum() / x.sum())


def random_halves(rate: np.ndarray, count: int = HALVES) -> np.ndarray:
    """float64 (count, 3): `forecast_errors` of `count` random halves of the clients (seeds SEED..)."""
    c = rate.shape[0]
    return np.array([forecast_errors(rate[np.random.default_rng(SEED + k).permutation(c)[:c // 2]])
                     for k in range(count)])


def forecast_errors(rate: np.ndarray) -> tuple[float, float, float]:
    """Of the hourly mean of the total of `rate` (C, W) [req/s]: relative absolute errors of
    "same hour yesterday" (hours 24..), "same hour last week" (hours 168..), and "same hour
    yesterday" on the hours 168.. only (the last week's set)."""
    hourly = rate.astype(np.float64).sum(axis=0).reshape(-1, HOUR_W).mean(axis=1)
    return _rae(hourly, 24, 24), _rae(hourly, WEEK_H, WEEK_H), _rae(hourly, 24, WEEK_H)


def client_sets(rate: np.ndarray) -> dict[str, np.ndarray]:
    """Named client row sets: all, a random half (seed SEED) and its complement, the 10 busiest and the rest."""
    c = rate.shape[0]
    perm = np.random.default_rng(SEED).permutation(c)
    busiest = np.argsort(-rate.astype(np.float64).mean(axis=1), kind="stable")
    return {f"all {c} clients": np.arange(c), f"random half A ({c // 2}, seed {SEED})": np.sort(perm[:c // 2]),
            f"random half B (the other {c - c // 2})": np.sort(perm[c // 2:]),
            "10 busiest clients": np.sort(busiest[:10]), f"the other {c - 10}": np.sort(busiest[10:])}


def _overview(rate: np.ndarray) -> list[str]:
    """The summary's first table (totals, concentration) for `rate` (C, W) [req/s]."""
    r = rate.astype(np.float64)
    total = r.sum(axis=0)
    share = np.sort(r.mean(axis=1))[::-1].cumsum() / r.mean(axis=1).sum()
    profile = total.reshape(-1, DAY_W).mean(axis=0).reshape(-1, HOUR_W).mean(axis=1)
    rows = ["| quantity | value |", "|---|---|",
            f"| clients, windows (600 s), days | {r.shape[0]}, {r.shape[1]}, {r.shape[1] // DAY_W} |",
            f"| requests (sum of rate x 600 s) | {int(np.round(r * WINDOW_S).sum()):,} |",
            f"| total rate: mean, max, min over 600-s windows [req/s] | "
            f"{total.mean():.1f}, {total.max():.1f}, {total.min():.1f} |",
            f"| client-windows with rate 0 (fewer than ~10 requests) | {(r == 0).mean():.1%} |",
            f"| hour-of-day profile (14-day mean): busiest, quietest hour, swing | {profile.argmax():02d}h, "
            f"{profile.argmin():02d}h, {profile.max() / profile.min():.2f} |"]
    rows += [f"| share of requests of the {k} busiest client{'s' * (k > 1)} | {share[k - 1]:.1%} |" for k in TOP]
    rows += [f"| clients that carry 50 %, 90 % of requests | {int(np.searchsorted(share, 0.5)) + 1}, "
             f"{int(np.searchsorted(share, 0.9)) + 1} |"]
    return rows


def summary_markdown(folder: Path = OUT) -> str:
    """The three Markdown tables of docs/DAY_TRACES.md's ServeGen section (from the shipped .npz alone)."""
    rate = load_rate(folder)
    total = rate.sum(axis=0)
    days = ["| day | mean [req/s] | / 14-day mean | busiest hour [req/s] | quietest hour [req/s] | swing |",
            "|" + "---|" * 6]
    for d, day in enumerate(total.reshape(-1, DAY_W)):
        hours = day.reshape(-1, HOUR_W).mean(axis=1)
        days.append(f"| {d} | {day.mean():.1f} | {day.mean() / total.mean():.3f} "
                    f"| {hours.argmax():02d}h {hours.max():.1f} | {hours.argmin():02d}h {hours.min():.1f} "
                    f"| {hours.max() / hours.min():.2f} |")
    errors = ["| clients | mean [req/s] | yesterday (hours 24-335) | last week (hours 168-335) "
              "| yesterday (hours 168-335) |", "|" + "---|" * 5]
    for name, rows in client_sets(rate).items():
        y, w, y_late = forecast_errors(rate[rows])
        errors.append(f"| {name} | {rate[rows].astype(np.float64).sum(axis=0).mean():.1f} "
                      f"| {y:.3f} | {w:.3f} | {y_late:.3f} |")
    spread = np.percentile(random_halves(rate), [10, 50, 90], axis=0)
    errors.append(f"| {HALVES} random halves (seeds {SEED}..{SEED + HALVES - 1}): median [p10, p90] "
                  f"| {total.mean() * (rate.shape[0] // 2) / rate.shape[0]:.1f} (expected) | "
                  + " | ".join(f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for lo, m, hi in spread.T) + " |")
    return "\n\n".join("\n".join(t) for t in (_overview(rate), days, errors)) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("servegen_dir", type=Path, nargs="?", help="a ServeGen checkout's root")
    parser.add_argument("--git", type=Path, help="read the inputs from this git directory (bare is fine) instead")
    parser.add_argument("--commit", default=COMMIT, help=f"commit to read with --git (default {COMMIT})")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default data/traces/servegen)")
    parser.add_argument("--check", action="store_true", help="fail if a file on disk differs from a fresh build")
    parser.add_argument("--summary", action="store_true", help="print the statistics tables of docs/DAY_TRACES.md")
    args = parser.parse_args()
    if args.summary:
        print(summary_markdown(args.out), end="")
        return
    if (args.servegen_dir is None) == (args.git is None):
        parser.error("give SERVEGEN_DIR or --git GIT_DIR (one of them) unless --summary")
    if args.git is not None:
        inputs = read_git(args.git, args.commit)
        licence = subprocess.run(["git", "--git-dir", str(args.git), "show", f"{args.commit}:LICENSE"],
                                 check=True, capture_output=True).stdout
    else:
        inputs, licence = read_dir(args.servegen_dir), (args.servegen_dir / "LICENSE").read_bytes()
    try:
        files = build(inputs, licence)
    except ValueError as error:
        sys.exit(f"{error}")
    if args.check:
        stale = [n for n, b in files.items() if not (args.out / n).is_file() or (args.out / n).read_bytes() != b]
        if stale:
            sys.exit(f"stale or missing in {args.out}: {stale} (inputs sha256 {inputs_sha256(inputs)}); rerun the "
                     "script without --check")
        print(f"{args.out}: {len(files)} files up to date")
        return
    for name, data in files.items():
        atomic_write_bytes(args.out / name, data)
        print(f"{args.out / name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
