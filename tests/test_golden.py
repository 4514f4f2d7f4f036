"""Golden trajectories (tests/golden.py): env steps, evaluation episodes and PPO updates under
fixed keys match tests/data/golden.npz to float32 rounding.

A behaviour-preserving change keeps this green. A deliberate change of numbers re-records the
file (`python tests/golden.py`) in a commit of its own that says why.
"""

from __future__ import annotations

import golden
import numpy as np
import pytest


@pytest.fixture(scope="module")
def stored():
    return golden.load()


# In the slow tier (the fast tier's 15 minutes): the second PPO section (ppo-Task3 stays fast) and
# the trace replay on the mixed engine (Task3-v2's sections keep the mixed engine in the fast tier).
SLOW_SECTIONS = frozenset({"ppo-Task1", "env-Task4-v2", "eval-Task4-v2"})


@pytest.mark.parametrize("section", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_SECTIONS else s
                                     for s in sorted(golden.sections())])
def test_section_matches_the_golden_file(section, stored):
    want = golden.stored_section(stored, section)
    assert want, f"no stored arrays for section {section}"
    problems = golden.compare(golden.sections()[section](), want)
    hint = "\n(re-record with `python tests/golden.py --sections ...` only for a deliberate change)"
    assert not problems, "\n".join(problems[:20]) + hint


def test_slow_sections_are_sections():
    assert SLOW_SECTIONS <= set(golden.sections())


def test_compare_catches_a_change():
    """The comparison is not vacuous: a relative change of 1e-4 in one entry, a flipped bool and
    a missing field are all reported."""
    base = {"a": np.linspace(1.0, 2.0, 10, dtype=np.float32), "b": np.zeros(4, bool), "c": np.ones(2, np.float32)}
    changed = {k: v.copy() for k, v in base.items() if k != "c"}
    changed["a"][3] *= 1.0001
    changed["b"][1] = True
    problems = golden.compare(changed, base)
    assert any(p.startswith("a:") for p in problems) and any(p.startswith("b:") for p in problems)
    assert any("no longer recorded" in p for p in problems)
    assert golden.compare({k: v.copy() for k, v in base.items()}, base) == []
