"""The `inferencegym` command line: one argparse tree over the command modules.

    inferencegym rollout | baselines      env_commands: the env and its baselines
    inferencegym train | eval | sweep     training_commands: PPO, graded against the baselines
    inferencegym bench                    bench: env steps per second
    inferencegym plot                     plot_command: one held-out episode of a policy over time
    inferencegym loadtest                 loadtest_command: one fixed configuration under Poisson load
    inferencegym serve                    serve_command: the OpenEnv server (extra [server])

`common` holds what they share (argument types, output checks, tables, XLA flags). JAX, the
trainer and pandas are imported inside the commands, so building the parser (`--help`) imports
none of them beyond what `inferencegym_jax` itself imports. In `main`, a ValueError (bad input)
or an OSError (an unusable output path) becomes one line on stderr and exit status 2, as does
an argument argparse refuses.
"""

from __future__ import annotations

import argparse
import os
import sys

from inferencegym_jax.cli import (
    bench,
    env_commands,
    loadtest_command,
    plot_command,
    serve_command,
    training_commands,
)
from inferencegym_jax.cli.common import XLA_CPU_FLAGS, one_line_errors, use_xla_cpu_flags

PROG = "inferencegym"

__all__ = ["XLA_CPU_FLAGS", "build_parser", "main", "use_xla_cpu_flags"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each sets `func`, the command to run with the args."""
    parser = one_line_errors(argparse.ArgumentParser(prog=PROG, description="LLM inference-serving RL environment"))
    sub = parser.add_subparsers(dest="command", required=True)
    env_commands.add_parsers(sub)
    training_commands.add_parsers(sub)
    bench.add_parsers(sub)
    plot_command.add_parsers(sub)
    loadtest_command.add_parsers(sub)
    serve_command.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: sys.argv[1:]), add the CLI's XLA flags, run the command.

    `args.xla_flags_at_start` keeps XLA_FLAGS as found (None if unset) for commands that must
    measure without the CLI's flags. Bad input and unusable output paths exit with status 2
    and one line `inferencegym: error: ...` on stderr, as do argument errors (`one_line_errors`).
    """
    args = build_parser().parse_args(argv)
    args.xla_flags_at_start = os.environ.get("XLA_FLAGS")
    use_xla_cpu_flags()
    try:
        args.func(args)
    except (ValueError, OSError) as err:
        message = " ".join(str(err).splitlines()) or type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
