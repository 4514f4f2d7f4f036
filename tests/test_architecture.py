"""docs/ARCHITECTURE.md kept true: its layer table against tests/test_layers.py's LAYERS, its
phase table against `serving.serve_interval` and the tests that call each phase, and every
module, name, path and command it writes in code font against the code.

Each check is a pure function of the doc's text returning its problems (empty when the doc is
true), so that the tests below also run it on doctored tables and see it fail.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from pathlib import Path

import test_layers  # tests/, which conftest puts on sys.path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = "inferencegym_jax"
CODE = re.compile(r"`([^`]+)`")
PHASE_TESTS = ("test_serving.py", "test_goodput.py", "test_mixed_engine.py", "test_request_tpot.py",
               "test_tpot_spread.py")


# ---------------------------------------------------------------- the doc's tables


def section(text: str, heading: str) -> str:
    """The body of the doc's `## heading` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match is not None, f"docs/ARCHITECTURE.md has no '## {heading}' section"
    return match.group(1)


def table_rows(body: str) -> list[list[str]]:
    """The cells of the first markdown table in `body`, without its header and rule."""
    lines = body.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return table[2:]


def layer_table(text: str) -> list[tuple[str, list[str]]]:
    """(layer, the names in its modules column) per row of the Layers table, lowest first."""
    return [(cells[0], CODE.findall(cells[1])) for cells in table_rows(section(text, "Layers"))]


def phase_table(text: str) -> list[tuple[str, str]]:
    """(phase, its module's file) per phase of the simulator's phase table."""
    phases = []
    for cells in table_rows(section(text, "The simulator, phase by phase")):
        (path,) = CODE.findall(cells[1])
        phases += [(name, path) for name in CODE.findall(cells[0])]
    return phases


# ---------------------------------------------------------------- the checks


def module_of(doc_name: str) -> str:
    """The LAYERS name of a doc name: `training/` -> training, `serving/` -> inferencegym_jax.serving,
    `traffic.sampling` -> inferencegym_jax.traffic.sampling."""
    name = doc_name.removesuffix("/")
    return name if name in test_layers.PACKAGES else f"{PACKAGE}.{name}"


def installed_modules() -> dict[str, bool]:
    """{module name: whether it is a package} of the installed packages' code."""
    found = {name: path.name == "__init__.py" for name, path in test_layers.source_files().items()}
    return {**found, **{package: True for package in test_layers.PACKAGES}}  # source_files skips their __init__


def layer_table_drift(rows: list[tuple[str, list[str]]], layers: tuple[tuple[str, ...], ...],
                      modules: dict[str, bool]) -> list[str]:
    """How the doc's layer table (`layer_table`) differs from `layers` (LAYERS): a name that is no
    module, no entry of LAYERS, or listed twice; an entry of LAYERS missing; two names in an
    order LAYERS does not have (each row must be one or more consecutive entries, in order)."""
    rank = {name: i for i, names in enumerate(layers) for name in names}
    problems, seen, placed = [], {}, []
    for row, (layer, names) in enumerate(rows):
        for doc_name in names:
            module = module_of(doc_name)
            if module in seen:
                problems.append(f"`{doc_name}` is listed twice (layers {seen[module]!r} and {layer!r})")
                continue
            seen[module] = layer
            if module not in modules:
                problems.append(f"`{doc_name}` (layer {layer!r}): no such module or package")
            elif modules[module] != doc_name.endswith("/"):
                problems.append(f"`{doc_name}` (layer {layer!r}): a package takes a trailing '/', a module none")
            if module in rank:
                placed.append((row, doc_name, layer, rank[module]))
            else:
                problems.append(f"`{doc_name}` (layer {layer!r}) is not an entry of LAYERS")
    problems += [f"{name} (LAYERS[{i}]) is missing from the layer table" for name, i in rank.items()
                 if name not in seen]
    problems += [f"LAYERS[{i}] names {name}, which is no module or package" for name, i in rank.items()
                 if name not in modules]
    for row_a, name_a, layer_a, rank_a in placed:
        problems += [f"the table lists `{name_a}` ({layer_a!r}, LAYERS[{rank_a}]) before `{name_b}` "
                     f"({layer_b!r}, LAYERS[{rank_b}]): LAYERS has them the other way or in one entry"
                     for row_b, name_b, layer_b, rank_b in placed if row_a < row_b and rank_a >= rank_b]
    return problems


def serve_interval_phases(source: str) -> set[str]:
    """The functions of serving's phase modules (all but `types`) that `serve_interval` calls."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith(f"{PACKAGE}.serving.") and not node.module.endswith(".types")
                for alias in node.names}
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "serve_interval")
    return {n.func.id for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in imported and n.func.id[0].islower()}


def serve_interval_order(source: str) -> list[str]:
    """The phases `serve_interval` calls, in source order, a repeat in a row counted once."""
    tree = ast.parse(source)
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "serve_interval")
    phases = serve_interval_phases(source)
    calls = sorted((n.lineno, n.col_offset, n.func.id) for n in ast.walk(body) if isinstance(n, ast.Call)
                   and isinstance(n.func, ast.Name) and n.func.id in phases)
    return [name for i, (_, _, name) in enumerate(calls) if i == 0 or calls[i - 1][2] != name]


def data_flow_phases(text: str) -> list[str]:
    """The phases the doc's "One step" lists for `serving.serve_interval`, in its order."""
    body = " ".join(section(text, "One step").split())
    match = re.search(r"`serving\.serve_interval\([^`]*\)`: (.*?) \(the phases below", body)
    assert match is not None, "One step: no '`serving.serve_interval(...)`: phases (the phases below' item"
    return CODE.findall(match.group(1))


def called_names(source: str) -> set[str]:
    """Every name called in `source`, as `f(...)` or `x.f(...)`."""
    calls = (n.func for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call))
    return {f.id if isinstance(f, ast.Name) else f.attr for f in calls if isinstance(f, (ast.Name, ast.Attribute))}


def phase_table_drift(phases: list[tuple[str, str]], in_serve_interval: set[str], called_in_tests: set[str]
                      ) -> list[str]:
    """How the doc's phase table differs from the code: a phase its module does not define, one
    `serve_interval` does not call (or calls and the table lacks), one no phase test calls."""
    problems = []
    for name, path in phases:
        module = importlib.import_module(f"{PACKAGE}." + path.removesuffix(".py").replace("/", "."))
        if not callable(getattr(module, name, None)):
            problems.append(f"phase `{name}`: {path} defines no such function")
        if name not in in_serve_interval:
            problems.append(f"phase `{name}`: serve_interval does not call it")
        if name not in called_in_tests:
            problems.append(f"phase `{name}`: no test in {', '.join(PHASE_TESTS)} calls it directly")
    listed = {name for name, _ in phases}
    problems += [f"serve_interval calls `{name}`, which the phase table lacks"
                 for name in sorted(in_serve_interval - listed)]
    return problems


def _module_named(first: str, modules: dict[str, bool]) -> str | None:
    """The module a doc's dotted name starts with: `inferencegym_jax.<first>`, a top-level package,
    or the shortest module whose last part is `first` (`workload` -> inferencegym_jax.traffic.workload)."""
    if f"{PACKAGE}.{first}" in modules or first in test_layers.PACKAGES:
        return module_of(first)
    found = sorted((m for m in modules if m.endswith(f".{first}")), key=lambda m: m.count("."))
    return found[0] if found else None


def dotted_problem(name: str, modules: dict[str, bool]) -> str | None:
    """Why `module.attribute...` does not resolve in the installed code; None when it does or
    when it does not start with a module's name (`Observation.describe`, `m.cost_usd`)."""
    first, *rest = name.split(".")
    module = _module_named(first, modules)
    if module is None:
        return None
    obj = importlib.import_module(module)
    for part in rest:
        if f"{module}.{part}" in modules:
            module = f"{module}.{part}"
            obj = importlib.import_module(module)
        elif hasattr(obj, part):
            obj, module = getattr(obj, part), f"{module}.{part}"
        else:
            return f"`{name}`: {module} has no `{part}`"
    return None


def reference_problems(text: str, modules: dict[str, bool], package_dirs: list[Path], source_words: set[str],
                       commands: set[str]) -> list[str]:
    """The doc's code-font references that the code does not have: a path in no folder of the
    repository root, the package or its subpackages; a dotted name that does not resolve; an
    identifier no source file contains; a script or `inferencegym` subcommand that does not exist.
    Placeholders (`<id>`) and expressions with spaces are not references."""
    problems = []
    for token in sorted(set(CODE.findall(text))):
        if token.startswith(("python ", "inferencegym ")):
            word = token.split()[1]
            if token.startswith("python ") and not (ROOT / word).is_file():
                problems.append(f"`{token}`: no script {word}")
            elif token.startswith("inferencegym ") and word not in commands:
                problems.append(f"`{token}`: no subcommand {word!r} (has {sorted(commands)})")
            continue
        token = token.split("(")[0]
        if "<" in token or not re.fullmatch(r"[\w./-]+", token):
            continue
        if "/" in token or re.search(r"\.(py|md|toml|json|html|npz)$", token):
            if not any((folder / token).exists() for folder in [ROOT, *package_dirs]):
                problems.append(f"`{token}`: no such file or folder")
        elif "." in token:
            problem = dotted_problem(token, modules)
            if problem:
                problems.append(problem)
        elif token not in source_words:
            problems.append(f"`{token}`: no source file of the packages contains this name")
    return problems


def package_dirs(modules: dict[str, bool]) -> list[Path]:
    """The folder of every installed package and subpackage."""
    return sorted({path.parent for path in test_layers.source_files().values()})


def source_words() -> set[str]:
    """Every word of the packages' and the tests' source files (but this one's)."""
    tests = [path for path in (ROOT / "tests").glob("*.py") if path.name != Path(__file__).name]
    paths = [*test_layers.source_files().values(), *tests]
    return {word for path in paths for word in re.findall(r"\w+", path.read_text())}


def cli_commands() -> set[str]:
    from inferencegym_jax.cli import build_parser

    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(subcommands.choices)


# ---------------------------------------------------------------- the doc is true


def test_the_layer_table_is_layers():
    problems = layer_table_drift(layer_table(DOC.read_text()), test_layers.LAYERS, installed_modules())
    assert not problems, "docs/ARCHITECTURE.md's layer table and tests/test_layers.py's LAYERS differ:\n" + \
        "\n".join(problems)


def test_the_phase_table_is_serve_interval_and_each_phase_is_tested_directly():
    serving_init = ROOT / PACKAGE / "serving" / "__init__.py"
    tested = set().union(*(called_names((ROOT / "tests" / name).read_text()) for name in PHASE_TESTS))
    problems = phase_table_drift(phase_table(DOC.read_text()), serve_interval_phases(serving_init.read_text()), tested)
    assert not problems, "\n".join(problems)


def test_the_data_flow_lists_serve_intervals_phases_in_order():
    source = (ROOT / PACKAGE / "serving" / "__init__.py").read_text()
    assert data_flow_phases(DOC.read_text()) == serve_interval_order(source)


def test_every_code_reference_exists():
    modules = installed_modules()
    problems = reference_problems(DOC.read_text(), modules, package_dirs(modules), source_words(), cli_commands())
    assert not problems, "docs/ARCHITECTURE.md names what the code does not have:\n" + "\n".join(problems)


def test_the_train_config_naming_is_the_clis():
    """"Add a task" names the train config as `inferencegym train --task <id>` looks for it, and
    every registered task has one so named."""
    from inferencegym_jax.cli.training_commands import shipped_config_for
    from inferencegym_jax.tasks import registered_envs

    add_a_task = " ".join(section(DOC.read_text(), "How to add...").split())
    assert "`configs/train/ppo_task<N>.toml` for a v0 id" in add_a_task
    assert "`configs/train/ppo_task<N>_v<k>.toml` for a later one" in add_a_task
    for env_id in registered_envs():
        number, version = re.fullmatch(r"InferenceGym-Task(\d+)-v(\d+)", env_id).groups()
        named = f"ppo_task{number}" + ("" if version == "0" else f"_v{version}")
        assert shipped_config_for(env_id) == named, env_id  # ValueError when the task has none


# ---------------------------------------------------------------- the checks can fail


def doctored(old: str, new: str) -> str:
    text = DOC.read_text()
    assert old in text, old
    return text.replace(old, new, 1)


def test_the_layer_check_sees_a_missing_a_moved_and_an_unknown_module():
    modules = installed_modules()

    def drift(text: str) -> str:
        return "\n".join(layer_table_drift(layer_table(text), test_layers.LAYERS, modules))

    assert "inferencegym_jax.sharding (LAYERS[" in drift(doctored("`sharding`, ", ""))  # missing
    moved = doctored("| base | `numerics`, `files`, `profiles`,", "| base | `numerics`, `files`,")
    moved = moved.replace("| `perf_model`, ", "| `profiles`, `perf_model`, ", 1)  # profiles in a higher row
    assert "`xla_ops` ('speed', LAYERS[1]) before `profiles`" in drift(moved)
    unknown = doctored("| `xla_ops` |", "| `xla_ops`, `nonexistent` |")
    assert "`nonexistent` (layer 'speed'): no such module" in drift(unknown)
    assert "`serving` (layer 'simulator'): a package takes" in drift(doctored("| `serving/` |", "| `serving` |"))
    assert "`env` is listed twice" in drift(doctored("| `tasks` |", "| `tasks`, `env` |"))
    # a module someone adds to LAYERS without the doc
    assert "inferencegym_jax.brand_new (LAYERS[0]) is missing" in "\n".join(layer_table_drift(
        layer_table(DOC.read_text()), (("inferencegym_jax.brand_new", *test_layers.LAYERS[0]),
                                       *test_layers.LAYERS[1:]), modules))


def test_the_phase_check_sees_an_unlisted_an_unknown_and_an_untested_phase():
    source = (ROOT / PACKAGE / "serving" / "__init__.py").read_text()
    phases = phase_table(doctored("`decode_on_time`, `kept_share` |", "`decode_on_time` |"))
    assert phase_table_drift(phases, serve_interval_phases(source), {"admit_on_time"} | {p for p, _ in phases}) == [
        "serve_interval calls `kept_share`, which the phase table lacks"]
    phases = phase_table(doctored("| `enqueue` |", "| `enqueue`, `enqueue_twice` |"))
    got = "\n".join(phase_table_drift(phases, serve_interval_phases(source), {p for p, _ in phases}))
    assert "serving/admission.py defines no such function" in got and "`enqueue_twice`: serve_interval" in got
    phases = phase_table(DOC.read_text())
    got = phase_table_drift(phases, serve_interval_phases(source), {p for p, _ in phases} - {"kept_share"})
    assert got == [f"phase `kept_share`: no test in {', '.join(PHASE_TESTS)} calls it directly"]


def test_the_data_flow_check_sees_two_phases_swapped():
    source = (ROOT / PACKAGE / "serving" / "__init__.py").read_text()
    swapped = data_flow_phases(doctored("`enqueue`, `mixed_admission_limits`,", "`mixed_admission_limits`, `enqueue`,"))
    assert swapped != serve_interval_order(source) and sorted(swapped) == sorted(serve_interval_order(source))


def test_the_reference_check_sees_a_renamed_name_a_missing_file_and_command():
    modules = installed_modules()
    text = ("`serving.serve_intervals(state)` `scripts/no_such_script.py` `NoSuchConstant` "
            "`python scripts/gone.py --x` `inferencegym trian --task 3` `control.mpc.run_mpc_episodes` "
            "`InferenceGym-Task<N>-v<k>` `m.cost_usd` `serving/goodput.py` `static/view.html`")
    got = reference_problems(text, modules, package_dirs(modules), source_words(), cli_commands())
    assert got == ["`NoSuchConstant`: no source file of the packages contains this name",
                   "`inferencegym trian --task 3`: no subcommand 'trian' (has " + str(sorted(cli_commands())) + ")",
                   "`python scripts/gone.py --x`: no script scripts/gone.py",
                   "`scripts/no_such_script.py`: no such file or folder",
                   "`serving.serve_intervals`: inferencegym_jax.serving has no `serve_intervals`"], got
