"""Array plumbing of the reference: conversion to NumPy, guarded division, pool arithmetic.

Shapes throughout the reference: N envs lead every array; per-env scalars are (N,), per-class
values (N, 3), queue bins (N, 3, A); everything float32 unless noted.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from inferencegym_jax.serving import Queue, Sequences
from inferencegym_jax.testing.reference.constants import EPS, F32


def to_numpy(tree: Any) -> Any:
    """A pytree with every leaf as a NumPy array (float leaves as float32)."""

    def leaf(x: Any) -> np.ndarray:
        x = np.asarray(x)
        return x.astype(F32) if np.issubdtype(x.dtype, np.floating) else x

    return jax.tree_util.tree_map(leaf, tree)


def safe_div(a: Any, b: Any) -> np.ndarray:
    """a / b where b > EPS, else 0 (numerics.safe_div)."""
    b = np.asarray(b, F32)
    present = b > EPS
    return np.where(present, a / np.where(present, b, F32(1.0)), F32(0.0)).astype(F32)


def per_env(x: np.ndarray) -> np.ndarray:
    """(N,) -> (N, 1, 1): a per-env value against (N, 3, A) queue bins."""
    return np.asarray(x)[:, None, None]


def scale_pool(pool: Sequences, fraction: np.ndarray) -> Sequences:
    """The same share (N,) of every field of a pool of sequences."""
    return Sequences(fraction * pool.seqs, fraction * pool.context, fraction * pool.remaining)


def add_pools(a: Sequences, b: Sequences) -> Sequences:
    """Two pools of sequences merged."""
    return Sequences(a.seqs + b.seqs, a.context + b.context, a.remaining + b.remaining)


def subtract_pools(a: Sequences, b: Sequences) -> Sequences:
    """Pool `a` without its part `b`."""
    return Sequences(a.seqs - b.seqs, a.context - b.context, a.remaining - b.remaining)


def scale_queue(queue: Queue, fraction: np.ndarray) -> Queue:
    """Every queue field times `fraction` (broadcast against (N, 3, A)): a share of each bin."""
    return Queue(fraction * queue.count, fraction * queue.prompt, fraction * queue.output, fraction * queue.prompt_sq)


def subtract_queues(a: Queue, b: Queue) -> Queue:
    """Queue `a` without its part `b`."""
    return Queue(a.count - b.count, a.prompt - b.prompt, a.output - b.output, a.prompt_sq - b.prompt_sq)


def select_where(done: np.ndarray, if_done: Any, otherwise: Any) -> Any:
    """Per env, the leaves of `if_done` where done (N,) bool, else those of `otherwise`."""

    def pick(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(done.reshape((-1,) + (1,) * (np.ndim(x) - 1)), x, y)

    return jax.tree_util.tree_map(pick, if_done, otherwise)
