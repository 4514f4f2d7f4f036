"""Non-learning controllers that plan or switch with the simulator: the baselines a learned policy
must beat, and the teachers PPO may start from.

- `mpc`: model-predictive control, clairvoyant (an oracle bound) or causal (on forecast traffic);
- `switch_rule`: two configurations and a hysteresis threshold on the recent prompt-token rate;
- `traffic_belief`: the posterior over a schedule's hidden burst state, the causal MPC's forecast;
- `trace_analogs`: an analog forecast of a replayed trace (the stretches of its past like now).
"""
