#!/usr/bin/env bash
# The README's test command: a fresh virtual environment, the package installed from this
# checkout (not editable: tests exercise the installed package), the linter, the type checker,
# then the fast tier of the suite (every test not marked slow). `--slow` runs the slow tier
# instead (pyproject.toml's `slow` marker: end-to-end runs and the per-task repeats), `--all`
# both; CI runs both tiers.
# Further arguments go to pytest.
set -euo pipefail
tier="not slow"
case "${1:-}" in
    --slow) tier="slow"; shift ;;
    --all) tier="slow or not slow"; shift ;;
esac
cd "$(dirname "$0")/.."
python3 -m venv .venv-test
.venv-test/bin/pip install --quiet --upgrade pip
.venv-test/bin/pip install --quiet ".[dev]"
.venv-test/bin/ruff check .
# The type checker on the library and the trainer (pyproject.toml's [tool.mypy]); a type error fails.
.venv-test/bin/mypy
# One XLA compilation cache for the whole run, fresh each time: a program that several tests
# compile (in either pytest worker or in the CLI subprocesses tests start) is compiled once and
# then loaded from disk. Tracing, and so every trace-count check, is unchanged.
export JAX_COMPILATION_CACHE_DIR="$PWD/.jax-test-cache"
rm -rf "$JAX_COMPILATION_CACHE_DIR"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.5
# worksteal: idle workers take queued tests from busy ones, so the slow tests at the end overlap.
INFERENCEGYM_REQUIRE_INSTALLED=1 exec .venv-test/bin/pytest -q -n 2 --dist worksteal -m "$tier" "$@"
