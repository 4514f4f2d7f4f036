#!/usr/bin/env bash
# The README's main job: a fresh virtual environment, the package installed from this checkout,
# then the main job on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-main
.venv-main/bin/pip install --quiet --upgrade pip
.venv-main/bin/pip install --quiet .
exec .venv-main/bin/inferencegym rollout --episodes 256 "$@"
