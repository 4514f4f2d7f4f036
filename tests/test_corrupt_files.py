"""Corrupt and mismatched files: every one a clear ValueError (in the CLI, one line and exit
status 2) that loads nothing and, on `--resume`, leaves the run folder as it was.

One tiny trainer (the observation-reward probe env) and one saved checkpoint; every variant is
made from that checkpoint's bytes.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

from inferencegym_jax.cli import main
from inferencegym_jax.training_setup import ServingSetup, TrainConfig
from training import probes
from training.checkpoint import FILENAME, VERSION, load_checkpoint, record_digest, save_checkpoint
from training.config import PPOConfig
from training.ppo import make_train

CONFIG = PPOConfig(num_envs=4, num_steps=4, num_updates=6, update_epochs=1, num_minibatches=1,
                   actor_widths=(8,), critic_widths=(8,), checkpoint_every=1)
# The command line's view of a checkpoint of CONFIG: its keys with the serving setup's defaults.
RUN_CONFIG = TrainConfig(CONFIG, ServingSetup())
UPDATE = 3  # the saved state's update counter


@pytest.fixture(scope="module")
def trainer():
    return make_train(CONFIG, probes.ObservationReward())


@pytest.fixture(scope="module")
def runner(trainer):
    return trainer.jit_init(trainer.root_key()).replace(update=jnp.asarray(UPDATE, jnp.int32))


@pytest.fixture(scope="module")
def good(trainer, runner, tmp_path_factory) -> bytes:
    """The bytes of a valid checkpoint of `runner`."""
    folder = tmp_path_factory.mktemp("good")
    save_checkpoint(folder, trainer, runner)
    assert int(load_checkpoint(folder, trainer).update) == UPDATE
    return (folder / FILENAME).read_bytes()


def resigned(good: bytes, **changes) -> bytes:
    """The checkpoint with header fields changed and its checksum recomputed, as a deliberate
    edit would do it."""
    record = {**serialization.msgpack_restore(good), **changes}
    record["sha256"] = record_digest(record)
    return serialization.msgpack_serialize(record)


def without(good: bytes, field: str) -> bytes:
    """The checkpoint without one field."""
    record = serialization.msgpack_restore(good)
    del record[field]
    return serialization.msgpack_serialize(record)


def edited(good: bytes, old: bytes, new: bytes) -> bytes:
    """The checkpoint's bytes with one unique run of bytes replaced (checksum not recomputed)."""
    assert good.count(old) == 1 and len(old) == len(new)
    return good.replace(old, new)


def flipped(good: bytes, position: int, bit: int = 0) -> bytes:
    data = bytearray(good)
    data[position] ^= 1 << bit
    return bytes(data)


def _payload(good: bytes) -> bytes:
    return serialization.msgpack_restore(good)["payload"]


def variants(good: bytes) -> dict[str, tuple[bytes, str]]:
    """Every corrupt checkpoint of the matrix: name -> (bytes, what the message must say)."""
    out: dict[str, tuple[bytes, str]] = {"empty": (b"", "corrupt")}
    for length in (1, 16, len(good) // 3, len(good) // 2, len(good) - 100, len(good) - 1):
        out[f"truncated to {length} bytes"] = (good[:length], "corrupt|not a inferencegym-ppo-checkpoint")
    payload_at = good.index(_payload(good))
    header_positions = {"config": good.index(b"vf_coef"), "sha256": good.index(b"sha256") + 20,
                        "env_fingerprint": good.index(b"env_fingerprint") + 30}
    for name, at in header_positions.items():
        out[f"bit flipped in the header's {name}"] = (flipped(good, at, 3), "corrupt")
    for fraction in (0.01, 0.5, 0.99):
        out[f"bit flipped in the payload at {fraction:.0%}"] = (
            flipped(good, payload_at + int(fraction * len(_payload(good)))), "corrupt")
    out["vf_coef 0.5 -> 8.5 in the header"] = (edited(good, b"vf_coef = 0.5", b"vf_coef = 8.5"), "checksum")
    out[f"update {UPDATE} -> 1 in the header"] = (
        edited(good, b"\xa6update" + bytes([UPDATE]), b"\xa6update\x01"), "checksum")
    out["update re-signed, disagreeing with the state"] = (resigned(good, update=1), "header says update 1")
    out["newer format version"] = (resigned(good, version=VERSION + 1), "newer than this program reads")
    out["older format version"] = (resigned(good, version=VERSION - 1), "older than this program reads")
    out["version 1 layout"] = (_version_1(good), "format version 1, older")
    for field, value in [("payload", "abc"), ("payload", 7), ("config", 5), ("update", "3"), ("update", True),
                         ("env_fingerprint", b"x")]:
        out[f"{field} = {value!r}"] = (resigned(good, **{field: value}), "corrupt: field")
    for field in ("env_id", "payload", "sha256"):
        out[f"no {field}"] = (without(good, field), "corrupt: missing fields")
    out["payload not msgpack"] = (resigned(good, payload=b"\xc1"), "corrupt: payload not readable")
    out["payload a list"] = (resigned(good, payload=serialization.msgpack_serialize([1, 2])), "corrupt: payload")
    out["record a list"] = (serialization.msgpack_serialize([1, 2]), "not a inferencegym-ppo-checkpoint")
    out["config not TOML"] = (resigned(good, config="lr = = 1"), "corrupt: its config is not TOML")
    out["config unknown key"] = (resigned(good, config="nonsense = 1"), "config this program rejects")
    return out


def _version_1(good: bytes) -> bytes:
    """The checkpoint as format version 1 wrote it: the checksum covers only the payload."""
    import hashlib

    record = serialization.msgpack_restore(good)
    record.update(version=1, sha256=hashlib.sha256(record["payload"]).hexdigest())
    return serialization.msgpack_serialize(record)


def test_every_corrupt_checkpoint_is_a_clear_value_error(trainer, good, tmp_path):
    path = tmp_path / FILENAME
    cases = variants(good)
    assert len(cases) >= 30
    for name, (data, message) in cases.items():
        path.write_bytes(data)
        with pytest.raises(ValueError, match=message) as info:
            load_checkpoint(tmp_path, trainer)
        assert str(tmp_path) in str(info.value), name  # it names the file
        assert path.read_bytes() == data  # loading changes nothing


def test_random_bit_flips_are_all_caught(trainer, good, tmp_path):
    """1,000 single-bit flips anywhere in the file (the issue's experiment): none loads."""
    rng = np.random.default_rng(15)
    path = tmp_path / FILENAME
    for position, bit in zip(rng.integers(0, len(good), 1000), rng.integers(0, 8, 1000)):
        path.write_bytes(flipped(good, int(position), int(bit)))
        with pytest.raises(ValueError):
            load_checkpoint(tmp_path, trainer)


def test_another_tasks_or_configs_checkpoint_names_the_difference(trainer, runner, tmp_path):
    other_task = make_train(CONFIG, probes.ConstantReward(horizon=1))
    save_checkpoint(tmp_path / "task2", other_task, runner)
    with pytest.raises(ValueError, match="written for task ConstantReward, not ObservationReward"):
        load_checkpoint(tmp_path / "task2", trainer)
    other_config = make_train(CONFIG.replace(vf_coef=8.5), probes.ObservationReward())
    save_checkpoint(tmp_path / "vf", other_config, runner)
    with pytest.raises(ValueError, match=r"different config: vf_coef: 8.5 \(checkpoint\) != 0.5 \(requested\)"):
        load_checkpoint(tmp_path / "vf", trainer)


# --- the command line, where it reads these files --------------------------------------------


class Reached(AssertionError):
    """A stand-in for building or training was called: the command got past its checks."""


@pytest.fixture
def no_training(monkeypatch):
    import inferencegym_jax.training_setup
    import training.loop

    def reached(*args, **kwargs):
        raise Reached("the command went on to build or train")

    monkeypatch.setattr(training.loop, "run_training", reached)
    monkeypatch.setattr(inferencegym_jax.training_setup, "make_train", reached)


@pytest.fixture
def run_folder(trainer, runner, tmp_path):
    """A run folder as `train` leaves it after update 3: config.toml, metrics.csv, checkpoint."""
    folder = tmp_path / "run"
    save_checkpoint(folder, trainer, runner)
    (folder / "config.toml").write_text(RUN_CONFIG.to_toml())
    (folder / "metrics.csv").write_text("update,reward\n1,0.1\n2,0.2\n3,0.3\n")
    return folder


def snapshot(folder) -> dict[str, tuple[bytes, int, int]]:
    """Each file's bytes, inode and modification time: a rewrite, even to the same bytes, shows."""
    return {p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def one_line_error(argv: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith("inferencegym: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("name", ["empty", "truncated to 16 bytes", "bit flipped in the header's config",
                                  "vf_coef 0.5 -> 8.5 in the header", "newer format version", "payload = 7"])
def test_corrupt_checkpoint_fails_eval_and_resume_leaving_the_folder(name, good, run_folder, no_training, capsys):
    data, message = variants(good)[name]
    (run_folder / FILENAME).write_bytes(data)
    before = snapshot(run_folder)
    assert "checkpoint" in one_line_error(["eval", "--checkpoint", str(run_folder), "--episodes", "1"], capsys)
    err = one_line_error(["train", "--resume", "--out", str(run_folder)], capsys)
    assert "checkpoint" in err and str(run_folder) in err
    assert snapshot(run_folder) == before


@pytest.mark.parametrize(("argv", "config_toml", "named"), [
    (["--task", "InferenceGym-Task2-v0"], None, ["InferenceGym-Task1-v0", "InferenceGym-Task2-v0", "--task"]),
    ([], RUN_CONFIG.replace(task="InferenceGym-Task2-v0").to_toml(), ["InferenceGym-Task1-v0",
                                                                   "InferenceGym-Task2-v0", "config.toml"]),
    ([], RUN_CONFIG.replace(lr=1e-3).to_toml(), ["config.toml", "lr: 0.001 (config.toml) != 0.0003 (checkpoint)"]),
    ([], "lr = = 3", ["config.toml", "not valid TOML"]),
    (["--set", "vf_coef=8.5"], None, ["vf_coef: 0.5 (checkpoint) != 8.5 (requested)"]),
    (["--updates", "9"], None, ["num_updates: 6 (checkpoint) != 9 (requested)"]),
])
def test_failed_resume_names_both_and_leaves_the_folder(argv, config_toml, named, run_folder, no_training, capsys):
    if config_toml is not None:
        (run_folder / "config.toml").write_text(config_toml)
    before = snapshot(run_folder)
    err = one_line_error(["train", "--resume", "--out", str(run_folder), *argv], capsys)
    assert all(n in err for n in named), err
    assert snapshot(run_folder) == before


@pytest.mark.parametrize("text", ["task = 7", "{not json", '{"scores": {"ppo": [0.5]}}', "\x00\x01\x02"])
@pytest.mark.parametrize("name", ["config.toml", "eval.json"])
def test_corrupt_config_or_eval_file_given_as_config_is_one_line(name, text, tmp_path, no_training, capsys):
    """`--config FILE` reads a TOML config; a corrupt config.toml or an eval.json there is a
    one-line error naming the file, and nothing is written. (The CLI reads eval.json nowhere
    else: `train` only writes it, atomically.)"""
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "run"
    err = one_line_error(["train", "--config", str(path), "--out", str(out)], capsys)
    assert str(path) in err or "config key" in err
    assert not out.exists()


def _trace_bytes(**arrays) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_corrupt_trace_files_are_a_clear_error():
    """A damaged trace file (a damaged installation) names the file; a sound one parses."""
    from inferencegym_jax.files import shipped
    from inferencegym_jax.traffic import traces

    name = next(iter(traces.TRACE_FILES))
    good = shipped("data").joinpath("traces", traces.TRACE_FILES[name]).read_bytes()
    assert len(traces.parse_trace_file(name, good).arrival_s) > 0
    ok = {"arrival_s": np.array([0.0, 1.0]), "prompt_tokens": np.array([5, 6]), "output_tokens": np.array([7, 8]),
          "origin": np.array("")}
    broken = {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "flipped": good[:100] + bytes([good[100] ^ 0xFF]) + good[101:],
        "missing field": _trace_bytes(**{k: v for k, v in ok.items() if k != "output_tokens"}),
        "lengths differ": _trace_bytes(**{**ok, "prompt_tokens": np.array([5])}),
        "unsorted": _trace_bytes(**{**ok, "arrival_s": np.array([1.0, 0.0])}),
        "nan time": _trace_bytes(**{**ok, "arrival_s": np.array([0.0, np.nan])}),
        "zero tokens": _trace_bytes(**{**ok, "output_tokens": np.array([0, 8])}),
    }
    for what, blob in broken.items():
        with pytest.raises(ValueError, match="trace file .* is corrupt") as err:
            traces.parse_trace_file(name, blob)
        assert traces.TRACE_FILES[name] in str(err.value), what
