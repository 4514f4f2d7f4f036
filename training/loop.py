"""The host loop: jitted chunks of PPO updates, with metrics, checkpoints, resume and a progress bar.

`Trainer.train(key)` runs a whole run as one program; `run_training` runs the same
`update_step` in jitted chunks of `config.checkpoint_every` updates and, between chunks, appends
to `DIR/metrics.csv` and writes `DIR/checkpoint.msgpack`. Both paths give bit-identical
parameters on CPU (tests/test_checkpoint.py), and so does stopping after N updates and resuming.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from inferencegym_jax.files import atomic_write_text
from training.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from training.ppo import RunnerState, Trainer

METRICS_FILE = "metrics.csv"


def _metrics_rows(trainer: Trainer, first_update: int, metrics: dict[str, Any]) -> list[dict[str, float]]:
    """One metrics.csv row per update of a chunk that started after `first_update` updates."""
    host = {k: np.asarray(v) for k, v in metrics.items()}
    count = len(next(iter(host.values())))
    rows = []
    for i in range(count):
        update = first_update + i + 1
        row: dict[str, float] = {"update": update, "env_steps": update * trainer.config.batch_size}
        row.update({k: float(v[i]) for k, v in sorted(host.items())})
        rows.append(row)
    return rows


def _kept_rows(path: Path, keep_up_to: int) -> list[dict[str, str]]:
    """The rows of an existing CSV up to update `keep_up_to` (a resumed run keeps those); a row
    cut short by a killed write, or unreadable, is dropped."""
    if not path.exists():
        return []
    kept = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                update = int(float(row["update"]))
            except (KeyError, TypeError, ValueError):
                continue
            if update <= keep_up_to and None not in row.values() and None not in row:
                kept.append(row)
    return kept


def _write_rows(path: Path, rows: list[dict[str, float]], keep_up_to: int | None = None) -> None:
    """Append rows to a CSV; with keep_up_to, rewrite it (atomically) with the rows up to that
    update (a fresh or resumed run) followed by `rows`."""
    if keep_up_to is None and path.exists():
        with path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=list(rows[0]) if rows else []).writerows(rows)
        return
    kept = _kept_rows(path, keep_up_to) if keep_up_to is not None else []
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else [])
    writer.writeheader()
    writer.writerows(kept)
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue())


def read_metrics(directory: str | Path) -> list[dict[str, float]]:
    """DIR/metrics.csv as a list of rows of floats."""
    with (Path(directory) / METRICS_FILE).open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _start_state(trainer: Trainer, out: Path | None, resume: bool, initial: RunnerState | None) -> RunnerState:
    """`initial`, else out's checkpoint (resume: ValueError when there is none or it does not
    match), else a fresh init."""
    if initial is not None:
        return initial
    if resume:
        if out is None or not checkpoint_path(out).exists():
            raise ValueError(f"--resume: no checkpoint in {out}")
        return load_checkpoint(out, trainer)
    return trainer.jit_init(trainer.root_key(), trainer.default_hparams())


def run_training(
    trainer: Trainer,
    out_dir: str | Path | None = None,
    *,
    resume: bool = False,
    stop_after: int | None = None,
    progress: bool = True,
    on_chunk: Callable[[RunnerState, list[dict[str, float]]], None] | None = None,
    initial: RunnerState | None = None,
) -> tuple[RunnerState, list[dict[str, float]]]:
    """Train in chunks of `config.checkpoint_every` updates, checkpointing between chunks.

    Args:
      out_dir: where metrics.csv and checkpoint.msgpack go (None: keep nothing on disk).
      resume: continue from out_dir's checkpoint (ValueError if there is none or it does not
        match; nothing is written then); without it an existing checkpoint is overwritten.
      stop_after: stop once this many updates are done (as if interrupted); None runs all.
      progress: show a tqdm bar over updates.
      initial: start from this state (a checkpoint the caller has already loaded and checked)
        instead of a fresh init or out_dir's checkpoint; metrics.csv keeps its rows up to it.

    Returns the final RunnerState and the metric rows of the updates run in this call.
    """
    from tqdm.auto import tqdm

    config = trainer.config
    hp = trainer.default_hparams()
    out = Path(out_dir) if out_dir is not None else None
    runner = _start_state(trainer, out, resume, initial)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    done = int(runner.update)
    target = config.num_updates if stop_after is None else min(stop_after, config.num_updates)
    all_rows: list[dict[str, float]] = []
    with tqdm(total=config.num_updates, initial=done, unit="update", disable=not progress,
              desc=f"PPO {trainer.env_id}") as bar:
        while done < target:
            n = min(config.checkpoint_every, target - done)
            t0 = time.perf_counter()
            runner, metrics = trainer.jit_run_chunk(runner, hp, np.int32(n))
            metrics = {k: v[:n] for k, v in metrics.items()}
            jax.block_until_ready(runner)
            rows = _metrics_rows(trainer, done, metrics)
            seconds = time.perf_counter() - t0
            for row in rows:
                row["chunk_seconds"] = seconds
            if out is not None:
                # A fresh or resumed run rewrites the CSV once, keeping rows up to where it started.
                _write_rows(out / METRICS_FILE, rows, keep_up_to=done if not all_rows else None)
                save_checkpoint(out, trainer, runner)
            done += n
            all_rows.extend(rows)
            if on_chunk is not None:
                on_chunk(runner, rows)
            bar.update(n)
            bar.set_postfix(reward=f"{rows[-1]['reward']:+.3f}", entropy=f"{rows[-1]['entropy']:.2f}")
    return runner, all_rows
