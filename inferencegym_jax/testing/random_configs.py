"""Random task configurations: valid ones drawn inside the task files' ranges, and invalid ones.

The ranges of `task_config` promise that the physics stays finite anywhere inside them, so
domain randomisation may draw params anywhere there. The fuzz campaign (`testing.fuzz`) and
the property tests check that promise with these draws: every numeric field a task file sets is
redrawn from its `validation.Spec` by a `draw(spec, key)` function (NumPy's or hypothesis's),
with the cross-field rules of the schema kept (low <= high, a class mix that sums to 1).
Fields that change a compiled program's shapes (queue ages, trace thinning) are kept.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from typing import Any

import numpy as np

from inferencegym_jax import tasks, validation
from inferencegym_jax.task_config import TaskConfig
from inferencegym_jax.validation import Spec

Draw = Callable[[Spec, str], Any]
# Static fields: a new value is a new compiled program.
KEPT = ("server.num_age_buckets", "workload.trace_keep_one_in", "max_steps")


def _fields(schema: type, raw: dict[str, Any], path: str = "") -> list[tuple[str, Spec]]:
    """(dotted key, Spec) of every numeric field set in `raw`, nested tables expanded."""
    hints = typing.get_type_hints(schema)
    out = []
    for f in dataclasses.fields(schema):
        if f.name not in raw:
            continue
        nested = validation.nested_schema(hints[f.name])
        if nested is not None:
            out.extend(_fields(nested, raw[f.name], f"{path}{f.name}."))
        elif f.metadata["spec"].kind in ("number", "integer", "vector"):
            out.append((path + f.name, f.metadata["spec"]))
    return out


def numeric_fields(env_id: str, *, static: bool = False) -> list[tuple[str, Spec]]:
    """(dotted key, Spec) of the numeric fields the task file of `env_id` sets; those in KEPT
    (static: a new value is a new program) only with `static`."""
    return [(k, s) for k, s in _fields(TaskConfig, tasks.raw_task_config(env_id)) if static or k not in KEPT]


def set_key(overrides: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`overrides` with the dotted `key` ("workload.prompt.high") set to `value` in its table."""
    head, _, rest = key.partition(".")
    if rest:
        set_key(overrides.setdefault(head, {}), rest, value)
    else:
        overrides[head] = value
    return overrides


def random_overrides(env_id: str, draw: Draw) -> dict[str, Any]:
    """Overrides for `tasks.make(env_id, **overrides)` redrawing every numeric field."""
    values = {key: draw(spec, key) for key, spec in numeric_fields(env_id)}
    for dist in ("workload.prompt", "workload.output", "workload.burst_prompt"):
        if f"{dist}.low" in values:
            low, high = sorted((values[f"{dist}.low"], values[f"{dist}.high"]))
            values[f"{dist}.low"], values[f"{dist}.high"] = low, high
    for name in ("workload.class_mix", "workload.burst_class_mix"):
        if name in values:
            mix = np.asarray(values[name], np.float64) + 1e-3
            values[name] = [float(x) for x in mix / mix.sum()]
    overrides: dict[str, Any] = {}
    for key, value in values.items():
        set_key(overrides, key, value)
    return overrides


def numpy_draw(rng: np.random.Generator, extreme_share: float = 0.2) -> Draw:
    """A `Draw` from NumPy: log-uniform over ranges that span decades (so that tiny and huge
    values both come up), uniform otherwise, and an endpoint with probability extreme_share."""

    def number(spec: Spec) -> float:
        low, high = spec.low, spec.high
        if rng.random() < extreme_share:
            return float(high if spec.low_open or rng.random() < 0.5 else low)
        if low >= 0 and high > 100 * max(low, 1e-300):
            bottom = max(low, high * 1e-9) if low > 0 or spec.low_open else high * 1e-9
            return float(math.exp(rng.uniform(math.log(bottom), math.log(high))))
        value = float(rng.uniform(low, high))
        return value if not (spec.low_open and value <= low) else float(high)

    def draw(spec: Spec, key: str) -> Any:
        if spec.kind == "integer":
            return int(rng.integers(int(spec.low), int(min(spec.high, 2**62)) + 1))
        if spec.kind == "vector":
            return [number(spec) for _ in range(spec.length)]
        return number(spec)

    return draw


def invalid_values(spec: Spec) -> list[Any]:
    """Values a field of `spec` must refuse: non-finite, out of range, of the wrong type."""
    bad: list[Any] = [math.nan, math.inf, -math.inf, "a", True, [1.0]]
    if math.isfinite(spec.high):
        bad.append(spec.high * 10 + 1)
    if math.isfinite(spec.low):
        bad.append(spec.low - 1 if not spec.low_open else spec.low)
    if spec.kind == "integer":
        bad = [1.5, "a", True, int(spec.high) + 1, int(spec.low) - 1, 2**64]
    if spec.kind == "vector":
        ok = (spec.low + min(spec.high, spec.low + 1)) / 2
        bad = [[ok] * (spec.length - 1), [ok] * (spec.length + 1), [math.nan] * spec.length, ok, "a"]
    return bad
