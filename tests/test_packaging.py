"""The shipped data/ and configs/ folders are found from an install and from a checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import inferencegym_jax as ig
from inferencegym_jax.files import shipped

CHECKOUT = Path(__file__).resolve().parents[1]


def test_installed_package_carries_its_data_and_configs():
    assert shipped("data").joinpath("calibration.json").is_file()
    assert shipped("data").joinpath("grader_constants.json").is_file()
    tasks = sorted(p.name for p in shipped("configs").joinpath("tasks").iterdir() if p.name.endswith(".toml"))
    assert len(tasks) == len(ig.registered_envs())


def test_unknown_folder_is_a_value_error():
    with pytest.raises(ValueError, match="folder='weights' is not one of"):
        shipped("weights")  # type: ignore[arg-type]


def test_python_started_in_the_checkout_reads_the_checkout_folders():
    """`python -c` in the repository root imports the source tree, which has no `_data`."""
    script = (
        "import inferencegym_jax as ig, jax\n"
        "print(ig.__file__)\n"
        "for env_id in ig.registered_envs():\n"
        "    env, params = ig.make(env_id)\n"
        "    env.reset(jax.random.key(0), params)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=CHECKOUT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0].startswith(str(CHECKOUT))


def test_every_code_package_is_listed_for_installation():
    """pyproject's packages list is explicit (data folders are mapped into the package), so a new
    package folder must be added to it or the installed package silently lacks it."""
    import tomllib

    listed = set(tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(CHECKOUT).parts)
             for top in ("inferencegym_jax", "training") for p in (CHECKOUT / top).rglob("__init__.py")}
    assert found - listed == set(), f"add to pyproject's packages: {sorted(found - listed)}"
