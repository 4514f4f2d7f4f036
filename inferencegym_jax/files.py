"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file the project writes (checkpoints, run records, generated data, tables) goes through
`atomic_write_bytes`: the bytes go to a temporary file in the target's folder, are flushed to
disk, and the temporary file is renamed over the target (`os.replace`, atomic on POSIX within
one file system). On any error the temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
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
