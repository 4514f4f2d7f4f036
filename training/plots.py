"""The training reward curve, with the baselines' held-out reward as horizontal lines (matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def baseline_levels(results: dict[str, Any], skip: tuple[str, ...] = ("ppo",)) -> dict[str, float]:
    """Mean per-interval reward of each evaluated policy (EvalResult.metrics["reward"])."""
    levels = {}
    for name, result in results.items():
        if name in skip:
            continue
        reward = getattr(result, "metrics", {}).get("reward") if hasattr(result, "metrics") else None
        if reward is not None:
            levels[name] = float(np.mean(reward))
    return levels


def plot_reward_curve(rows: list[dict[str, float]], results: dict[str, Any], path: str | Path,
                      title: str = "") -> Path:
    """Mean per-interval training reward against env steps; one dashed line per baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.asarray([r["env_steps"] for r in rows])
    reward = np.asarray([r["reward"] for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, reward, color="k", lw=1.5, label="PPO (training rollouts)")
    levels = baseline_levels(results)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (name, level), color in zip(sorted(levels.items(), key=lambda kv: -kv[1]), colors):
        ax.axhline(level, ls="--", lw=1, color=color, label=f"{name} (held-out)")
    if "ppo" in results and hasattr(results["ppo"], "metrics") and "reward" in results["ppo"].metrics:
        ax.axhline(float(np.mean(results["ppo"].metrics["reward"])), ls=":", lw=1.5, color="k",
                   label="PPO (held-out, final)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean reward per interval")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
