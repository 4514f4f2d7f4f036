"""Adapters for other RL libraries (optional extras, imported only when used).

- `gymnasium_env`: gymnasium `Env` and `VectorEnv` over the jitted env (`pip install .[gymnasium]`);
- `sb3_env`: Stable-Baselines3's `VecEnv` over the vector adapter (`pip install .[sb3]`).

gymnax-style libraries (rejax, PureJaxRL) need no adapter beyond `wrappers.to_gymnax`.
"""
