"""The server's grader never answers NaN (issue 43): logs with values above float32's maximum, or
whose float32 sums would overflow, are graded in float64 (ServerCore.grade), while every log a
server writes still grades bit for bit as the library's float32 program grades it.

Task 3 (v1) through the core directly (the shared server serves task 1 only), task 1 over HTTP
through the shared `inferencegym serve` (tests/served.py).
"""

from __future__ import annotations

import itertools
import math
import types

import jax
import numpy as np
import pytest

import inferencegym_jax as ig
from inferencegym_jax import graders
from inferencegym_jax.actions import KNOBS
from inferencegym_jax.server import core as core_module

TASK3 = "InferenceGym-Task3-v1"
FIELDS = (*graders.METRIC_FIELDS, "offered_tokens")  # every number of a record but the knobs
# A plausible interval of task 3 [tokens, requests, $]; huge values are put in its place.
BASE = {"good_tokens": 900.0, "output_tokens": 1000.0, "slo_violations": 2.0, "admitted": 12.0, "completed": 11.0,
        "timeouts": 1.0, "failed": 0.0, "oom": 0.0, "cost_usd": 0.004, "offered_tokens": 1200.0}


def record(action: dict[str, float], **values: float) -> dict:
    """A grader record (core.log_record's shape) of BASE with `values` in place."""
    numbers = {**BASE, **values}
    return {"metrics": {f: numbers[f] for f in graders.METRIC_FIELDS}, "action": action,
            "offered_tokens": numbers["offered_tokens"]}


@pytest.fixture(scope="module")
def task3():
    """(core with only task 3's grader, the task's default action, its params)."""
    _, params = ig.make(TASK3)
    core = core_module.ServerCore.__new__(core_module.ServerCore)  # only the grader: no pool
    core.pools = {TASK3: types.SimpleNamespace(params=params)}
    core._graders = {TASK3: core._grader_program(TASK3)}
    action = dict(zip(KNOBS, np.asarray(params.default_action.as_vector()).tolist()))
    return core, action, params


def assert_finite(answer: dict) -> None:
    numbers = [answer["score"], answer["served_fraction"], answer["slo_attainment"], answer["oom_free"],
               answer["cost_per_1k"], *answer["breakdown"].values()]
    assert all(isinstance(x, float) and math.isfinite(x) for x in numbers), answer
    assert "nan" not in answer["feedback"], answer["feedback"]


def test_a_plausible_log_grades_bit_for_bit_as_the_librarys_float32_program(task3):
    core, action, params = task3
    rng = np.random.default_rng(0)
    log = [record(action, **{f: float(v) for f, v in zip(FIELDS, rng.uniform(0, 1000, len(FIELDS)))})
           for _ in range(37)]
    log = [{**r, "metrics": {**r["metrics"], "oom": 0.0}} for r in log]
    padded = np.zeros((1, core_module.MAX_LOG_INTERVALS), np.float32)  # the server's padding, as before

    def column(values):
        out = padded.copy()
        out[0, :len(values)] = values
        return out

    traj = {"metrics": {f: column([r["metrics"][f] for r in log]) for f in graders.METRIC_FIELDS},
            "action": {k: column([r["action"][k] for r in log]) for k in KNOBS},
            "offered_tokens": column([r["offered_tokens"] for r in log]),
            "valid": np.arange(core_module.MAX_LOG_INTERVALS)[None] < len(log)}
    expected = jax.jit(lambda t: graders.grade(t, params, TASK3))(traj)
    answer = core.grade(TASK3, log)
    assert answer["score"] == float(expected.score[0])
    assert answer["breakdown"] == {k: float(v[0]) for k, v in expected.breakdown.items()}
    assert answer["feedback"] == graders.feedback(expected, TASK3)[0]


def test_values_past_float32_grade_as_their_ratios_say(task3):
    """good_tokens = offered_tokens = 1e39 (above float32's maximum), and two intervals of 3e38
    (whose float32 sum overflows): finite, and the served fraction of the numbers given."""
    core, action, _ = task3
    huge = core.grade(TASK3, [record(action, good_tokens=1e39, offered_tokens=1e39)])
    assert_finite(huge)
    assert huge["served_fraction"] == 1.0
    small = core.grade(TASK3, [record(action, good_tokens=1e3, offered_tokens=1e3)])
    assert huge["breakdown"]["throughput"] == pytest.approx(small["breakdown"]["throughput"], rel=1e-6)
    twice = core.grade(TASK3, [record(action, good_tokens=3e38, offered_tokens=6e38)] * 2)
    assert_finite(twice)
    assert twice["served_fraction"] == pytest.approx(0.5, rel=1e-6)
    edge = core.grade(TASK3, [record(action, good_tokens=1.7e308, offered_tokens=1.7e308, cost_usd=1.7e308,
                                     oom=1.7e308)] * 3)  # float64 sums overflow too: scaled
    assert_finite(edge)
    assert edge["served_fraction"] == 1.0 and edge["oom_free"] == 0.0


def test_every_pair_of_fields_at_1e39_grades_finitely(task3):
    core, action, _ = task3
    for a, b in itertools.combinations_with_replacement(FIELDS, 2):
        assert_finite(core.grade(TASK3, [record(action), record(action, **{a: 1e39, b: 1e39})]))


def test_the_core_refuses_values_that_are_not_finite_counts(task3):
    core, action, _ = task3
    for value, field, where in ((-1.0, "cost_usd", "intervals[1].metrics.cost_usd"),
                                (math.nan, "offered_tokens", "intervals[1].offered_tokens"),
                                (math.inf, "good_tokens", "intervals[1].metrics.good_tokens")):
        with pytest.raises(ValueError, match=r"^" + where.replace("[", r"\[").replace("]", r"\]")):
            core.grade(TASK3, [record(action), record(action, **{field: value})])


@pytest.fixture()
def served_http(request):
    """The shared server's client (tests/served.py), skipped without the [server] extra."""
    pytest.importorskip("openenv", reason="the [server] extra is not installed")
    return request.getfixturevalue("http")


def test_the_grader_route_never_answers_a_null_score(served_http):
    """Over HTTP on the shared server's task 1: the issue's inputs answer 200 with a number."""
    http = served_http
    task = http.get("/tasks").json()["tasks"][0]
    action = task["default_action"]
    bodies = [[record(action, good_tokens=1e39, offered_tokens=1e39)],
              [record(action, good_tokens=3e38, offered_tokens=3e38)] * 2]
    bodies += [[record(action, **{a: 1e39, b: 1e39})] for a, b in itertools.combinations(FIELDS, 2)]
    for intervals in bodies:
        answer = http.post("/grader", json={"task_id": task["id"], "intervals": intervals})
        assert answer.status_code == 200, answer.text
        assert_finite(answer.json())
