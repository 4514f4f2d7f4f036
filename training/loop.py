"""The host loop: jitted chunks of PPO updates, with metrics, checkpoints, resume and a progress bar.

`Trainer.train(key)` runs a whole run as one program; `run_training` runs the same
`update_step` in jitted chunks of `config.checkpoint_every` updates and, between chunks, appends
to `DIR/metrics.csv` and writes `DIR/checkpoint.msgpack`. Both paths give bit-identical
parameters on CPU (tests/test_checkpoint.py), and so does stopping after N updates and resuming.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from training.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from training.ppo import RunnerState, Trainer

METRICS_FILE = "metrics.csv"


def _metrics_rows(trainer: Trainer, first_update: int, metrics: dict[str, Any]) -> list[dict[str, float]]:
    host = {k: np.asarray(v) for k, v in metrics.items()}
    count = len(next(iter(host.values())))
    rows = []
    for i in range(count):
        update = first_update + i + 1
        row: dict[str, float] = {"update": update, "env_steps": update * trainer.config.batch_size}
        row.update({k: float(v[i]) for k, v in sorted(host.items())})
        rows.append(row)
    return rows


def _write_rows(path: Path, rows: list[dict[str, float]], keep_up_to: int | None = None) -> None:
    """Append rows to a CSV; with keep_up_to, first drop rows past that update (a resumed run)."""
    existing: list[dict[str, str]] = []
    if keep_up_to is not None and path.exists():
        with path.open() as f:
            existing = [r for r in csv.DictReader(f) if int(float(r["update"])) <= keep_up_to]
    mode = "w" if keep_up_to is not None or not path.exists() else "a"
    with path.open(mode, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        if mode == "w":
            writer.writeheader()
            writer.writerows(existing)
        writer.writerows(rows)


def read_metrics(directory: str | Path) -> list[dict[str, float]]:
    """DIR/metrics.csv as a list of rows of floats."""
    with (Path(directory) / METRICS_FILE).open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def run_training(
    trainer: Trainer,
    out_dir: str | Path | None = None,
    *,
    resume: bool = False,
    stop_after: int | None = None,
    progress: bool = True,
    on_chunk: Callable[[RunnerState, list[dict[str, float]]], None] | None = None,
) -> tuple[RunnerState, list[dict[str, float]]]:
    """Train in chunks of `config.checkpoint_every` updates, checkpointing between chunks.

    Args:
      out_dir: where metrics.csv and checkpoint.msgpack go (None: keep nothing on disk).
      resume: continue from out_dir's checkpoint (ValueError if there is none or it does not
        match); without it an existing checkpoint is overwritten.
      stop_after: stop once this many updates are done (as if interrupted); None runs all.
      progress: show a tqdm bar over updates.

    Returns the final RunnerState and the metric rows of the updates run in this call.
    """
    from tqdm.auto import tqdm

    config = trainer.config
    hp = trainer.default_hparams()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    if resume:
        if out is None or not checkpoint_path(out).exists():
            raise ValueError(f"--resume: no checkpoint in {out}")
        runner = load_checkpoint(out, trainer)
    else:
        runner = trainer.jit_init(trainer.root_key(), hp)
    done = int(runner.update)
    target = config.num_updates if stop_after is None else min(stop_after, config.num_updates)
    all_rows: list[dict[str, float]] = []
    first_write = True
    with tqdm(total=config.num_updates, initial=done, unit="update", disable=not progress,
              desc=f"PPO {config.task}") as bar:
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
            done += n
            if out is not None:
                # A fresh or resumed run rewrites the CSV once, keeping rows up to where it started.
                _write_rows(out / METRICS_FILE, rows, keep_up_to=(done - n) if first_write else None)
                save_checkpoint(out, trainer, runner)
                first_write = False
            all_rows.extend(rows)
            if on_chunk is not None:
                on_chunk(runner, rows)
            bar.update(n)
            bar.set_postfix(reward=f"{rows[-1]['reward']:+.3f}", entropy=f"{rows[-1]['entropy']:.2f}")
    return runner, all_rows
