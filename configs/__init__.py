"""Configs: installed as `inferencegym_jax._configs` (see pyproject.toml); no code."""
