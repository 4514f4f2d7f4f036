"""Env steps per second against the number of parallel envs, JAX and the NumPy reference.

The same as `inferencegym bench` (inferencegym_jax/cli/bench.py, where the rows and options are
documented), XLA flags included: python scripts/benchmark.py [--envs 1 64 1024 8192 65536] [--json PATH] ...
"""

import sys

from inferencegym_jax.cli import main

if __name__ == "__main__":
    main(["bench", *sys.argv[1:]])
