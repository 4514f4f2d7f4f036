"""What every `inferencegym` command shares: argument types, output checks, tables, XLA flags.

Nothing here imports JAX, pandas or the trainer at module level (`inferencegym --help` stays
fast); the task registry is read inside `task_id`, when an argument is parsed.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

# XLA:CPU (jaxlib 0.10) hands reductions to YNNPACK, which is slower than XLA's own fused loops on
# the env's small (envs, 3, 16) reductions: with this flag the env steps 1.13x faster at 8,192
# envs (scripts/xla_cpu_options.py, BENCHMARKS.md). Only for the jaxlib minor version where it
# was measured: XLA aborts on an unknown flag.
XLA_CPU_FLAGS = "--xla_cpu_experimental_ynn_fusion_type="
_XLA_CPU_FLAGS_FOR = "0.10."

# Registered ids look like this; the number names the task's files (configs/tasks/task<N>.toml,
# configs/train/ppo_task<N>.toml).
_TASK_ID = re.compile(r"InferenceGym-Task(\d+)-v\d+")


# Seeds: `jax.random.key(seed)` keeps only the low 32 bits of a seed (with 64-bit types off, the
# default), so 2**32 would silently repeat seed 0, and seeds past int64 raise OverflowError.
MAX_SEED = 2**32 - 1


def use_xla_cpu_flags() -> bool:
    """Add XLA_CPU_FLAGS to XLA_FLAGS, unless the user set that flag or another jaxlib is
    installed; returns whether it did. Must run before JAX's first computation."""
    import jaxlib

    flags = os.environ.get("XLA_FLAGS", "")
    if not jaxlib.__version__.startswith(_XLA_CPU_FLAGS_FOR) or "ynn_fusion_type" in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_FLAGS}".strip()
    return True


def registered_tasks() -> list[str]:
    """The env ids `inferencegym_jax.make` accepts."""
    from inferencegym_jax import registered_envs

    return registered_envs()


def task_id(value: str) -> str:
    """argparse type: a task number N (its newest version, `tasks.resolve_id`: "3" ->
    "InferenceGym-Task3-v2") or a registered id (older versions by their full ids)."""
    from inferencegym_jax.tasks import resolve_id

    try:
        return resolve_id(value, key="")
    except ValueError as err:  # argparse puts "argument --task: " before it
        raise argparse.ArgumentTypeError(str(err)) from None


def task_number(env_id: str) -> int | None:
    """N of a registered id "InferenceGym-TaskN-v<k>"; None for an id of another form."""
    match = _TASK_ID.fullmatch(env_id)
    return int(match.group(1)) if match else None


def ppo_config_name(env_id: str) -> str | None:
    """The name of the task's shipped PPO config, shipped or not: "ppo_task<N>" for a v0 id,
    "ppo_task<N>_v<k>" for a later version; None when the id carries no task number."""
    match = _TASK_ID.fullmatch(env_id)
    if match is None:
        return None
    version = env_id.rsplit("-v", 1)[1]
    return f"ppo_task{match.group(1)}" + ("" if version == "0" else f"_v{version}")


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive integer")
    return int(value)


def seed_int(value: str) -> int:
    """argparse type: an integer seed in [0, MAX_SEED] (jax.random.key keeps 32 bits of a seed)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value!r} is not a seed: use an integer in [0, 2**32 - 1 = {MAX_SEED}]")
    return number


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """`parser.error` of every subcommand: `inferencegym: error: ...` on one line, exit status 2
    (argparse's own prints the usage first)."""
    program = parser.prog.split()[0]
    message = " ".join(message.splitlines())
    parser.exit(2, f"{program}: error: {message} (see {parser.prog} --help)\n")


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser`, its argument errors made one line like the commands' own errors
    (`inferencegym_jax.cli.main`): `inferencegym: error: ...`, exit status 2. The error method is
    replaced on the instance because subcommand parsers are made by `add_parser`, whose class is
    chosen where the top-level parser is built."""
    parser.error = functools.partial(_one_line_error, parser)  # type: ignore[method-assign]  # on purpose: see above
    return parser


def add_command(sub: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """`sub.add_parser(name, **kwargs)` with one-line argument errors (`one_line_errors`)."""
    return one_line_errors(sub.add_parser(name, **kwargs))


def _first_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _check_can_make_folder(folder: Path, option: str, value: str) -> None:
    """ValueError unless `folder` is a writable folder or could be created as one."""
    existing = _first_existing(folder.absolute())
    if not existing.is_dir():
        raise ValueError(f"{option} {value!r}: {str(existing)!r} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {value!r}: the folder {str(existing)!r} is not writable")


def check_output_file(value: str, option: str) -> Path:
    """The path of an output file, checked before a long computation: ValueError (naming
    `option`) when it is a folder or its folder cannot be created or written."""
    path = Path(value)
    if path.is_dir():
        raise ValueError(f"{option} {value!r} is a folder; give a file path")
    _check_can_make_folder(path.parent, option, value)
    return path


def check_output_folder(value: str, option: str) -> Path:
    """The path of an output folder, checked before a long computation: ValueError (naming
    `option`) when it, or an ancestor, is a file, or it cannot be created or written."""
    path = Path(value)
    _check_can_make_folder(path, option, value)
    return path


def check_output_files(folder: Path, names: Sequence[str], option: str) -> None:
    """ValueError (naming `option`) when one of the files a command writes in `folder` is a folder."""
    for name in names:
        if (folder / name).is_dir():
            raise ValueError(f"{option} {str(folder)!r}: {str(folder / name)!r} is a folder, where the command "
                             "writes a file")


def print_frame(frame: Any, index: bool = True) -> None:
    """Print a pandas DataFrame whole: every column, 4 significant digits."""
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.float_format", "{:.4g}".format):
        print(frame.to_string(index=index))


def format_cell(value: Any) -> str:
    """A markdown table cell: "-" for None, thousands separators, floats below 100 to 2 decimals."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown_header(columns: Sequence[str], text_columns: int) -> str:
    """A markdown table's header and rule: the first `text_columns` left-aligned, the rest right."""
    rule = ["---" if i < text_columns else "---:" for i in range(len(columns))]
    return "| " + " | ".join(columns) + " |\n|" + "|".join(rule) + "|"


def markdown_row(cells: Sequence[Any]) -> str:
    """One markdown table row, each cell through `format_cell`."""
    return "| " + " | ".join(format_cell(c) for c in cells) + " |"
