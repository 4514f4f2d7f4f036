"""The size limits of the project's standards: no function over 80 lines and no module over 500
in the installed packages (`inferencegym_jax`, `training`).

Lines are counted as scripts/code_size.py counts them: a module's physical lines, and a
function's from its first decorator to its last line, docstring and nested functions included
(a nested function is counted on its own too). The failure names every offender.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
PACKAGES = ("inferencegym_jax", "training")


def _code_size_script():
    """scripts/code_size.py (a script of the checkout, not of the installed package)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "code_size.py"
    spec = importlib.util.spec_from_file_location("code_size", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The one line counter, the script's.
function_sizes = _code_size_script().function_sizes


def offenders(sources: dict[str, str]) -> list[str]:
    """One line per module over MAX_MODULE_LINES and per function over MAX_FUNCTION_LINES
    ("path: N lines", "path:Class.method: N lines"), for sources {path: text}."""
    found = []
    for path, source in sorted(sources.items()):
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path}: {lines} lines (module limit {MAX_MODULE_LINES})")
        found.extend(f"{path}:{name}: {n} lines (function limit {MAX_FUNCTION_LINES})"
                     for name, n in function_sizes(source) if n > MAX_FUNCTION_LINES)
    return found


def package_sources() -> dict[str, str]:
    """{path relative to the package's parent: text} of every module of the installed packages."""
    sources = {}
    for package in PACKAGES:
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in sorted(root.rglob("*.py")):
            sources[str(path.relative_to(root.parent))] = path.read_text()
    return sources


def test_no_function_over_80_lines_and_no_module_over_500():
    sources = package_sources()
    assert len(sources) > 50 and any(p.endswith("env.py") for p in sources)  # the packages were found
    found = offenders(sources)
    assert not found, "over the size limits (split them):\n" + "\n".join(found)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A decorated function of exactly `lines` lines (decorator and docstring included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 3))
    return f'{indent}@staticmethod\n{indent}def {name}():\n{indent}    """Doc."""\n{body}'


def test_the_checker_names_what_is_over_a_limit_and_nothing_at_it():
    """Not vacuous: a doctored method of 81 lines and a module of 501 are named; 80 and 500 pass."""
    at_limit = "class C:\n" + _function("fits", 80, "    ")
    assert ("C.fits", 80) in function_sizes(at_limit)
    over = at_limit + _function("too_long", 81, "    ")
    assert offenders({"pkg/ok.py": at_limit}) == []
    assert offenders({"pkg/big.py": over}) == ["pkg/big.py:C.too_long: 81 lines (function limit 80)"]
    padding = "\n".join(f"y{i} = {i}" for i in range(MAX_MODULE_LINES))
    assert offenders({"pkg/m.py": padding}) == []
    assert offenders({"pkg/m.py": padding + "\nz = 0"}) == ["pkg/m.py: 501 lines (module limit 500)"]
