"""examples/quickstart.ipynb runs top to bottom in a Jupyter kernel (nbclient), against the package
the tests import, and shows what it promises: the graded tables, the reward curve, the episode.

The kernel starts in a temporary folder (the notebook writes its run there), with PYTHONPATH made
absolute, so a checkout run with PYTHONPATH=. imports the checkout and an installed run imports
site-packages (checked in the kernel when INFERENCEGYM_REQUIRE_INSTALLED is set, as conftest does
here). A cell after the notebook's "parameters" cell (the papermill convention) grades one
baseline (best_static, the reference of the paired columns) instead of four, which saves three
compiled evaluation programs; everything else runs as a user runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

# The slow tier (scripts/run_tests.sh --slow, which CI runs): the whole notebook in a Jupyter kernel.
pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OVERRIDE = """
import os
import inferencegym_jax

if os.environ.get("INFERENCEGYM_REQUIRE_INSTALLED"):
    assert "site-packages" in inferencegym_jax.__file__, inferencegym_jax.__file__
print("package:", inferencegym_jax.__file__)
BASELINE_NAMES = ["best_static"]
"""


def _parameters_cell(notebook) -> int:
    tagged = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1, "the notebook needs one cell tagged 'parameters'"
    return tagged[0]


def _texts(cell) -> str:
    """Everything a cell printed or returned as text."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _images(cells) -> list[str]:
    return [o["data"]["image/png"] for c in cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]


def test_the_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert notebook.metadata.kernelspec.name == "python3"


def test_the_quickstart_notebook_runs(tmp_path, monkeypatch):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    at = _parameters_cell(notebook) + 1
    notebook.cells.insert(at, nbformat.v4.new_code_cell(OVERRIDE.strip(), id="test-override"))
    if os.environ.get("PYTHONPATH"):
        absolute = [str(Path(p).resolve()) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(absolute))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    cells = notebook.cells
    assert "site-packages" in _texts(cells[at]) or not os.environ.get("INFERENCEGYM_REQUIRE_INSTALLED")
    tables = [_texts(c) for c in cells if "episodes" in _texts(c) and "score" in _texts(c)]
    assert len(tables) == 2, tables  # the baselines' table, then the graded one with ppo
    assert "best_static" in tables[0] and "ppo" not in tables[0]
    assert "best_static" in tables[1] and "ppo" in tables[1]
    assert "minus_best_static" in tables[1] and "paired_ci95" in tables[1]  # PPO paired with best_static
    printed = "".join(_texts(c) for c in cells)
    assert "100 updates, 204,800 env steps" in printed and "ppo, held-out episode 0: score " in printed
    assert len(_images(cells)) == 2  # the reward curve and the episode
    run = tmp_path / "runs" / "quickstart"
    for name in ("reward_curve.png", "episode.png"):
        assert (run / name).read_bytes().startswith(PNG_SIGNATURE), name
    assert (run / "checkpoint.msgpack").is_file() and (run / "metrics.csv").is_file()
