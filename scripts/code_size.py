"""Function and module sizes of a source tree: the numbers of the redesign's before/after table.

    python scripts/code_size.py                 # this checkout
    python scripts/code_size.py --tree DIR      # another checkout (e.g. a `git worktree` of an old revision)

Counts physical lines of every function (decorators and docstrings included) and module under
inferencegym_jax/ and training/, and the public reset/step entry points of the env class.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("inferencegym_jax", "training")


def functions(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method of a file."""
    return function_sizes(path.read_text())


def function_sizes(source: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method of a module's source: from its first
    decorator to its last line, docstring and nested functions included (a nested function is
    counted on its own too). tests/test_code_size.py counts with it."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                out.append((prefix + child.name, child.end_lineno - start + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(ast.parse(source), "")
    return out


def env_entry_points(tree: Path) -> list[str]:
    """Public methods of the env class whose name starts with reset or step."""
    source = ast.parse((tree / "inferencegym_jax" / "env.py").read_text())
    names = []
    for node in ast.walk(source):
        if isinstance(node, ast.ClassDef) and node.name == "InferenceGymEnv":
            names = [f.name for f in node.body if isinstance(f, ast.FunctionDef)
                     and f.name.startswith(("reset", "step")) and not f.name.startswith("_")]
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--limit", type=int, default=80, help="report functions longer than this")
    args = parser.parse_args()
    sizes, modules = [], []
    for package in PACKAGES:
        for path in sorted((args.tree / package).rglob("*.py")):
            rel = path.relative_to(args.tree)
            modules.append((str(rel), len(path.read_text().splitlines())))
            sizes.extend((f"{rel}:{name}", n) for name, n in functions(path))
    sizes.sort(key=lambda x: -x[1])
    big = [m for m in modules if m[1] > 400]
    print(f"tree: {args.tree}")
    print(f"longest function: {sizes[0][0]} ({sizes[0][1]} lines)")
    print(f"functions over {args.limit} lines: {sum(n > args.limit for _, n in sizes)}")
    for name, n in sizes[:8]:
        print(f"  {n:4d}  {name}")
    print(f"modules over 400 lines: {len(big)}")
    for module, n in sorted(big, key=lambda x: -x[1]):
        print(f"  {n:4d}  {module}")
    points = env_entry_points(args.tree)
    print(f"public env step/reset entry points: {len(points)} ({', '.join(points)})")


if __name__ == "__main__":
    main()
