#!/usr/bin/env bash
# The README's test command: a fresh virtual environment, the package installed from this
# checkout (not editable: tests exercise the installed package), the linter, then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-test
.venv-test/bin/pip install --quiet --upgrade pip
.venv-test/bin/pip install --quiet ".[dev]"
.venv-test/bin/ruff check .
# worksteal: idle workers take queued tests from busy ones, so the slow tests at the end overlap.
INFERENCEGYM_REQUIRE_INSTALLED=1 exec .venv-test/bin/pytest -q -n 2 --dist worksteal "$@"
