"""The Azure LLM trace's load curve per minute: what a longer replay of task 4 sees.

    python scripts/azure_load_curve.py [--window 60] [--keep-one-in 2] [--lags 6]

Prints, per window of the two traces' common clock (data/traces/azure_{code,conv}_2023.npz,
Patel et al., Splitwise, ISCA 2024; CC-BY-4.0), the requests and prompt tokens per second of
the replayed share (every `keep-one-in`-th request, as InferenceGym-Task4 replays it), and
their spread. InferenceGym-Task4-v1's 600-interval episodes cite it: at half load the per-minute
prompt rate runs from ~1.9 k to ~13.8 k tokens/s, against the ~13.9 k/s one A100 prefills.
Then the autocorrelation of the prompt-token rate at lags of 1 .. `lags` windows: how far the
recent load predicts the next (with --window 10: 0.50 at 10 s, 0.18 at 20 s, against a 10-s
prefill-engine start; the causal MPC's trace forecast, inferencegym_jax.control.mpc, cites it).
"""

from __future__ import annotations

import argparse

import numpy as np

from inferencegym_jax.files import shipped


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(arrival [s], prompt [tokens]) of one compacted trace."""
    with shipped("data").joinpath("traces", f"azure_{name}_2023.npz").open("rb") as f:
        data = np.load(f)
        return np.asarray(data["arrival_s"], np.float64), np.asarray(data["prompt_tokens"], np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="[s] per row")
    parser.add_argument("--keep-one-in", type=int, default=2, help="replayed share, as trace_keep_one_in")
    parser.add_argument("--lags", type=int, default=6, help="windows of lag in the autocorrelation table")
    args = parser.parse_args()
    traces = [load(name) for name in ("code", "conv")]
    end = min(float(a.max()) for a, _ in traces)  # the common clock
    edges = np.arange(0.0, end + args.window, args.window)
    rates, tokens = np.zeros(len(edges) - 1), np.zeros(len(edges) - 1)
    for arrival, prompt in traces:
        keep = np.arange(len(arrival)) % args.keep_one_in == 0
        n, _ = np.histogram(arrival[keep], edges)
        t, _ = np.histogram(arrival[keep], edges, weights=prompt[keep])
        rates += n / args.window
        tokens += t / args.window
    print("| window start [s] | requests/s | prompt tokens/s |\n|---:|---:|---:|")
    for start, r, t in zip(edges[:-1], rates, tokens):
        print(f"| {start:.0f} | {r:.2f} | {t:.0f} |")
    print(f"\nprompt tokens/s per {args.window:g} s: min {tokens.min():.0f}, p10 {np.percentile(tokens, 10):.0f}, "
          f"median {np.median(tokens):.0f}, p90 {np.percentile(tokens, 90):.0f}, max {tokens.max():.0f}")
    print(f"\n| lag [s] | autocorrelation of prompt tokens/s per {args.window:g} s |\n|---:|---:|")
    for lag in range(1, args.lags + 1):
        print(f"| {lag * args.window:g} | {np.corrcoef(tokens[:-lag], tokens[lag:])[0, 1]:.2f} |")


if __name__ == "__main__":
    main()
