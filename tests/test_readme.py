"""The README's Python snippets run as written against the installed package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_a_quick_start():
    blocks = python_blocks()
    assert blocks and "ig.make(" in blocks[0]


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index, capsys):
    exec(compile(python_blocks()[index], f"README.md[python {index}]", "exec"), {})


def test_observation_table_is_current():
    from inferencegym_jax.observation import Observation

    assert Observation.describe() in README.read_text(), "paste Observation.describe() into README.md"
