"""`python -m inferencegym_jax.cli ...`: the same as the `inferencegym` command."""

from inferencegym_jax.cli import main

main()
