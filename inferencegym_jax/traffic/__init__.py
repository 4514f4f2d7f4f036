"""What the server is offered: loop-free random draws, workloads and recorded traces.

- `sampling`: uniforms, normals and Poisson counts with fixed shapes and no loops;
- `workload`: arrival schedules (Poisson, bursts, trace replay), length distributions, arrivals;
- `traces`: the recorded request traces shipped in `data/traces`, compacted to arrays.
"""
