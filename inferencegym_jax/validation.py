"""One validator for everything a user sets: typed, documented fields with physical ranges.

A config schema is a frozen dataclass whose fields carry a `Spec` (`number`, `integer`,
`vector`, `choice`, `text`, `names`, or a nested schema dataclass): `parse(raw, schema)` turns a
mapping (a TOML table with the user's overrides merged in) into an instance, or raises
ValueError naming the key the user typed (`workload.prompt.high`), its value and what is
allowed. `param_checks` applies the same Specs to a concrete `env.EnvParams` built by hand.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferencegym_jax.actions import GRID_SIZES, KNOB_RANGES, KNOBS, ServingAction


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one field accepts.

    Attributes:
      kind: "number", "integer", "vector", "choice", "text" or "names".
      doc: what the field is.
      unit: its unit ("" for a pure number).
      low, high: bounds of a number (or of each entry of a vector).
      low_open: whether `low` itself is excluded.
      length: entries of a vector.
      options: allowed values of a choice, or of the entries of a names list.
      optional: the field may be absent (None); its schema's `check` says when it is required.
    """

    kind: str
    doc: str
    unit: str = ""
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    length: int = 0
    options: tuple[str, ...] = ()
    optional: bool = False

    def allowed(self) -> str:
        """The allowed values, for error messages."""
        if self.kind == "choice":
            return f"one of {list(self.options)}"
        if self.kind == "names":
            return f"a list of distinct names from {list(self.options)}"
        if self.kind == "text":
            return "a string"
        what = {"number": "a finite number", "integer": "an integer",
                "vector": f"a list of {self.length} finite numbers, each"}[self.kind]
        unit = f" [{self.unit}]" if self.unit else ""
        return f"{what} in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}]{unit}"


def _num(x: float) -> str:
    """A bound as written: 1000000, 0.5, 1e+30."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e12 else f"{x:g}"


def _field(spec: Spec) -> Any:
    return dataclasses.field(default=None if spec.optional else dataclasses.MISSING, metadata={"spec": spec})


def number(unit: str, low: float, high: float, doc: str, *, low_open: bool = False, optional: bool = False) -> Any:
    """A finite real in [low, high] ((low, high] with low_open), in `unit`."""
    return _field(Spec("number", doc, unit, low, high, low_open, optional=optional))


def integer(unit: str, low: int, high: int, doc: str, *, optional: bool = False) -> Any:
    """An integer in [low, high]."""
    return _field(Spec("integer", doc, unit, low, high, optional=optional))


def vector(unit: str, length: int, low: float, high: float, doc: str, *, low_open: bool = False,
           optional: bool = False) -> Any:
    """A list of `length` finite reals, each in [low, high]."""
    return _field(Spec("vector", doc, unit, low, high, low_open, length=length, optional=optional))


def choice(options: Sequence[str], doc: str, *, optional: bool = False) -> Any:
    """One of `options`."""
    return _field(Spec("choice", doc, options=tuple(options), optional=optional))


def text(doc: str, *, optional: bool = False) -> Any:
    """Any string."""
    return _field(Spec("text", doc, optional=optional))


def names(options: Sequence[str], doc: str) -> Any:
    """A list of distinct names from `options`."""
    return _field(Spec("names", doc, options=tuple(options)))


def _fail(key: str, value: Any, spec: Spec) -> ValueError:
    return ValueError(f"{key}={value!r}: must be {spec.allowed()}")


def _in_range(x: float, spec: Spec) -> bool:
    return math.isfinite(x) and (spec.low < x if spec.low_open else spec.low <= x) and x <= spec.high


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_value(key: str, value: Any, spec: Spec) -> Any:
    """`value` converted to the field's type (float, int, tuple, str), or ValueError naming `key`."""
    if spec.kind == "number":
        if not _is_number(value) or not _in_range(float(value), spec):
            raise _fail(key, value, spec)
        return float(value)
    if spec.kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int) or not spec.low <= value <= spec.high:
            raise _fail(key, value, spec)
        return value
    if spec.kind == "vector":
        if (not isinstance(value, (list, tuple)) or len(value) != spec.length
                or not all(_is_number(v) and _in_range(float(v), spec) for v in value)):
            raise _fail(key, value, spec)
        return tuple(float(v) for v in value)
    if spec.kind == "choice":
        if value not in spec.options:
            raise _fail(key, value, spec)
        return value
    if spec.kind == "names":
        if (not isinstance(value, (list, tuple)) or len(set(value)) != len(value)
                or not all(v in spec.options for v in value)):
            raise _fail(key, value, spec)
        return tuple(value)
    if not isinstance(value, str):
        raise _fail(key, value, spec)
    return value


def nested_schema(annotation: Any) -> type | None:
    """The dataclass type of a nested-schema field (`LengthConfig` or `LengthConfig | None`)."""
    candidates = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return next((c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)), None)


def parse(raw: Mapping[str, Any], schema: type, path: str = "") -> Any:
    """An instance of the schema dataclass from a mapping; ValueError names the offending key.

    Unknown keys and missing required keys are errors; optional fields absent from `raw` are
    None. A schema may define `check(self, path)` for rules across fields (called last).
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path.rstrip('.') or 'config'} must be a table of keys, got {raw!r}")
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ValueError(f"unknown config key {path + unknown[0]!r}; allowed in {path.rstrip('.') or 'a task'}: "
                         f"{sorted(fields)}")
    values = {}
    for name, f in fields.items():
        key = path + name
        if name not in raw:
            if f.default is dataclasses.MISSING:
                raise ValueError(f"config key {key!r} is missing")
            continue
        nested = nested_schema(hints[name])
        if nested is not None:
            values[name] = parse(raw[name], nested, key + ".")
        else:
            values[name] = check_value(key, raw[name], f.metadata["spec"])
    instance = schema(**values)
    if hasattr(instance, "check"):
        instance.check(path)
    return instance


def describe(schema: type, path: str = "") -> list[tuple[str, str, str]]:
    """(key, allowed values, doc) for every field of a schema, nested ones expanded."""
    hints = typing.get_type_hints(schema)
    rows = []
    for f in dataclasses.fields(schema):
        nested = nested_schema(hints[f.name])
        if nested:
            rows.extend(describe(nested, path + f.name + "."))
        else:
            spec = f.metadata["spec"]
            rows.append((path + f.name, spec.allowed() + (" (optional)" if spec.optional else ""), spec.doc))
    return rows


# ----------------------------------------------------------------------------- concrete params


def _is_real(value: Any) -> bool:
    """A real scalar or array (a tracer, a NumPy or JAX array, or a Python number), not a bool."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
    return _is_number(value)


def is_concrete(tree: Any) -> bool:
    """Whether every leaf of `tree` is a concrete value (not a tracer): host-side checks of
    values run only then, outside jit."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def check_action(action: Any) -> None:
    """Host-side validation: ValueError naming the knob and its allowed range.

    Shapes and dtypes are static and always checked (at trace time too); values only when the
    action is concrete, i.e. outside jit. Inside jit actions are clipped instead.
    """
    if isinstance(action, ServingAction):
        for name, (lo, hi) in zip(KNOBS, KNOB_RANGES):
            value = getattr(action, name)
            if not _is_real(value):
                raise ValueError(f"action.{name} must be a real number, got {value!r}")
            if jnp.shape(value) != ():
                raise ValueError(f"action.{name} must be a scalar, got shape {jnp.shape(value)}")
            if is_concrete(value):
                v = float(value)
                if not (lo <= v <= hi):
                    raise ValueError(f"action.{name}={v} is outside its range [{lo}, {hi}]")
        return
    shape = jnp.shape(action)
    dtype = jnp.result_type(action) if hasattr(action, "dtype") else np.asarray(action).dtype
    if shape != (len(KNOBS),):
        raise ValueError(
            f"action must be an int vector of shape ({len(KNOBS)},) (grid indices of {KNOBS}) "
            f"or a ServingAction, got shape {shape}"
        )
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(f"action must have an integer dtype (grid indices), got {dtype}")
    if is_concrete(action):
        values = np.asarray(action)
        for i, name in enumerate(KNOBS):
            if not 0 <= values[i] < GRID_SIZES[i]:
                raise ValueError(
                    f"action[{i}] ({name}) = {int(values[i])} is outside its range [0, {GRID_SIZES[i] - 1}]"
                )
