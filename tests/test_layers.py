"""Straight layers: no module imports one above it (docs/ARCHITECTURE.md), none imports in a cycle.

Every import statement of the installed packages counts, those inside functions too.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# Lowest first. A module may import modules of its own layer or of lower ones; packages are
# listed by prefix ("inferencegym_jax.serving" covers its modules); a module named on its own is
# found before its package, listed higher (traffic.sampling below traffic.traces).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("inferencegym_jax.numerics", "inferencegym_jax.files", "inferencegym_jax.profiles", "inferencegym_jax.spaces"),
    ("inferencegym_jax.xla_ops",),
    ("inferencegym_jax.perf_model", "inferencegym_jax.traffic.sampling", "inferencegym_jax.traffic.strata",
     "inferencegym_jax.traffic.lengths", "inferencegym_jax.actions", "inferencegym_jax.protocols"),
    ("inferencegym_jax.traffic.workload",),
    ("inferencegym_jax.traffic",),
    ("inferencegym_jax.serving",),
    # R replicas of the server: routing, vmapped intervals, scaling; a day of real load; two weeks of
    # clients' load and the reservation task's day model
    ("inferencegym_jax.fleet.types", "inferencegym_jax.fleet.routing", "inferencegym_jax.fleet.request_routing",
     "inferencegym_jax.fleet.physics",
     "inferencegym_jax.fleet.day_traffic", "inferencegym_jax.fleet.servegen", "inferencegym_jax.fleet.reservation_day"),
    ("inferencegym_jax.validation", "inferencegym_jax.observation", "inferencegym_jax.reward",
     "inferencegym_jax.ttft_tally"),
    ("inferencegym_jax.task_config",),
    ("inferencegym_jax.param_checks",),
    ("inferencegym_jax.env",),
    # the fleet env (an autoscaler and a router over the fleet); the day-ahead reservation env
    ("inferencegym_jax.fleet.env", "inferencegym_jax.fleet.reservation"),
    ("inferencegym_jax.tasks",),
    ("inferencegym_jax.fleet.tasks", "inferencegym_jax.fleet.reservation_tasks"),
    ("inferencegym_jax.registry",),  # `make` of every id: servers, fleets, reservation tasks
    ("inferencegym_jax.sharding", "inferencegym_jax.graders", "inferencegym_jax.evaluate"),
    ("inferencegym_jax.baselines", "inferencegym_jax.wrappers", "inferencegym_jax.control",
     "inferencegym_jax.fleet.evaluate", "inferencegym_jax.fleet.baselines",
     "inferencegym_jax.fleet.reservation_baselines"),
    ("inferencegym_jax.generate", "inferencegym_jax.testing", "inferencegym_jax.episode_plot",
     "inferencegym_jax.fleet.plot", "inferencegym_jax.fleet.reservation_plot",
     "inferencegym_jax.loadtest", "inferencegym_jax.request_stats", "inferencegym_jax.interop.gymnasium_env",
     "inferencegym_jax.interop.gym_grading",
     "inferencegym_jax.interop.gym_vector", "inferencegym_jax.interop.gym_single",
     "inferencegym_jax.interop.gym_host", "inferencegym_jax.interop.gym_programs",
     "inferencegym_jax.interop.fleet_gym", "inferencegym_jax.interop.reservation_gym"),
    ("inferencegym_jax.interop", "inferencegym_jax.fleet"),  # fleet: the package's __init__ (its core re-exported)
    ("training",),
    ("inferencegym_jax.training_setup",),  # builds what training trains on: the serving env, its teacher
    ("inferencegym_jax.server",),
    ("inferencegym_jax.cli",),
)
PACKAGES = ("inferencegym_jax", "training")


def layer_of(module: str) -> int | None:
    for rank, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return rank
    return None


def source_files() -> dict[str, Path]:
    """Module name -> source file of every module of the installed packages."""
    out = {}
    for package in PACKAGES:
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[0].startswith("_"):  # _data, _configs: no code
                continue
            name = ".".join((package, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


def imports_of(path: Path, module: str) -> set[str]:
    """Project modules imported anywhere in a file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                is_package = path.name == "__init__.py"
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    files = source_files()
    return {name: {m for m in imports_of(path, name) if m in files and m != name} for name, path in files.items()}


def test_every_module_has_a_layer():
    missing = sorted(m for m in source_files() if m not in PACKAGES and layer_of(m) is None)
    assert not missing, f"add these modules to LAYERS (and docs/ARCHITECTURE.md): {missing}"


def test_no_module_imports_upwards():
    upward = []
    for module, deps in graph().items():
        rank = layer_of(module)
        if rank is None:
            continue
        for dep in deps:
            if module.startswith(dep + "."):  # its own package: `from pkg import sibling`
                continue
            dep_rank = layer_of(dep)
            if dep_rank is not None and dep_rank > rank:
                upward.append(f"{module} (layer {rank}) imports {dep} (layer {dep_rank})")
    assert not upward, "\n".join(sorted(upward))


def test_imports_have_no_cycles():
    edges = graph()
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            # a package's __init__ importing its own modules is structure, not a cycle
            if dep.startswith(node + ".") or node.startswith(dep + "."):
                continue
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


# What training (env-agnostic: it trains any env with the gymnax call shape) must not import: the
# controllers and the serving setup that builds the env and the imitation teacher for it.
TRAINER_FORBIDDEN = ("inferencegym_jax.control", "inferencegym_jax.training_setup")


def serving_imports_of_trainer(edges: dict[str, set[str]]) -> list[str]:
    """"module imports dep" for every training module importing a TRAINER_FORBIDDEN module."""
    return sorted(f"{module} imports {dep}" for module, deps in edges.items()
                  if module == "training" or module.startswith("training.")
                  for dep in deps if any(dep == f or dep.startswith(f + ".") for f in TRAINER_FORBIDDEN))


def test_the_trainer_imports_no_serving_code():
    """training/ is free of serving code: neither the controllers nor the serving setup."""
    found = serving_imports_of_trainer(graph())
    assert not found, "\n".join(found)


def test_the_trainer_check_sees_a_serving_import(tmp_path):
    """Not vacuous: a training module importing the MPC, or the setup, is reported."""
    path = tmp_path / "fake.py"
    path.write_text("from inferencegym_jax.control import mpc\n"
                    "def f():\n    from inferencegym_jax.training_setup.teachers import mpc_teacher\n")
    edges = {"training.fake": imports_of(path, "training.fake")}
    assert serving_imports_of_trainer(edges) == [
        "training.fake imports inferencegym_jax.control", "training.fake imports inferencegym_jax.control.mpc",
        "training.fake imports inferencegym_jax.training_setup.teachers",
        "training.fake imports inferencegym_jax.training_setup.teachers.mpc_teacher"]


def test_the_checker_sees_an_upward_import(tmp_path):
    """Not vacuous: an env module importing the trainer is reported."""
    path = tmp_path / "fake.py"
    path.write_text("def f():\n    from training.ppo import make_train\n")
    assert "training.ppo" in imports_of(path, "inferencegym_jax.env")
    assert layer_of("training.ppo") > layer_of("inferencegym_jax.env")
