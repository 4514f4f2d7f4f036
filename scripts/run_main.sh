#!/usr/bin/env bash
# The README's main job: a fresh virtual environment, the package installed from this checkout,
# then PPO trained on task 1 on CPU (configs/train/ppo_task1.toml) and graded on 256 held-out
# episodes against every baseline. Writes runs/main/ (config, metrics.csv, reward_curve.png,
# checkpoint, eval.json). Extra arguments go to `inferencegym train` (e.g. --task 2).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-main
.venv-main/bin/pip install --quiet --upgrade pip
.venv-main/bin/pip install --quiet .
exec .venv-main/bin/inferencegym train --task 1 --out runs/main --eval-episodes 256 "$@"
