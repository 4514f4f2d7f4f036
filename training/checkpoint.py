"""Checkpoints of a PPO run: one msgpack file, written atomically, verified on load.

`DIR/checkpoint.msgpack` is a msgpack map (format version 2):

| field | type | what |
|---|---|---|
| format | str | "inferencegym-ppo-checkpoint" |
| version | int | `VERSION`; another version is a ValueError (version 1 signed only the payload) |
| config | str | the resolved `PPOConfig` as TOML, then the trainer's `env_config` keys (a serving setup's) |
| env_id | str | the env the run trained on |
| env_fingerprint | str | SHA-256 of the env params (`env_fingerprint`): changes when a task is re-tuned |
| update | int | PPO updates done |
| payload | bytes | the whole `RunnerState` as a msgpack flax state dict (below) |
| sha256 | str | `record_digest`: SHA-256 over every field above, header and payload |

The payload holds the network and optimiser state, the observation and reward normalisers, the
env states, the PRNG key and the update counter. Because the checksum covers the header, an
edited or bit-flipped header (a config value, the update count) is rejected like a damaged
payload. The file is written with `inferencegym_jax.files.atomic_write_bytes` (a temporary file
in DIR, flushed to disk, renamed over the old one), so a crash leaves the previous checkpoint or
the new one, never half of one; the next save removes the temporary files such a crash left.

`load_checkpoint` either returns a complete state or raises `ValueError` saying what is wrong
(no checkpoint, not a checkpoint, another format version, corrupt, written for another task or
config, shapes that do not match); it loads nothing partially.
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

from inferencegym_jax.env import params_fingerprint
from inferencegym_jax.files import atomic_write_bytes, remove_stale_temp_files
from training.config import PPOConfig, field_names, from_dict, toml_value

FILENAME = "checkpoint.msgpack"
FORMAT = "inferencegym-ppo-checkpoint"
VERSION = 2

# The fields `record_digest` signs, in signing order, with their exact types (bool is not an int here).
SIGNED_FIELDS: dict[str, type] = {
    "format": str,
    "version": int,
    "config": str,
    "env_id": str,
    "env_fingerprint": str,
    "update": int,
    "payload": bytes,
}


def _is_key(x: Any) -> bool:
    """Whether `x` is (the shape of) a new-style PRNG key array."""
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_host(tree: Any) -> Any:
    """numpy leaves, PRNG keys as their uint32 key data."""
    return jax.tree_util.tree_map(lambda x: np.asarray(jax.random.key_data(x) if _is_key(x) else x), tree)


def env_fingerprint(env_params: Any) -> str:
    """SHA-256 of the env params' leaves and static fields (`env.params_fingerprint`, which also
    makes equal envs compare equal): changes when a task is re-tuned."""
    return params_fingerprint(env_params)


def record_digest(record: dict[str, Any]) -> str:
    """SHA-256 (hex) of a record's `SIGNED_FIELDS`, each as "name:length:" and its bytes
    (bytes as they are, text as UTF-8, integers in decimal). The fields must have their types."""
    digest = hashlib.sha256()
    for name in SIGNED_FIELDS:
        value = record[name]
        data = value if isinstance(value, bytes) else str(value).encode("utf-8")
        digest.update(f"{name}:{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def config_toml(trainer: Any) -> str:
    """The run's config as one flat TOML table: the PPOConfig's keys, then its env_config's (the
    serving setup's: task, action_mode, ...), as checkpoints before the split held them all."""
    text = trainer.config.to_toml()
    if trainer.env_config is not None:
        text += "".join(f"{k} = {toml_value(v)}\n" for k, v in trainer.env_config.to_dict().items())
    return text


def checkpoint_path(directory: str | Path) -> Path:
    """DIR/checkpoint.msgpack."""
    return Path(directory) / FILENAME


def save_checkpoint(directory: str | Path, trainer: Any, runner: Any) -> Path:
    """Write `runner` (a RunnerState of `trainer`) to DIR/checkpoint.msgpack atomically (DIR
    created), first removing the temporary files an interrupted earlier save left in DIR."""
    record: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "config": config_toml(trainer),
        "env_id": getattr(trainer.env, "env_id", type(trainer.env).__name__),
        "env_fingerprint": env_fingerprint(trainer.env_params),
        "update": int(runner.update),
        "payload": serialization.msgpack_serialize(serialization.to_state_dict(_to_host(runner))),
    }
    record["sha256"] = record_digest(record)
    path = checkpoint_path(directory)
    remove_stale_temp_files(path)
    return atomic_write_bytes(path, serialization.msgpack_serialize(record))


def _check_version(path: Path, version: Any) -> None:
    """ValueError unless the record's format version is the one this program reads."""
    if type(version) is not int:
        raise ValueError(f"checkpoint {path} is corrupt: format version {version!r} is not an integer")
    if version > VERSION:
        raise ValueError(f"checkpoint {path} has format version {version}, newer than this program reads "
                         f"({VERSION}): upgrade inferencegym_jax to load it")
    if version < VERSION:
        raise ValueError(f"checkpoint {path} has format version {version}, older than this program reads "
                         f"({VERSION}; version 1 checksummed only the payload): train it again")


def _check_fields(path: Path, record: dict[str, Any]) -> None:
    """ValueError ("corrupt") for missing fields, fields of the wrong type or a checksum mismatch."""
    missing = sorted((set(SIGNED_FIELDS) | {"sha256"}) - set(record))
    if missing:
        raise ValueError(f"checkpoint {path} is corrupt: missing fields {missing}")
    for name, kind in {**SIGNED_FIELDS, "sha256": str}.items():
        if type(record[name]) is not kind:
            raise ValueError(f"checkpoint {path} is corrupt: field {name!r} is a {type(record[name]).__name__}, "
                             f"not a {kind.__name__}")
    if record_digest(record) != record["sha256"]:
        raise ValueError(f"checkpoint {path} is corrupt: checksum mismatch (header or payload damaged or edited)")


def _read_record(directory: str | Path) -> dict[str, Any]:
    """The checkpoint's record, every field present, typed and covered by a matching checksum."""
    path = checkpoint_path(directory)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    try:
        record = serialization.msgpack_restore(path.read_bytes())
    except Exception as err:  # msgpack raises several types on garbage
        raise ValueError(f"checkpoint {path} is corrupt (not readable msgpack: {err})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file (or its header is corrupt)")
    _check_version(path, record.get("version"))
    _check_fields(path, record)
    return record


def read_header(directory: str | Path) -> dict[str, Any]:
    """The verified header of DIR's checkpoint: every field but the payload (ValueError as
    `load_checkpoint` for a missing or corrupt one)."""
    return {k: v for k, v in _read_record(directory).items() if k != "payload"}


def _raw_config_of(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """The flat config table in a verified record; ValueError when it is not TOML."""
    try:
        return tomllib.loads(record["config"])
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"checkpoint {path} is corrupt: its config is not TOML ({err})") from None


def _split(path: Path, raw: dict[str, Any]) -> tuple[PPOConfig, dict[str, Any]]:
    """(the PPOConfig of a checkpoint's config table, its other keys: the env_config's)."""
    ppo_keys = field_names(PPOConfig)
    try:
        config = from_dict({k: v for k, v in raw.items() if k in ppo_keys})
    except ValueError as err:
        raise ValueError(f"checkpoint {path} holds a config this program rejects: {err}") from None
    return config, {k: v for k, v in raw.items() if k not in ppo_keys}


def read_raw_config(directory: str | Path) -> dict[str, Any]:
    """The flat config table a checkpoint was written with (checksum verified, not validated):
    the PPOConfig's keys and the env_config's (`inferencegym_jax.training_setup.read_config`
    validates both)."""
    return _raw_config_of(checkpoint_path(directory), _read_record(directory))


def read_config(directory: str | Path) -> PPOConfig:
    """The PPOConfig a checkpoint was written with (checksum verified, validated); the env's
    keys beside it are `read_raw_config`'s."""
    path = checkpoint_path(directory)
    return _split(path, _raw_config_of(path, _read_record(directory)))[0]


def config_differences(a: Any, b: Any, a_name: str, b_name: str) -> str:
    """The keys in which two configs (anything with `to_dict()`) differ: "key: A (a_name) != B (b_name), ..."."""
    x, y = a.to_dict(), b.to_dict()
    return ", ".join(f"{k}: {x.get(k)!r} ({a_name}) != {y.get(k)!r} ({b_name})"
                     for k in {**x, **y} if x.get(k) != y.get(k))


def _check_matches(path: Path, record: dict[str, Any], trainer: Any) -> None:
    """ValueError unless the checkpoint was written for `trainer`'s env, config, env config and env params."""
    saved, env_keys = _split(path, _raw_config_of(path, record))
    if record["env_id"] != trainer.env_id:
        raise ValueError(f"checkpoint {path} was written for task {record['env_id']}, not {trainer.env_id} "
                         "(the task requested)")
    if trainer.env_config is None and env_keys:
        raise ValueError(f"checkpoint {path} holds a config this program rejects: {sorted(env_keys)} are not "
                         "PPOConfig keys, and the env given has no env config (a serving setup's keys: load the "
                         "checkpoint with inferencegym_jax.training_setup)")
    saved_env = None
    if trainer.env_config is not None:
        try:
            saved_env = type(trainer.env_config).from_dict(env_keys)
        except ValueError as err:
            raise ValueError(f"checkpoint {path} holds a config this program rejects: {err}") from None
    if saved != trainer.config:
        raise ValueError(f"checkpoint {path} was written by a different config: "
                         f"{config_differences(saved, trainer.config, 'checkpoint', 'requested')}")
    if saved_env != trainer.env_config:
        raise ValueError(f"checkpoint {path} was written by a different config: "
                         f"{config_differences(saved_env, trainer.env_config, 'checkpoint', 'requested')}")
    if record["env_fingerprint"] != env_fingerprint(trainer.env_params):
        raise ValueError(
            f"checkpoint {path} was written for different env params ({record['env_id']}); "
            "the task was re-tuned or overridden since"
        )


def _host_template(trainer: Any) -> tuple[Any, Any]:
    """(the RunnerState's abstract shape, the same with PRNG keys as their uint32 key data)."""
    template = jax.eval_shape(trainer.init, trainer.root_key())
    host = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(jax.eval_shape(jax.random.key_data, x).shape, jnp.uint32)
        if _is_key(x) else x, template)
    return template, host


def _restore_state(path: Path, payload: bytes, trainer: Any) -> Any:
    """The RunnerState in a verified payload; ValueError when it is not one of this program's."""
    try:
        state_dict = serialization.msgpack_restore(payload)
    except Exception as err:  # msgpack raises several types on garbage
        raise ValueError(f"checkpoint {path} is corrupt: payload not readable ({err})") from None
    if not isinstance(state_dict, dict):
        raise ValueError(f"checkpoint {path} is corrupt: payload is a {type(state_dict).__name__}, not a state dict")
    template, host_template = _host_template(trainer)
    try:
        restored = serialization.from_state_dict(host_template, state_dict)
    except Exception as err:
        raise ValueError(f"checkpoint {path} does not match this program's state: {err}") from None
    want, treedef = jax.tree_util.tree_flatten(host_template)
    got, got_def = jax.tree_util.tree_flatten(restored)
    if got_def != treedef:  # type: ignore[operator]  # jaxlib has no stub for PyTreeDef, which has __ne__
        raise ValueError(f"checkpoint {path} does not match this program's state structure")
    for i, (w, g) in enumerate(zip(want, got)):
        g = np.asarray(g)
        if g.shape != tuple(w.shape) or g.dtype != w.dtype:
            raise ValueError(
                f"checkpoint {path}: leaf {i} has shape {g.shape} {g.dtype}, expected {tuple(w.shape)} {w.dtype}")
    keys = jax.tree_util.tree_leaves(jax.tree_util.tree_map(_is_key, template))
    leaves = [jax.random.wrap_key_data(jnp.asarray(g)) if k else jnp.asarray(g) for g, k in zip(got, keys)]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def load_checkpoint(directory: str | Path, trainer: Any) -> Any:
    """The RunnerState saved in DIR, checked against `trainer` (env, config, env config, env params, shapes).

    Raises:
      ValueError: missing, corrupt, mismatched or other-version checkpoint; nothing is loaded.
    """
    path = checkpoint_path(directory)
    record = _read_record(directory)
    _check_matches(path, record, trainer)
    runner = _restore_state(path, record["payload"], trainer)
    if int(runner.update) != record["update"]:
        raise ValueError(f"checkpoint {path} is corrupt: header says update {record['update']}, "
                         f"the state {int(runner.update)}")
    return runner
