"""Recorded request traces, loaded into `workload.Trace` arrays for exact replay under jit.

The package ships four traces (data/traces, compacted by scripts/compact_traces.py; licences
and sha256 in data/traces/PROVENANCE.txt):

| name | requests | span | prompt mean | output mean | source |
|---|---|---|---|---|---|
| azure-code-2023 | 8,819 | 57 min | 2,048 | 28 | Azure LLM inference trace 2023, code (CC-BY-4.0) |
| azure-conv-2023 | 19,366 | 58 min | 1,155 | 211 | Azure LLM inference trace 2023, conversation (CC-BY-4.0) |
| mooncake-conversation | 12,031 | 59 min | 12,035 | 343 | Mooncake FAST'25 conversation (Apache-2.0) |
| mooncake-synthetic | 3,993 | 17 min | 15,325 | 149 | Mooncake FAST'25 synthetic, Poisson arrivals (Apache-2.0) |

(Mooncake prompts run to 126 k tokens, past Llama-3-8B's 8 k context: the roofline still
prices them, but no shipped task replays them.)

A trace spec names the trace of each priority class, `"class0,class1,class2"`, an empty entry
for a class without traffic; a single name puts the whole trace in class 1 ("standard"), as the
synthetic workloads do. Traces that carry a wall-clock origin (the Azure ones) are aligned on
a common clock and cut to the window all of them cover, so a multi-tenant spec replays the
tenants as they arrived together:

    trace = load_trace("azure-code-2023,azure-conv-2023,")   # code as class 0, chat as class 1

`keep_one_in` thins every class to each n-th request (a round-robin load balancer in front of n
identical servers, of which this is one): the arrival pattern and the length distributions
stay those of the trace, the rate falls n-fold.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from inferencegym_jax.files import shipped
from inferencegym_jax.traffic.workload import NUM_CLASSES, Trace

TRACE_FILES: dict[str, str] = {
    "azure-code-2023": "azure_code_2023.npz",
    "azure-conv-2023": "azure_conv_2023.npz",
    "mooncake-conversation": "mooncake_conversation.npz",
    "mooncake-synthetic": "mooncake_synthetic.npz",
}


@dataclass(frozen=True)
class Requests:
    """One recorded trace on the host, in arrival order.

    Attributes:
      name: registry key (TRACE_FILES).
      arrival_s: float64 (N,) [s], arrival time since the trace's first request, sorted.
      prompt_tokens: int32 (N,) [tokens], prompt (context) length of each request.
      output_tokens: int32 (N,) [tokens], generated length of each request.
      origin: wall-clock time of the first request, or None for traces with relative times.
    """

    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    origin: dt.datetime | None

    @property
    def duration_s(self) -> float:
        """Span from the first to the last arrival [s]."""
        return float(self.arrival_s[-1]) if len(self.arrival_s) else 0.0


def available_traces() -> list[str]:
    """Names `load_requests` and `load_trace` accept."""
    return list(TRACE_FILES)


@functools.cache
def load_requests(name: str) -> Requests:
    """The shipped trace `name` as host arrays (read once from the installed package data).

    Raises:
      ValueError: an unknown name; the message lists the valid ones.
    """
    if name not in TRACE_FILES:
        raise ValueError(f"trace name {name!r} is not one of {available_traces()}")
    return parse_trace_file(name, shipped("data").joinpath("traces", TRACE_FILES[name]).read_bytes())


def parse_trace_file(name: str, blob: bytes) -> Requests:
    """The requests of a compacted trace file's bytes (`.npz`: arrival_s, prompt_tokens,
    output_tokens, origin), checked whole: ValueError naming the file if it is unreadable, a
    field is missing, the lengths differ, times are not finite and sorted, or a token count is < 1."""
    where = f"trace file {TRACE_FILES.get(name, name)!r}"
    try:
        with np.load(io.BytesIO(blob)) as arrays:
            origin = str(arrays["origin"])
            requests = Requests(
                name=name,
                arrival_s=np.asarray(arrays["arrival_s"], np.float64),
                prompt_tokens=np.asarray(arrays["prompt_tokens"], np.int32),
                output_tokens=np.asarray(arrays["output_tokens"], np.int32),
                origin=dt.datetime.fromisoformat(origin) if origin else None,
            )
    except Exception as err:  # np.load and zipfile raise many types on damaged files
        raise ValueError(f"{where} is corrupt ({type(err).__name__}: {err}); reinstall the package") from None
    a, p, o = requests.arrival_s, requests.prompt_tokens, requests.output_tokens
    if not (a.ndim == p.ndim == o.ndim == 1 and len(a) == len(p) == len(o)):
        raise ValueError(f"{where} is corrupt: its arrays differ in length or shape")
    if not (np.all(np.isfinite(a)) and np.all(np.diff(a) >= 0) and np.all(p >= 1) and np.all(o >= 1)):
        raise ValueError(f"{where} is corrupt: arrival times must be finite and sorted, token counts >= 1")
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        getattr(requests, field).setflags(write=False)
    return requests


def parse_spec(spec: str) -> tuple[str, ...]:
    """The trace name of each of the NUM_CLASSES classes ("" for none) from a trace spec.

    Raises:
      ValueError: wrong number of entries, unknown names or no trace at all.
    """
    if "," not in spec:
        names = ["", spec.strip(), ""]
    else:
        names = [part.strip() for part in spec.split(",")]
    if len(names) != NUM_CLASSES:
        raise ValueError(
            f"workload.trace={spec!r}: give one trace name per class, {NUM_CLASSES} comma-separated "
            f"entries (empty for none), or a single name"
        )
    unknown = [n for n in names if n and n not in TRACE_FILES]
    if unknown:
        raise ValueError(f"workload.trace={spec!r}: unknown trace {unknown}; available: {available_traces()}")
    if not any(names):
        raise ValueError(f"workload.trace={spec!r} names no trace")
    return tuple(names)


def _window(requests: list[Requests]) -> list[tuple[float, float]]:
    """Per trace, the [start, end] of the replayed window in its own seconds.

    Traces with a wall-clock origin are cut to the span all of them cover; the others keep
    their full span.
    """
    timed = [(r, r.origin) for r in requests if r.origin is not None]
    if len(timed) < 2:
        return [(0.0, r.duration_s) for r in requests]
    start = max(origin for _, origin in timed)
    end = min(origin + dt.timedelta(seconds=r.duration_s) for r, origin in timed)
    if end <= start:
        raise ValueError(f"traces {[r.name for r, _ in timed]} do not overlap in time")
    out = []
    for r in requests:
        if r.origin is None:
            out.append((0.0, r.duration_s))
        else:
            out.append(((start - r.origin).total_seconds(), (end - r.origin).total_seconds()))
    return out


def load_trace(spec: str, keep_one_in: int = 1) -> Trace:
    """A `workload.Trace` (arrays of shape (3, N+1)) replaying `spec` (see the module docstring).

    Per class the arrays hold a -inf sentinel at index 0, the requests of the window in arrival
    order (seconds since the window start), then +inf padding; the token arrays are float32
    prefix sums (0 at index 0), so the tokens of requests i0+1..i1 are cumsum[i1] - cumsum[i0].
    Prefix sums are accumulated in float64 and rounded once, so a difference is exact to about
    one part in 1e7 of the trace total. `duration_s` is each class's window length (+inf for a
    class without traffic, so it does not limit the episode offsets).

    Args:
      spec: trace names per class, "class0,class1,class2", or a single name (class 1).
      keep_one_in: keep requests 0, n, 2n, ... of each class (n >= 1).

    Raises:
      ValueError: a malformed spec, an unknown trace or keep_one_in < 1.
    """
    if isinstance(keep_one_in, bool) or not isinstance(keep_one_in, int) or keep_one_in < 1:
        raise ValueError(f"workload.trace_keep_one_in={keep_one_in!r} must be an integer >= 1")
    names = parse_spec(spec)
    used = [load_requests(n) for n in names if n]
    windows = dict(zip((r.name for r in used), _window(used)))
    columns = []
    for name in names:
        if not name:
            columns.append((np.zeros(0), np.zeros(0), np.zeros(0), np.inf))
            continue
        r = load_requests(name)
        start, end = windows[name]
        inside = (r.arrival_s >= start) & (r.arrival_s <= end)
        sel = np.flatnonzero(inside)[::keep_one_in]
        columns.append((r.arrival_s[sel] - start, r.prompt_tokens[sel], r.output_tokens[sel], end - start))
    width = max(len(c[0]) for c in columns) + 1
    arrival = np.full((NUM_CLASSES, width), np.inf)
    prompt_cs = np.zeros((NUM_CLASSES, width))
    output_cs = np.zeros((NUM_CLASSES, width))
    sq_cs = np.zeros((NUM_CLASSES, width))
    duration = np.zeros(NUM_CLASSES)
    for i, (t, p, o, span) in enumerate(columns):
        n = len(t)
        arrival[i, 0] = -np.inf
        arrival[i, 1 : n + 1] = t
        p, o = np.asarray(p, np.float64), np.asarray(o, np.float64)
        for out, values in ((prompt_cs, p), (output_cs, o), (sq_cs, p * p)):
            out[i, 1 : n + 1] = np.cumsum(values)
            out[i, n + 1 :] = out[i, n]
        duration[i] = span
    def f32(x: np.ndarray) -> jnp.ndarray:
        return jnp.asarray(x, jnp.float32)

    return Trace(
        arrival_s=f32(arrival),
        prompt_cumsum=f32(prompt_cs),
        output_cumsum=f32(output_cs),
        prompt_sq_cumsum=f32(sq_cs),
        duration_s=f32(duration),
    )
