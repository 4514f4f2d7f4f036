"""PPO training for inferencegym_jax."""
