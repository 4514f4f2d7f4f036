"""The project's files: atomic writes, and the shipped `data/` and `configs/` folders.

Atomic writes: a reader sees the old file or the new one, never half of one.

Every file the project writes (checkpoints, run records, generated data, tables) goes through
`atomic_write_bytes`: the bytes go to a temporary file in the target's folder, are flushed to
disk, and the temporary file is renamed over the target (`os.replace`, atomic on POSIX within
one file system). On any error the temporary file is removed and the target is untouched.

A process killed mid-write (SIGKILL, power loss) cannot remove its temporary file: it stays in
the folder as `.<name>-<random>.tmp` (`temp_file_glob`). `remove_stale_temp_files(path)` removes
those of one target; writers that own their folder (checkpoints) call it before writing.

The shipped folders (`shipped`): pyproject.toml installs the repository's `data/` and `configs/`
as the subpackages `inferencegym_jax._data` and `inferencegym_jax._configs`. A Python started in a checkout
(`python -c ...` in the repository root) imports `inferencegym_jax` from the source tree,
where those subpackages do not exist; there the folders are read from the repository itself.
"""

from __future__ import annotations

import glob
import json
import os
import stat
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

TEMP_SUFFIX = ".tmp"


def _temp_prefix(path: Path) -> str:
    """The name prefix of `atomic_write_bytes`' temporary files for `path`: ".<name>-"."""
    return f".{path.name}-"


def temp_file_glob(path: str | os.PathLike) -> str:
    """The glob pattern (relative to `path`'s folder) of the temporary files that writes of
    `path` make: ".<name>-*.tmp"."""
    return f"{glob.escape(_temp_prefix(Path(path)))}*{TEMP_SUFFIX}"


def remove_stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files that interrupted writes of `path` left in its folder; returns
    them. Only for a target no other process is writing at the same time (its temporary file
    would be removed under it, and its write would fail)."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    stale = sorted(path.parent.glob(temp_file_glob(path)))
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


def _mode_for(path: Path) -> int:
    """The permission bits the new file gets: the old file's, or what a plain open() would give."""
    if path.exists():
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically (creating its folder); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.chmod(tmp, _mode_for(path))  # mkstemp creates the file owner-only
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, payload: Any, *, indent: int = 2, **dumps_kwargs: Any) -> Path:
    """Write `payload` as JSON to `path` atomically (a trailing newline included)."""
    return atomic_write_text(path, json.dumps(payload, indent=indent, **dumps_kwargs) + "\n")


def shipped(folder: Literal["data", "configs"]) -> Traversable:
    """The installed `data/` or `configs/` folder (the checkout's when run from source)."""
    if folder not in ("data", "configs"):
        raise ValueError(f"folder={folder!r} is not one of ['configs', 'data']")
    try:
        return resources.files(f"inferencegym_jax._{folder}")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / folder
