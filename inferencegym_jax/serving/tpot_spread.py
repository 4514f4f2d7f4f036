"""Per-request TPOT around its cohort's mean: the prompt chunks that land in one request's decode.

Under "request" SLO accounting (`serving.request_tpot`) every request of a cohort has the cohort's
mean TPOT, the interval's wall time per token. A real request's TPOT is its own mean over its own
few iterations, (finish - first token) / (output - 1): a code request of ten output tokens decodes
for ~0.15 s, and one 7,000-token prompt arriving in that window adds four ~0.15-s chunk iterations
to its ten, a TPOT of ~70 ms against an interval mean of ~13 ms. Every exact miss of
experiments/crosscheck/fleet_capacity_exact.py is such a TPOT miss; judging each exact request by
its 1-s cohort's mean instead (experiments/crosscheck/fleet_tpot_spread.py) leaves a lone replica's
misses as they were and lifts a fleet of 3 or more to the project's table: the spread is both within
a request's interval and between a cohort's requests. With `ServerParams.tpot_spread == "bursts"`
the share of a cohort's finished requests that miss their class's TPOT SLO is the chance that the
chunk time X landing in their window exceeds what the SLO leaves, instead of 0 or 1 on the cohort's
mean:

    TPOT = D + X / g,  g = output - 1 gaps,  D + E[X] / g = the cohort's mean TPOT m,
    miss  <=>  X > B = (SLO - m) g + E[X].

X is compound Poisson: prompts start their chunks in the window at the interval's arrival rate
`rate` [prompts/s] (Poisson arrivals: the others of a request's interval are Poisson too, so the
rate, not the count that includes it; behind a least-loaded router the share of it that joins a
replica holding a request, `traffic.workload.Arrivals.busy_rate`), for an exposure of the request's
own prefill (prompts arriving during it queue behind it and are chunked right after its first
token; vLLM V1 chunks prompts first come, first served, so none admitted before it is left) plus
its decode, g m [s]; each prompt adds G = c p [s], c the marginal time of a prompt token beside the
pool (`iteration.Iterations.token_s`), p lognormal with the two moments of the prompt law in force
(`traffic.workload.Arrivals.prompt_law`). Split at B: any one prompt with G > B misses the request
alone (Poisson, exp(-L P(G > B)) that none came); the sum of the smaller ones is taken normal (mean
and variance from the lognormal's partial moments). Then

    P(miss) = 1 - exp(-L P(G > B)) Phi((B - L E[G; G <= B]) / sqrt(L E[G^2; G <= B])),  L = rate x exposure.

A cohort's finished requests have emitted between its tokens before and after the interval; with
memoryless completions at the class's mean output left (`engine.emit`) their mean is that of an
exponential truncated to the interval (`finisher_tokens`). Approximations, each named: the
interval's rate and prompt law stand for every interval of a request's decode; a prompt's chunks
cost c per token (a short prompt beside a memory-bound decode costs less); the normal part of X;
the own prefill's exposure at the mean prompt. Long-lived cohorts (many gaps) recover the cohort
mean's verdict: X's spread per gap shrinks as 1 / sqrt(g).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array
from jax.scipy.special import ndtr

from inferencegym_jax.numerics import safe_div
from inferencegym_jax.serving.iteration import Iterations
from inferencegym_jax.traffic.workload import Arrivals

# [ln s] floor of the log-sd of a prompt's chunk time: a guard for the lognormal's partial moments
# at one prompt length (the law's fit from two moments is then a point).
MIN_LOG_SD = 1e-3
# [s] floor of a chunk time or a budget inside logarithms (a guard; real ones are >= ~1e-4 s).
MIN_TIME_S = 1e-9


class Bursts(NamedTuple):
    """The prompts that land in a request's decode, from one interval; float32 scalars.

    Attributes:
      rate: [prompts/s] the interval's arrival rate beside a request in decode (`Arrivals.busy_rate`
        behind a least-loaded router, else `Arrivals.rate`; all classes).
      log_mean: [ln s] mu of ln G, G = a prompt's chunk time (lognormal).
      log_sd: [ln s] sigma of ln G (>= MIN_LOG_SD).
      own_s: [s] a request's own prefill at the mean prompt, the exposure before its first token.
      present: 1.0 when prompts ride in the decode iterations, 0.0 when a prefill GPU serves them
        or there are none (no chunk lands in a decode then).
    """

    rate: Array
    log_mean: Array
    log_sd: Array
    own_s: Array
    present: Array


def bursts_of(arrivals: Arrivals, it: Iterations) -> Bursts:
    """The interval's `Bursts`: its arrival rate, and the prompt law in force (`Arrivals.prompt_law`;
    the interval's own prompts' moments where it is None) as a lognormal of those two moments,
    times the marginal prompt-token time `it.token_s` [s/token]. The law in force, not the
    interval's draws: at a few requests per interval the draws are mostly the request's own
    prompt, whose length also sets its own exposure, so they would charge a long prompt twice."""
    if arrivals.prompt_law is None:
        count = jnp.sum(arrivals.count)
        mean_p, mean_sq = safe_div(jnp.sum(arrivals.prompt_tokens), count), safe_div(
            jnp.sum(arrivals.prompt_sq_tokens), count)
    else:
        mean_p, mean_sq = arrivals.prompt_law[..., 0], arrivals.prompt_law[..., 1]
    log_sd = jnp.maximum(jnp.sqrt(jnp.log(jnp.maximum(safe_div(mean_sq, mean_p * mean_p), 1.0))), MIN_LOG_SD)
    mean_g = it.token_s * mean_p
    present = ((mean_g > 0.0) & ~it.disaggregated).astype(jnp.float32)
    log_mean = jnp.log(jnp.maximum(mean_g, MIN_TIME_S)) - 0.5 * log_sd**2
    rate = arrivals.rate if arrivals.busy_rate is None else arrivals.busy_rate
    return Bursts(jnp.sum(rate), log_mean, log_sd, mean_g, present)


def finisher_tokens(before: Array, after: Array, mean_left: Array) -> Array:
    """[tokens] the mean output emitted by the requests that finish while a cohort goes from
    `before` to `after` tokens per sequence, under memoryless completions with `mean_left` [tokens]
    of output left: before + the mean of an exponential of that mean truncated to (0, after - before)."""
    span = jnp.maximum(after - before, 0.0)
    ratio = safe_div(span, jnp.maximum(mean_left, 1.0))
    # E[T | T < s] for T exponential of mean L: L - s / expm1(s / L) (s / 2 as s / L -> 0)
    truncated = jnp.where(ratio > 1e-4, jnp.maximum(mean_left, 1.0) - safe_div(span, jnp.expm1(ratio)), 0.5 * span)
    return before + truncated


def miss_share(mean_tpot_s: Array, tokens: Array, slo_s: Array, bursts: Bursts) -> Array:
    """The share of requests with `tokens` [tokens] of output at the cohort's mean TPOT
    `mean_tpot_s` [s/token] whose own TPOT exceeds `slo_s` [s/token] (module docstring); any
    broadcastable shapes, in [0, 1]."""
    gaps = jnp.maximum(tokens - 1.0, 1.0)
    load = bursts.present * bursts.rate * (bursts.own_s + gaps * mean_tpot_s)  # L [prompts]
    mu, sd = bursts.log_mean, bursts.log_sd
    mean_x = load * jnp.exp(mu + 0.5 * sd**2)
    budget = (slo_s - mean_tpot_s) * gaps + mean_x  # B [s]
    log_b = jnp.log(jnp.maximum(budget, MIN_TIME_S))
    over = 1.0 - ndtr((log_b - mu) / sd)  # P(G > B)
    below_1 = jnp.exp(mu + 0.5 * sd**2) * ndtr((log_b - mu - sd**2) / sd)  # E[G; G <= B]
    below_2 = jnp.exp(2.0 * mu + 2.0 * sd**2) * ndtr((log_b - mu - 2.0 * sd**2) / sd)  # E[G^2; G <= B]
    spread = jnp.sqrt(jnp.maximum(load * below_2, 0.0))
    # an explicit floor, not safe_div: a spread of a few ns against a budget of seconds is a sure 'within'
    small_ok = jnp.where(spread > MIN_TIME_S, ndtr((budget - load * below_1) / jnp.maximum(spread, MIN_TIME_S)),
                         (load * below_1 <= budget).astype(jnp.float32))
    within = jnp.exp(-load * over) * small_ok
    return jnp.where(budget >= 0.0, 1.0 - within, 1.0)
