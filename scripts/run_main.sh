#!/usr/bin/env bash
# The README's main job: a fresh virtual environment, the package installed from this checkout,
# then PPO trained on CPU on InferenceGym-Task3-v2 (the newest version of task 3, where switching
# serving configurations pays) from a uniform start (configs/train/ppo_task3_v2_main.toml, also
# what `inferencegym train` runs with neither --task nor --config: 1,000 updates, 16.4 M env
# steps), graded on 256 held-out episodes against every baseline: the table gives each policy's
# score minus best_static's, paired on the same episodes, with its 95% CI. Writes runs/main/
# (config, metrics.csv, reward_curve.png, episode.png, checkpoint, eval.json). Extra arguments go
# to `inferencegym train` (e.g. --updates 200 for a shorter run).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-main
.venv-main/bin/pip install --quiet --upgrade pip
.venv-main/bin/pip install --quiet .
exec .venv-main/bin/inferencegym train --task InferenceGym-Task3-v2 --config ppo_task3_v2_main --out runs/main --eval-episodes 256 "$@"
