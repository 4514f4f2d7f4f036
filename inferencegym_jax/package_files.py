"""The shipped `data/` and `configs/` folders, wherever the package is imported from.

pyproject.toml installs the repository's `data/` and `configs/` as the subpackages
`inferencegym_jax._data` and `inferencegym_jax._configs`. A Python started in a checkout
(`python -c ...` in the repository root) imports `inferencegym_jax` from the source tree,
where those subpackages do not exist; there the folders are read from the repository itself.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal


def shipped(folder: Literal["data", "configs"]) -> Traversable:
    """The installed `data/` or `configs/` folder (the checkout's when run from source)."""
    if folder not in ("data", "configs"):
        raise ValueError(f"folder={folder!r} is not one of ['configs', 'data']")
    try:
        return resources.files(f"inferencegym_jax._{folder}")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / folder
