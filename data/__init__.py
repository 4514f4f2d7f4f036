"""Package data: installed as `inferencegym_jax._data` (see pyproject.toml); no code."""
