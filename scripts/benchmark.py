"""Env steps per second against the number of parallel envs, JAX and the NumPy reference.

A thin wrapper of `inferencegym bench` (inferencegym_jax/bench.py, where the options are
documented): python scripts/benchmark.py [--envs 1 64 1024 8192 65536] [--json PATH] ...
"""

from inferencegym_jax.bench import main

if __name__ == "__main__":
    main()
