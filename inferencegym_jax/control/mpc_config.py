"""The MPC's settings as one frozen, hashable value (`MPCConfig`), checked when made.

What each setting does is in `inferencegym_jax.control.mpc`'s module docstring. A config is
static in the compiled episode (it is hashed into jit's cache key): two runs with equal configs
share one compilation, and the arrays a controller also needs (its candidates, its base rule) are
arguments of that compilation (`mpc.MPC`).
"""

from __future__ import annotations

import dataclasses
import math

from inferencegym_jax.control import trace_analogs

# [intervals] The default look-ahead: three start-ups of the v1 tasks' prefill engine
# (prefill_start_s = 10 s at 1-s intervals, configs/tasks/task3_v1.toml and task4_v1.toml), so a
# rollout that turns disaggregation on also sees it pay back. At 10 intervals it saw only the
# start-up, and the v1 oracles found less room (experiments/results/mpc_gap_v1.json against
# experiments/results/mpc_gap_v1_h30.json, docs/CONTROLLERS.md).
HORIZON = 30
# Futures the causal MPC averages each candidate over by default (one on a replayed trace, `plan`).
# 4 were too few: on 64 held-out episodes 16 scored +0.073 on task 2-v1 (4: +0.044, 64: +0.075)
# and +0.065 on task 3-v1 (4: +0.042), docs/CONTROLLERS.md. The imitation's teacher
# has its own default, 4 (training.config's `imitation_samples`; task 2-v1's config sets 16).
SAMPLES = 16
# A rollout's score (`mpc_rollout.OBJECTIVES`, module docstring of `mpc`).
OBJECTIVE_NAMES = ("grade", "reward")
# Where a causal plan's hidden traffic state comes from (`MPCConfig.traffic_state`).
TRAFFIC_STATES = ("belief", "true")
# A causal plan's futures on a replayed trace (`MPCConfig.trace_forecast`, module docstring of `mpc`).
TRACE_FORECASTS = ("persistence", "analogs")


@dataclasses.dataclass(frozen=True)
class MPCConfig:
    """The settings of a model-predictive controller (`mpc` module docstring); ValueError naming
    the field for a bad one.

    Attributes:
      clairvoyant: True for the oracle bound (the episode's own future), False for the causal
        MPC (`samples` futures from fresh keys; on a replayed trace `trace_forecast`'s).
      horizon: [intervals] each rollout looks ahead, >= 1.
      samples: futures the causal MPC averages each candidate over, >= 1 (one when clairvoyant;
        on a replayed trace one under "persistence", at most trace_analogs.LOOKBACK "analogs").
      objective: "grade" (the task grader's value of the episode so far plus the rollout) or
        "reward" (the rollout's summed reward).
      traffic_state: where the causal MPC's hidden traffic state comes from: "belief" (the
        posterior given the arrivals so far, `traffic_belief`: the fair baseline) or "true" (the
        episode's own burst phase or MMPP state: a reference for a perfect traffic-state estimate).
      replan_every: [intervals] >= 1 between plans, the choice held in between (move blocking);
        1 plans every interval.
      trace_forecast: the causal MPC's futures on a replayed trace: "persistence" (one, its
        recent past) or "analogs" (`samples`, the stretches that followed a load like now's).
      analog_window: [intervals] >= 1, the load over which analogs match now's (`trace_analogs`).
      margin: [standard errors] >= 0, finite; with a base policy and two or more sampled futures:
        how far a candidate's mean gain over the base must clear its standard error to be chosen;
        0: the best mean wins.
    """

    clairvoyant: bool = False
    horizon: int = HORIZON
    samples: int = SAMPLES
    objective: str = "grade"
    traffic_state: str = "belief"
    replan_every: int = 1
    trace_forecast: str = "persistence"
    analog_window: int = trace_analogs.WINDOW
    margin: float = 0.0

    def __post_init__(self) -> None:
        if self.horizon < 1 or self.samples < 1 or self.replan_every < 1:
            raise ValueError(f"horizon={self.horizon}, samples={self.samples} and replan_every={self.replan_every} "
                             "must be >= 1")
        if self.objective not in OBJECTIVE_NAMES:
            raise ValueError(f"objective={self.objective!r}: must be one of {sorted(OBJECTIVE_NAMES)}")
        if self.traffic_state not in TRAFFIC_STATES:
            raise ValueError(f"traffic_state={self.traffic_state!r}: must be one of {list(TRAFFIC_STATES)}")
        if self.trace_forecast not in TRACE_FORECASTS:
            raise ValueError(f"trace_forecast={self.trace_forecast!r}: must be one of {list(TRACE_FORECASTS)}")
        if self.analog_window < 1:
            raise ValueError(f"analog_window={self.analog_window}: must be >= 1 [intervals]")
        if self.trace_forecast == "analogs" and self.samples > trace_analogs.LOOKBACK:
            raise ValueError(f"samples={self.samples}: at most {trace_analogs.LOOKBACK} analogs "
                             "(trace_analogs.LOOKBACK)")
        if not 0 <= self.margin < math.inf:  # NaN fails too
            raise ValueError(f"margin={self.margin}: must be finite and >= 0")
        object.__setattr__(self, "margin", float(self.margin))

    @property
    def futures(self) -> int:
        """Futures a plan draws keys for: one when clairvoyant, else `samples`."""
        return 1 if self.clairvoyant else self.samples

    def check_margin(self, has_base: bool, trace: bool) -> None:
        """ValueError unless `margin` is 0 or there is a base policy (`has_base`) and two or more
        sampled futures (not clairvoyant, not a replayed trace's (`trace`) persistence forecast)."""
        one_future = self.clairvoyant or (trace and self.trace_forecast == "persistence")
        if self.margin > 0 and (not has_base or one_future or self.samples < 2):
            raise ValueError(f"margin={self.margin}: must be finite and >= 0, and 0 without a base policy or with "
                             "fewer than two sampled futures (clairvoyant, a trace's persistence forecast, "
                             "samples < 2)")
