"""Test support shipped with the package: the NumPy reference implementation of the dynamics
(`reference`), used by the parity tests and as the benchmark's baseline. Not part of the env's API."""
