"""Reproducer: vmapped LAPACK QRs deadlock XLA:CPU (found in jaxlib 0.10.2 on 2 cores).

Each case runs in a fresh process under a timeout: `batch` matrices of 64 x 64, `concurrent`
independent batched QRs in one jitted program, repeated `reps` times. With LAPACK's QR
(`jnp.linalg.qr`, which flax's orthogonal initialiser calls) a batch >= 2 and a few concurrent
QRs hang: each QR runs in an intra-op pool thread, splits its batch over the same pool and blocks
until the pieces finish, and once every pool thread is blocked so, nothing runs the pieces
(`gdb -p PID -batch -ex "thread apply all bt"`: workers in `jax::ParallelBatchMap` ->
`BlockingCounter::Wait`). `training.networks.orthogonal` (Householder in plain XLA ops, what the
PPO networks use) finishes in every case.

    python scripts/lapack_qr_deadlock.py                 # the table
    python scripts/lapack_qr_deadlock.py --timeout 120   # a longer wait before calling it hung
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time

CASES = [("lapack", 1, 4), ("lapack", 4, 2), ("lapack", 2, 4), ("lapack", 4, 4),
         ("householder", 2, 4), ("householder", 4, 4), ("householder", 16, 6)]


def one_case(qr: str, batch: int, concurrent: int, reps: int) -> None:
    """Runs in the child process."""
    import jax
    import jax.numpy as jnp

    from training.networks import orthogonal

    def q_of(k: jax.Array) -> jax.Array:
        if qr == "lapack":
            return jnp.linalg.qr(jax.random.normal(k, (64, 64)))[0]
        return orthogonal(1.0)(k, (64, 64))

    @jax.jit
    def program(key: jax.Array) -> list[jax.Array]:
        keys = jax.random.split(key, (concurrent, batch))
        return [jax.vmap(q_of)(keys[i]) for i in range(concurrent)]

    for r in range(reps):
        jax.block_until_ready(program(jax.random.key(r)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as hung")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        qr, batch, concurrent = args.child
        one_case(qr, int(batch), int(concurrent), args.reps)
        return

    import jax

    print(f"jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{len(__import__('os').sched_getaffinity(0))} cores; timeout {args.timeout:.0f} s, {args.reps} calls each")
    print("| QR | batch | concurrent QRs | result | s |\n|---|---|---|---|---|")
    for qr, batch, concurrent in CASES:
        t0 = time.perf_counter()
        try:
            subprocess.run([sys.executable, __file__, "--child", qr, str(batch), str(concurrent),
                            "--reps", str(args.reps)], check=True, timeout=args.timeout)
            result = "finished"
        except subprocess.TimeoutExpired:
            result = "HUNG"
        print(f"| {qr} | {batch} | {concurrent} | {result} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
