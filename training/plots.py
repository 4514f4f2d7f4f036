"""The training reward curve, with the baselines' held-out reward as horizontal lines (matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferencegym_jax.episode_plot import write_png


def plot_reward_curve(rows: list[dict[str, float]], levels: dict[str, float], path: str | Path,
                      title: str = "") -> Path:
    """Mean per-interval training reward against env steps; one dashed line per evaluated policy.

    `levels` maps a policy name to its mean held-out reward per interval ("ppo" is drawn dotted).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.asarray([r["env_steps"] for r in rows])
    reward = np.asarray([r["reward"] for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, reward, color="k", lw=1.5, label="PPO (training rollouts)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    baselines = sorted(((n, v) for n, v in levels.items() if n != "ppo"), key=lambda kv: -kv[1])
    for (name, level), color in zip(baselines, colors):
        ax.axhline(level, ls="--", lw=1, color=color, label=f"{name} (held-out)")
    if "ppo" in levels:
        ax.axhline(levels["ppo"], ls=":", lw=1.5, color="k", label="PPO (held-out, final)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean reward per interval")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = write_png(fig, path, dpi=120)  # atomically, as every file the trainer writes
    plt.close(fig)
    return path
