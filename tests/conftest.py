"""Shared fixtures. Tests import the installed package, as users do."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import inferencegym_jax as ig

# tests/ (not the repository root) goes on sys.path, so `helpers` imports while the package
# still comes from site-packages.
sys.path.insert(0, str(Path(__file__).parent))

if os.environ.get("INFERENCEGYM_REQUIRE_INSTALLED") and "site-packages" not in ig.__file__:
    raise RuntimeError(f"tests must run against the installed package, got {ig.__file__}")

from helpers import physics_task_params  # noqa: E402 (needs tests/ on sys.path)
from served import http, server  # noqa: E402, F401 (the shared `inferencegym serve`: tests/served.py)


@pytest.fixture(scope="session", params=physics_task_params())
def task(request):
    """(env, params) of every task the physics tests run on (helpers.PHYSICS_TASK_IDS; all but
    helpers.FAST_PHYSICS_TASK_ID in the slow tier)."""
    return ig.make(request.param)


@pytest.fixture(autouse=True)
def _keep_xla_flags(monkeypatch):
    """`inferencegym_jax.cli.main` adds XLA flags to the environment
    (`inferencegym_jax.cli.common.use_xla_cpu_flags`), as do tests that call it; undo it after
    each test, so that later tests' subprocesses start as they would on their own."""
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
