"""Per-client LLM request rates over two weeks: Alibaba ServeGen's m-large traces.

The data: for each of 162 clients of the largest language model ("m-large") on Alibaba Cloud
Model Studio (Bailian), the client's mean request rate in every 600-s window of 14 days (2016
windows), from alibaba/ServeGen (Apache-2.0; Xiang et al., arXiv:2505.09999), folder
data/language/m-large, files chunk-<i>-trace.csv. scripts/servegen_traces.py writes them to
data/traces/servegen/servegen_m_large_2wk.npz; provenance, licence, column meanings and sha256 in
data/traces/servegen/PROVENANCE.txt, statistics in docs/DAY_TRACES.md.

Units: rates in [req/s] (requests in the window / 600 s; the file stores the exact whole-number
request counts, int32 `requests`, and client_rates divides by 600 s).
Window w covers [600 w, 600 (w + 1)) s since the trace start; window 0 starts at 00:00 of the first
day (ServeGen's examples read timestamp 64 800 s as 18:00); the time zone, date and weekday are not
published. A window with fewer than about 10 requests of a client reads 0 (the smallest nonzero
count in the data is 10), so sums over clients slightly undercount.
"""

from __future__ import annotations

import functools

import numpy as np

from inferencegym_jax.files import shipped

WINDOW_S = 600.0  # [s], one trace window (ServeGen's timestamps step by 600 s)
DAY_WINDOWS = 144  # [windows/day] = 86 400 s / 600 s
# The ServeGen traces shipped in data/traces/servegen (scripts/servegen_traces.py writes them): name -> file.
SERVEGEN_TRACES = {"servegen-m-large": "servegen_m_large_2wk.npz"}


@functools.cache
def client_rates(trace: str) -> np.ndarray:
    """float32 (C, W) [req/s], read-only: each client's mean request rate in each 600-s window of a
    shipped ServeGen trace (rows in ascending ServeGen client index; C = 162, W = 2016 for m-large):
    the file's int32 request counts / WINDOW_S, rounded once to float32. Cached: the same array each call.

    Raises:
      ValueError: `trace` is not one of SERVEGEN_TRACES.
    """
    if trace not in SERVEGEN_TRACES:
        raise ValueError(f"servegen trace={trace!r} is not one of {sorted(SERVEGEN_TRACES)}")
    with shipped("data").joinpath("traces", "servegen", SERVEGEN_TRACES[trace]).open("rb") as f:
        requests = np.load(f)["requests"]  # int32 (C, W) [requests per 600-s window]
    rate = (requests.astype(np.float64) / WINDOW_S).astype(np.float32)
    rate.setflags(write=False)
    return rate
