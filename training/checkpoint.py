"""Checkpoints of a PPO run: one msgpack file, written atomically, verified on load.

`DIR/checkpoint.msgpack` holds a header (format, version, resolved config as TOML, env id, a
fingerprint of the env params, updates done, SHA-256 of the payload) and the payload: the whole
`RunnerState` (network and optimiser state, observation and reward normalisers, env states,
PRNG key, update counter) as a flax state dict. It is written with
`inferencegym_jax.files.atomic_write_bytes` (a temporary file in DIR, flushed to disk, renamed
over the old one), so a crash leaves the previous checkpoint or the new one, never half of one.

`load_checkpoint` either returns a complete state or raises `ValueError` saying what is wrong
(not a checkpoint, corrupt, written by another config or task, shapes that do not match); it
loads nothing partially.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from inferencegym_jax.files import atomic_write_bytes
from training.config import PPOConfig, from_dict, to_dict

FILENAME = "checkpoint.msgpack"
FORMAT = "inferencegym-ppo-checkpoint"
VERSION = 1


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_host(tree: Any) -> Any:
    """numpy leaves, PRNG keys as their uint32 key data."""
    return jax.tree_util.tree_map(lambda x: np.asarray(jax.random.key_data(x) if _is_key(x) else x), tree)


def env_fingerprint(env_params: Any) -> str:
    """SHA-256 of the env params' leaves and static fields: changes when a task is re-tuned."""
    digest = hashlib.sha256()
    leaves, treedef = jax.tree_util.tree_flatten(env_params)
    digest.update(str(treedef).encode())
    for leaf in leaves:
        a = np.asarray(leaf)
        digest.update(str((a.shape, a.dtype)).encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def checkpoint_path(directory: str | Path) -> Path:
    return Path(directory) / FILENAME


def save_checkpoint(directory: str | Path, trainer: Any, runner: Any) -> Path:
    """Write `runner` (a RunnerState of `trainer`) to DIR/checkpoint.msgpack atomically (DIR created)."""
    payload = serialization.msgpack_serialize(serialization.to_state_dict(_to_host(runner)))
    record = {
        "format": FORMAT,
        "version": VERSION,
        "config": trainer.config.to_toml(),
        "env_id": getattr(trainer.env, "env_id", type(trainer.env).__name__),
        "env_fingerprint": env_fingerprint(trainer.env_params),
        "update": int(runner.update),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload": payload,
    }
    return atomic_write_bytes(checkpoint_path(directory), serialization.msgpack_serialize(record))


def _read_record(directory: str | Path) -> dict[str, Any]:
    path = checkpoint_path(directory)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    try:
        record = serialization.msgpack_restore(path.read_bytes())
    except Exception as err:  # msgpack raises several types on garbage
        raise ValueError(f"checkpoint {path} is corrupt (not readable msgpack: {err})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file")
    if record.get("version") != VERSION:
        raise ValueError(f"checkpoint {path} has version {record.get('version')}, this code reads {VERSION}")
    missing = {"config", "env_id", "env_fingerprint", "update", "sha256", "payload"} - set(record)
    if missing:
        raise ValueError(f"checkpoint {path} is corrupt: missing {sorted(missing)}")
    if hashlib.sha256(record["payload"]).hexdigest() != record["sha256"]:
        raise ValueError(f"checkpoint {path} is corrupt: payload checksum mismatch")
    return record


def read_config(directory: str | Path) -> PPOConfig:
    """The config a checkpoint was written with (validated)."""
    record = _read_record(directory)
    return from_dict(tomllib.loads(record["config"]))


def load_checkpoint(directory: str | Path, trainer: Any) -> Any:
    """The RunnerState saved in DIR, checked against `trainer` (config, env params, shapes).

    Raises:
      ValueError: missing, corrupt, or mismatched checkpoint; nothing is loaded.
    """
    path = checkpoint_path(directory)
    record = _read_record(directory)
    saved = from_dict(tomllib.loads(record["config"]))
    if saved != trainer.config:
        a, b = to_dict(saved), to_dict(trainer.config)
        diffs = ", ".join(f"{k}: {a[k]!r} (checkpoint) != {b[k]!r} (requested)" for k in a if a[k] != b[k])
        raise ValueError(f"checkpoint {path} was written by a different config: {diffs}")
    if record["env_fingerprint"] != env_fingerprint(trainer.env_params):
        raise ValueError(
            f"checkpoint {path} was written for different env params ({record['env_id']}); "
            "the task was re-tuned or overridden since"
        )
    template = jax.eval_shape(trainer.init, trainer.root_key())
    try:
        state_dict = serialization.msgpack_restore(record["payload"])
        host_template = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(jax.eval_shape(jax.random.key_data, x).shape, jnp.uint32)
            if _is_key(x) else x, template)
        restored = serialization.from_state_dict(host_template, state_dict)
    except Exception as err:
        raise ValueError(f"checkpoint {path} does not match this program's state: {err}") from None
    want, treedef = jax.tree_util.tree_flatten(host_template)
    got, got_def = jax.tree_util.tree_flatten(restored)
    if got_def != treedef:
        raise ValueError(f"checkpoint {path} does not match this program's state structure")
    for i, (w, g) in enumerate(zip(want, got)):
        g = np.asarray(g)
        if g.shape != tuple(w.shape) or g.dtype != w.dtype:
            raise ValueError(
                f"checkpoint {path}: leaf {i} has shape {g.shape} {g.dtype}, expected {tuple(w.shape)} {w.dtype}")
    keys = jax.tree_util.tree_leaves(jax.tree_util.tree_map(_is_key, template))
    leaves = [jax.random.wrap_key_data(jnp.asarray(g)) if k else jnp.asarray(g) for g, k in zip(got, keys)]
    return jax.tree_util.tree_unflatten(treedef, leaves)
