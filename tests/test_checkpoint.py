"""Checkpoints: stop-and-resume is bit-identical, writes are atomic, bad checkpoints load nothing."""

from __future__ import annotations

import chex
import jax
import numpy as np
import pytest

from training import probes
from training.checkpoint import FILENAME, load_checkpoint, read_config, save_checkpoint
from training.config import PPOConfig, toml_value
from training.loop import read_metrics, run_training
from training.ppo import make_train

CONFIG = PPOConfig(num_envs=8, num_steps=8, num_updates=6, update_epochs=2, num_minibatches=2, checkpoint_every=2)


def _leaves_equal(a, b) -> bool:
    def data(x):
        return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)

    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(data(x), data(y)) for x, y in zip(la, lb))


@pytest.fixture(scope="module")
def trainer():
    return make_train(CONFIG, probes.ObservationReward())


def test_stop_and_resume_is_bit_identical(trainer, tmp_path):
    full, _ = jax.jit(trainer.train)(trainer.root_key())  # the whole run as one program
    uninterrupted, rows = run_training(trainer, tmp_path / "a", progress=False)
    assert _leaves_equal(full, uninterrupted)

    stopped, first = run_training(trainer, tmp_path / "b", progress=False, stop_after=4)
    assert int(stopped.update) == 4 and len(first) == 4
    # What a run killed mid-write leaves: a checkpoint's temporary file, a metrics row cut short.
    (tmp_path / "b" / f".{FILENAME}-k1ll3d.tmp").write_bytes(b"half a checkpoint")
    with (tmp_path / "b" / "metrics.csv").open("a") as f:
        f.write("5,40,0.12")
    resumed, second = run_training(trainer, tmp_path / "b", resume=True, progress=False)
    assert int(resumed.update) == 6 and len(second) == 2
    assert _leaves_equal(resumed, uninterrupted)  # params, optimiser, normalisers, envs, key
    metrics = read_metrics(tmp_path / "b")
    assert [int(r["update"]) for r in metrics] == [1, 2, 3, 4, 5, 6]
    assert [r["reward"] for r in metrics] == pytest.approx([r["reward"] for r in rows])
    assert read_config(tmp_path / "b") == CONFIG
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [FILENAME, "metrics.csv"]  # no temp files


def _serving_config(**changes):
    from inferencegym_jax.training_setup import load_config

    return load_config("ppo_task3", num_envs=4, num_steps=2, num_minibatches=1, actor_widths=[8], critic_widths=[8],
                       task="InferenceGym-Task3-v0", **changes)


def test_round_trip_of_a_real_task_state(tmp_path):
    from inferencegym_jax import training_setup

    config = _serving_config()
    trainer = training_setup.make_train(config)
    runner = trainer.jit_init(trainer.root_key())
    save_checkpoint(tmp_path, trainer, runner)
    loaded = load_checkpoint(tmp_path, trainer)
    chex.assert_trees_all_equal_structs(loaded, runner)
    assert _leaves_equal(loaded, runner)
    assert jax.dtypes.issubdtype(loaded.key.dtype, jax.dtypes.prng_key)
    # The checkpoint holds both parts of the config as one flat table, as before the split.
    assert training_setup.read_config(tmp_path) == config and read_config(tmp_path) == config.ppo
    other = training_setup.make_train(config.replace(history_windows=2))
    with pytest.raises(ValueError, match=r"different config: history_windows: 0 \(checkpoint\) != 2 \(requested\)"):
        load_checkpoint(tmp_path, other)
    with pytest.raises(ValueError, match="rejects: .*'action_mode'.* are not PPOConfig keys.*training_setup"):
        load_checkpoint(tmp_path, make_train(config.ppo, trainer.env, trainer.env_params))


def test_a_checkpoint_written_before_the_split_loads(tmp_path):
    """Before PPOConfig lost its serving keys, a checkpoint's config was one flat table of every
    key (task, action_mode, ... among the PPO keys); one written before `imitation_samples`
    existed lacks it and reads back with its default. Such a record loads unchanged."""
    from flax import serialization

    from inferencegym_jax import training_setup
    from training.checkpoint import record_digest

    config = _serving_config(default_logit=1.0)
    trainer = training_setup.make_train(config)
    runner = trainer.jit_init(trainer.root_key())
    save_checkpoint(tmp_path, trainer, runner)
    path = tmp_path / FILENAME
    record = serialization.msgpack_restore(path.read_bytes())
    old = {**config.setup.to_dict(), **config.ppo.to_dict()}  # the old field order: task first
    old.pop("imitation_samples")
    record["config"] = "".join(f"{k} = {toml_value(v)}  # doc\n" for k, v in old.items())
    record["sha256"] = record_digest(record)
    path.write_bytes(serialization.msgpack_serialize(record))
    assert training_setup.read_config(tmp_path) == config
    assert _leaves_equal(load_checkpoint(tmp_path, trainer), runner)


@pytest.fixture
def saved(trainer, tmp_path):
    runner = trainer.jit_init(trainer.root_key())
    save_checkpoint(tmp_path, trainer, runner)
    return tmp_path


def test_corrupt_checkpoints_fail_clearly(trainer, saved):
    path = saved / FILENAME
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the payload
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt"):
        load_checkpoint(saved, trainer)
    path.write_bytes(bytes(data[: len(data) // 3]))  # truncated
    with pytest.raises(ValueError, match="corrupt"):
        load_checkpoint(saved, trainer)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt|not a inferencegym-ppo-checkpoint"):
        load_checkpoint(saved, trainer)
    with pytest.raises(ValueError, match="no checkpoint"):
        load_checkpoint(saved / "elsewhere", trainer)


def test_mismatched_checkpoints_fail_naming_the_difference(saved):
    other = make_train(CONFIG.replace(num_envs=16), probes.ObservationReward())
    with pytest.raises(ValueError, match=r"different config: num_envs: 8 \(checkpoint\) != 16 \(requested\)"):
        load_checkpoint(saved, other)
    other_env = make_train(CONFIG, probes.ObservationReward(horizon=3))
    with pytest.raises(ValueError, match="different env params"):
        load_checkpoint(saved, other_env)
    with pytest.raises(ValueError, match="no checkpoint"):
        run_training(other, saved / "empty", resume=True, progress=False)


def test_checkpoints_of_an_older_runner_state_fail_clearly(trainer, saved):
    """A checkpoint whose RunnerState has a field this program's lacks (config_idx, the knobs in
    force that RunnerState carried before the action layouts moved into env wrappers) loads
    nothing and says so."""
    from flax import serialization

    from training.checkpoint import record_digest

    path = saved / FILENAME
    record = serialization.msgpack_restore(path.read_bytes())
    state = serialization.msgpack_restore(record["payload"])
    state["config_idx"] = np.zeros((CONFIG.num_envs, 2), np.int32)
    record["payload"] = serialization.msgpack_serialize(state)
    record["sha256"] = record_digest(record)
    path.write_bytes(serialization.msgpack_serialize(record))
    assert read_config(saved) == CONFIG  # the header is fine
    with pytest.raises(ValueError, match=r"does not match this program's state: .*config_idx"):
        load_checkpoint(saved, trainer)


def test_saving_removes_only_the_checkpoints_stale_temporary_files(trainer, saved):
    stale = [saved / f".{FILENAME}-{tag}.tmp" for tag in ("a1b2c3", "zz")]
    others = [saved / ".metrics.csv-a1b2c3.tmp", saved / f"{FILENAME}.tmp", saved / "notes.txt"]
    for path in stale + others:
        path.write_bytes(b"left by a killed run")
    save_checkpoint(saved, trainer, trainer.jit_init(trainer.root_key()))
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in others)
    assert int(load_checkpoint(saved, trainer).update) == 0
