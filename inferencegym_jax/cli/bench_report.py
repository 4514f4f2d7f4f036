"""The reports of `inferencegym bench`: the markdown table (printed as rows come), the scaling
figure, the description of the machine the rows were measured on, and the JSON file."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from inferencegym_jax.cli.common import markdown_header, markdown_row
from inferencegym_jax.files import atomic_write_json

COLUMNS = ("impl", "task", "num_envs", "steps/s", "jax/numpy", "compile s", "memory MB")


def load_avg() -> float | None:
    """The machine's 1-minute load average (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def short_task(env_id: str) -> str:
    """"InferenceGym-Task3-v0" -> "Task3"."""
    return env_id.replace("InferenceGym-", "").replace("-v0", "")


def table_line(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """One markdown row; jax/numpy is the ratio to the NumPy row of the same task and size."""
    base = next((r["steps_per_sec"] for r in rows
                 if r["impl"] == "numpy" and (r["task"], r["num_envs"]) == (row["task"], row["num_envs"])), None)
    ratio = f"{row['steps_per_sec'] / base:.1f}x" if base and row["impl"].startswith("jax") else "-"
    return markdown_row((row["impl"], short_task(row["task"]), row["num_envs"], row["steps_per_sec"], ratio,
                         row["compile_s"], row["memory_mb"]))


def print_table(rows: list[dict[str, Any]], file: Any = None) -> None:
    """The markdown table of BENCHMARKS.md (to stdout by default)."""
    print(markdown_header(COLUMNS, text_columns=2), file=file or sys.stdout)
    for r in rows:
        print(table_line(r, rows), file=file or sys.stdout)


def plot(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Steps/s against num_envs, log-log, one line per (impl, task) of the env-only rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        if r["impl"].startswith(("jax", "numpy")):
            series.setdefault((r["impl"], r["task"]), []).append((r["num_envs"], r["steps_per_sec"]))
    for (impl, task), points in sorted(series.items()):
        points.sort()
        style = "-o" if impl.startswith("jax") else "--s"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=f"{impl}, {short_task(task)}")
    ax.axhline(2e6, ls=":", color="grey", label="target: 2 M steps/s at 8,192 envs")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parallel envs")
    ax.set_ylabel("env steps per second")
    ax.set_title("inferencegym_jax: env-only throughput (auto-reset included)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine() -> dict[str, Any]:
    """The machine and software the rows were measured on (starts JAX's backend)."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "jax": jax.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": jax.devices()[0].platform,
        "devices": jax.device_count(),
        "load_avg": load_avg(),
        "command": " ".join(sys.argv),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def write_json(path: str | Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The JSON file of a run: {"machine": `meta` (see `machine`), "rows": `rows`}."""
    atomic_write_json(path, {"machine": meta, "rows": rows})
