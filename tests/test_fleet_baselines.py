"""Fleet evaluation and baselines (issue 42): the runner's totals, the controllers' rules, the grade,
the chosen numbers' file. One compiled program (a short episode of static and oracle on a small
fleet); the controllers' rules are checked eagerly on made-up observations."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from inferencegym_jax.files import shipped
from inferencegym_jax.fleet import baselines as fb
from inferencegym_jax.fleet import evaluate as fe
from inferencegym_jax.fleet.tasks import make_fleet
from inferencegym_jax.protocols import Seen, StepOutput

ENV_ID = "InferenceGym-Fleet1-v1"
STEPS = 24  # control intervals of the compiled episode: longer than the 14-min provisioning lead


@struct.dataclass
class Obs:
    """The observation fields the HPA and the forecast read (float32 ())."""

    arrival_rate: jax.Array
    serving: jax.Array
    warming: jax.Array
    rate_yesterday: jax.Array
    rate_yesterday_ahead: jax.Array


def obs(rate: float, serving: float, warming: float = 0.0, yesterday: float = 1.0, ahead: float = 1.0) -> Obs:
    f = jnp.float32
    return Obs(f(rate), f(serving), f(warming), f(yesterday), f(ahead))


@pytest.fixture(scope="module")
def small():
    """A 4-replica Fleet1 on held-out windows (the same dynamics, a smaller fleet)."""
    return make_fleet(ENV_ID, split="heldout", fleet={"num_replicas": 4, "initial_replicas": 4})


@pytest.fixture(scope="module")
def episodes(small):
    """(static 4, oracle) episodes of STEPS intervals on held-out window 3, one compiled call."""
    env, params = small
    static = fb.StaticController(jnp.int32(4))
    lead = fb.lookahead_minutes(params)
    start = int(params.curve.starts[3])
    peak = float(np.max(np.asarray(params.curve.rate)[start:start + STEPS + lead + 1]))
    oracle = fb.OracleController(jnp.float32(peak / 1.9), lead)  # two replicas hold the window's peak

    @jax.jit
    def run(key):
        p = fe.window_params(params, jnp.int32(3))
        return (fe.play_fleet_episode(env, p, static, key, STEPS), fe.play_fleet_episode(env, p, oracle, key, STEPS))

    return jax.device_get(run(jax.random.key(7)))


@pytest.mark.slow  # the fast tier's budget: compiles fleet episodes of three controllers
def test_runner_totals_equal_the_env_episode_sums(episodes, small):
    _, params = small
    for last, records in episodes:
        ep = last.state.episode
        for field, key in (("arrived", "arrived"), ("judged", "judged"), ("slo_violations", "missed"),
                           ("gpu_seconds", "gpu_seconds"), ("lost", "lost"), ("cost_usd", "cost_usd")):
            np.testing.assert_allclose(np.sum(records[key]), getattr(ep, field), rtol=1e-5, atol=1e-3)
        assert int(last.state.start_minute) == int(params.curve.starts[3])
        summary = fe._episodes_of(records, last.state.start_minute, params.control_interval_s)
        np.testing.assert_allclose(summary.gpu_hours, ep.gpu_seconds / 3600.0, rtol=1e-5)
        np.testing.assert_allclose(summary.slo_attainment, 1.0 - ep.slo_violations / ep.judged, rtol=1e-5)


@pytest.mark.slow  # the fast tier's budget: compiles fleet episodes of three controllers
def test_static_holds_its_count(episodes):
    _, records = episodes[0]
    assert np.all(records["target"] == 4.0)
    assert np.all(records["serving"] == 4.0) and np.all(records["warming"] == 0.0)
    np.testing.assert_allclose(records["gpu_seconds"], 4 * 60.0, rtol=1e-5)


@pytest.mark.slow  # the fast tier's budget: compiles fleet episodes of three controllers
def test_oracle_uses_fewer_gpu_hours_than_static(episodes):
    (_, static), (_, oracle) = episodes
    assert oracle["gpu_seconds"].sum() < 0.9 * static["gpu_seconds"].sum()
    assert np.all(oracle["target"] == 2.0)


def test_hpa_scales_up_at_once_and_down_only_after_its_window():
    @struct.dataclass
    class P:
        num_replicas: int = struct.field(pytree_node=False, default=16)

    hpa, p = fb.HpaController(jnp.float32(2.0), 5), P()
    memory = hpa.init(None, Seen(jnp.int32(0), obs(8.0, 4.0), None), p)
    action, memory = hpa.act(memory, None, Seen(jnp.int32(0), obs(8.4, 4.0), None), p)
    assert int(action[0]) == 4  # 8.4 / 4 = 2.1 per replica: within the 0.1 tolerance
    action, memory = hpa.act(memory, None, Seen(jnp.int32(1), obs(16.0, 4.0), None), p)
    assert int(action[0]) == 8  # load doubled: ceil(4 x 4 / 2), at once
    held = []
    for t in range(2, 10):
        action, memory = hpa.act(memory, None, Seen(jnp.int32(t), obs(4.0, 8.0), None), p)
        held.append(int(action[0]))
    assert held[:4] == [8] * 4  # the load fell to 0.5 per replica: held through the 300-s window
    assert held[-1] == 2  # then ceil(8 x 0.5 / 2)


def test_pooled_hpa_carries_the_last_rate_at_the_capacity_per_size_under_the_hpa_window():
    """The fewest N with scale x N x capacity[N] >= the last interval's rate, at once up, down only
    after the 300-s window; the HPA's refactored stabilisation is the same function."""
    @struct.dataclass
    class P:
        num_replicas: int = struct.field(pytree_node=False, default=4)

    capacity = jnp.asarray([0.0, 0.5, 1.0, 1.5, 2.0], jnp.float32)  # N x capacity: 0, 0.5, 2, 4.5, 8 req/s
    assert [int(fb.pooled_replicas(jnp.float32(r), capacity, jnp.float32(1.0), 4)) for r in (0.0, 0.5, 0.6, 4.5,
                                                                                              8.0, 9.0)] == [
        0, 1, 2, 3, 4, 4]  # none carries 9: the whole fleet
    assert int(fb.pooled_replicas(jnp.float32(4.0), capacity, jnp.float32(0.5), 4)) == 4  # 3 x 1.5 x 0.5 < 4
    hpa, p = fb.PooledHpaController(capacity, jnp.float32(1.0), 5), P()
    memory = hpa.init(None, Seen(jnp.int32(0), obs(0.4, 1.0), None), p)
    acts = []
    for t, rate in enumerate([0.4, 4.0, 7.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]):
        committed = acts[-1] if acts else 1
        action, memory = hpa.act(memory, None, Seen(jnp.int32(t), obs(rate, float(committed)), None), p)
        acts.append(int(action[0]))
    assert acts[:3] == [1, 3, 4]  # up at once (0.4 -> 1, 4 -> 3, 7 -> 4 replicas)
    assert acts[3:7] == [4] * 4 and acts[-1] == 2  # 1 req/s needs 2: held through the window first


def test_hpa_counts_warming_replicas_as_missing():
    ready, missing = jnp.int32(4), jnp.int32(4)
    # up: 4 ready at 3 req/s each (ratio 1.5); the 4 warming count as 0: ratio 0.75 flips -> hold 8
    assert int(fb.hpa_recommendation(jnp.float32(3.0), ready, missing, jnp.float32(2.0))) == 8
    # up: 4 ready at 6 req/s each; with the warming at 0: 24 / 8 / 2 = 1.5 -> ceil(12) = 12
    assert int(fb.hpa_recommendation(jnp.float32(6.0), ready, missing, jnp.float32(2.0))) == 12


def test_forecast_scales_yesterday_by_today_ratio():
    @struct.dataclass
    class P:
        num_replicas: int = struct.field(pytree_node=False, default=16)

    fc, p = fb.ForecastController(jnp.float32(2.0), jnp.float32(0.0), 4), P()
    memory = fc.init(None, None, p)
    action, memory = fc.act(memory, None, Seen(jnp.int32(0), obs(0.0, 4.0, yesterday=5.0, ahead=6.0), None), p)
    assert int(action[0]) == 3  # no history: ratio 1, 6 / 2
    step = StepOutput(jnp.int32(0), None, obs(10.0, 4.0), None, jnp.float32(0.0), {})
    memory = fc.update(memory, step, p)
    action, _ = fc.act(memory, None, Seen(jnp.int32(1), obs(10.0, 4.0, yesterday=5.0, ahead=6.0), None), p)
    assert int(action[0]) == 6  # today ran at twice yesterday: 2 x 6 / 2


def fake(costs: list[float], gpu: list[float] | None = None) -> fe.FleetEpisodes:
    j = np.asarray(costs, np.float32)
    g = np.asarray(gpu if gpu is not None else costs, np.float32)
    z = np.zeros_like(j)
    return fe.FleetEpisodes(gpu_hours=g, slo_attainment=z + 1, missed=z, judged=z, arrived=z, lost=z, cost_usd=z,
                            episode_cost=j, start_minute=z.astype(np.int32), arrival_rate=z[:, None],
                            target=z[:, None], serving=z[:, None], warming=z[:, None], attainment=z[:, None],
                            gpu_seconds=z[:, None], curve_rate=z[:, None])


def test_grade_gives_its_references_zero_and_one():
    results = {"static_for_peak": fake([2.0, 3.0, 4.0]), "oracle": fake([1.0, 1.0, 2.0]),
               "hpa": fake([1.5, 2.0, 5.0])}
    s = fe.grade(results)
    np.testing.assert_allclose(s["static_for_peak"], 0.0)
    np.testing.assert_allclose(s["oracle"], 1.0)
    np.testing.assert_allclose(s["hpa"], [0.5, 0.5, -0.5])
    table = fe.table_of(results, s)
    assert table.loc["oracle (clairvoyant bound)", "score"] == pytest.approx(1.0)
    assert table.loc["hpa", "d_gpu_h_vs_static_for_peak"] == pytest.approx(-1.0 / 6.0)
    with pytest.raises(ValueError, match="'oracle'"):
        fe.grade({"static_for_peak": fake([1.0])})


def test_paired_ci_matches_student_t():
    mean, half = fe.paired_ci95([1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0])
    assert mean == pytest.approx(2.5)
    assert half == pytest.approx(3.182446 * np.std([1, 2, 3, 4], ddof=1) / 2.0, rel=1e-5)


def test_bad_input_is_refused(small):
    env, params = small
    with pytest.raises(ValueError, match="num_episodes=0"):
        fe.run_fleet_episodes(env, params, fb.StaticController(jnp.int32(1)), jax.random.key(0), 0)
    with pytest.raises(ValueError, match="env_id='nope'"):
        fb.load_chosen("nope")
    with pytest.raises(ValueError, match="static_for_peak"):
        fe.graded_table(env, params, {"oracle": None}, jax.random.key(0), 1)


@pytest.mark.parametrize("env_id", sorted(fb.BASELINES_FILE))
def test_the_chosen_numbers_come_from_the_data_file(env_id):
    data = json.loads(shipped("data").joinpath("fleet", fb.BASELINES_FILE[env_id]).read_text())
    assert data["what"].startswith(env_id + "'s")
    # hpa_pooled came later (2026-12-07): in Fleet1-v2's file, not yet in v1's
    base = {"static_for_peak", "hpa", "forecast", "oracle", "oracle_pooled"}
    assert set(data["chosen"]) == base | ({"hpa_pooled"} if env_id == "InferenceGym-Fleet1-v2" else set())
    for name, entry in data["chosen"].items():
        for key, item in entry.items():
            assert {"value", "unit", "what"} <= set(item), (name, key)
            rows = data["search"][name]["table"]
            assert any(r[key] == item["value"] for r in rows), (name, key)  # chosen from its search table
    assert "fleet_baselines.py" in data["command"] and data["training_episodes_per_candidate"] >= 8
    static_rows = data["search"]["static_for_peak"]["table"]
    n = data["chosen"]["static_for_peak"]["replicas"]["value"]
    assert all(not r["qualified"] for r in static_rows if r["replicas"] < n)  # the smallest that qualified
    env, params = make_fleet(env_id, split="heldout")
    ctrl = fb.fleet_baselines(env, params)
    assert int(ctrl["static_for_peak"].replicas) == n
    assert float(ctrl["hpa"].target) == pytest.approx(data["chosen"]["hpa"]["target"]["value"])
    assert float(ctrl["forecast"].capacity) == pytest.approx(data["chosen"]["forecast"]["capacity"]["value"])
    assert float(ctrl["oracle"].capacity) == pytest.approx(data["chosen"]["oracle"]["capacity"]["value"])
    assert ctrl["oracle"].lookahead_min == fb.lookahead_minutes(params) == 15  # ceil(830.5 / 60) + 1
    pooled = ctrl["oracle_pooled"]
    assert float(pooled.scale) == pytest.approx(data["chosen"]["oracle_pooled"]["scale"]["value"])
    capacity = json.loads(shipped("data").joinpath("fleet", fb.CAPACITY_FILE[env_id]).read_text())["capacity"]["value"]
    np.testing.assert_allclose(np.asarray(pooled.capacity), capacity)
    assert pooled.lookahead_min == ctrl["oracle"].lookahead_min
    if "hpa_pooled" in data["chosen"]:
        assert float(ctrl["hpa_pooled"].scale) == pytest.approx(data["chosen"]["hpa_pooled"]["scale"]["value"])
        np.testing.assert_allclose(np.asarray(ctrl["hpa_pooled"].capacity), capacity)
        assert ctrl["hpa_pooled"].window == ctrl["hpa"].window == 5


def test_pooled_oracle_takes_the_fewest_replicas_that_carry_the_peak(small):
    """N x capacity[N] x scale against the peak over the lookahead (capacity per fleet size)."""
    _, params = small
    capacity = jnp.asarray([0.0, 0.5, 1.0, 1.5, 2.0], jnp.float32)  # [req/s per replica], N = 0..4

    @struct.dataclass
    class State:
        start_minute: jax.Array

    def target(rate: float, scale: float) -> int:
        p = params.replace(curve=params.curve.replace(rate=jnp.full_like(params.curve.rate, rate)))
        oracle = fb.PooledOracleController(capacity, jnp.float32(scale), fb.lookahead_minutes(p))
        action, _ = oracle.act((), None, Seen(jnp.int32(0), None, State(jnp.int32(100))), p)
        return int(action[0])

    assert target(0.0, 1.0) == 1  # the controllers keep one replica (fleet.baselines._action)
    assert target(2.0, 1.0) == 2  # 2 x 1.0 carries 2.0 req/s
    assert target(2.5, 1.0) == 3  # 3 x 1.5 = 4.5 (2 x 1.0 does not)
    assert target(2.5, 0.5) == 4  # 3 x 1.5 x 0.5 = 2.25 < 2.5
    assert target(100.0, 1.0) == 4  # nothing carries it: the whole fleet
    with pytest.raises(ValueError, match="capacity has shape"):
        fb.make_controllers(params, {"static_for_peak": {"replicas": 1}, "hpa": {"target": 1.0},
                                     "forecast": {"capacity": 1.0, "spare": 0.0}, "oracle": {"capacity": 1.0},
                                     "oracle_pooled": {"scale": 1.0}}, [1.0, 2.0])


@pytest.mark.parametrize("env_id", sorted(fb.CAPACITY_FILE))
def test_the_capacity_file_follows_from_its_measurements(env_id):
    """data/fleet/<task>_capacity.json: capacity[N] is the highest grid load whose worst episode
    kept attainment >= slo_target (scripts/fleet_capacity.py's rule), 0 where none did."""
    data = json.loads(shipped("data").joinpath("fleet", fb.CAPACITY_FILE[env_id]).read_text())
    assert data["what"].startswith(env_id + ":")
    grid = data["settings"]["load_grid"]
    worst = np.asarray(data["worst_attainment"]["value"])
    _, params = make_fleet(env_id)
    assert worst.shape == (params.num_replicas, len(grid))
    expect = [0.0] + [max((g for g, w in zip(grid, row) if w >= float(params.slo_target)), default=0.0)
                      for row in worst]
    assert data["capacity"]["value"] == expect
    assert expect[-1] > expect[4] > 0.0  # pooling: 16 replicas carry more each than 4


def _equal_attainment_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "fleet_equal_attainment.py"
    spec = importlib.util.spec_from_file_location("fleet_equal_attainment", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("env_id", ["InferenceGym-Fleet1-v1", "InferenceGym-Fleet1-v2"])
def test_the_equal_attainment_study_is_current_and_paired_with_the_results_file(env_id):
    """docs/FLEET.md holds scripts/fleet_equal_attainment.py's tables of the task's JSON; the study's
    PPO is the task's results file's, each baseline at its chosen value that file's rows, and each
    matched mixture sits at PPO's attainment between its two values."""
    script = _equal_attainment_script()
    results, out, families = script.STUDIES[env_id]
    doc = json.loads(out.read_text())
    page = (out.parents[2] / "docs" / "FLEET.md").read_text()
    tag = "fleet1" if env_id == script.ENV_ID else fb.BASELINES_FILE[env_id].removesuffix("_baselines.json")
    start, end = f"<!-- {tag}-equal-attainment:start -->", f"<!-- {tag}-equal-attainment:end -->"
    assert f"{start}\n{script.markdowns(doc)}\n{end}" in page
    stored = json.loads(results.read_text())["per_episode"]
    assert doc["ppo"]["gpu_hours"] == pytest.approx(np.mean(stored["ppo"]["gpu_hours"]), rel=1e-12)
    for name, values in families.items():
        number = script.LABELS[name][0]
        chosen = fb.load_chosen(env_id)[name][number]
        assert [r[number] for r in doc[name]] == sorted(values)
        row = next(r for r in doc[name] if r[number] == chosen)
        assert row["gpu_hours"] == pytest.approx(np.mean(stored[name]["gpu_hours"]), rel=1e-12)
        m = doc[script.matched_key(name)]
        if m is None:  # PPO's attainment outside the values' range: the tables say so
            continue
        assert m["slo_attainment"] == pytest.approx(doc["ppo"]["slo_attainment"], abs=1e-9)
        a, b = (next(r for r in doc[name] if r[number] == t) for t in m["targets"])
        assert min(a["gpu_hours"], b["gpu_hours"]) <= m["gpu_hours"] <= max(a["gpu_hours"], b["gpu_hours"])
