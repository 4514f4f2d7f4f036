"""The README's code blocks run as written against the installed package, and the docs hold together.

Every fenced block of README.md is run or checked by a named test, by its language and content:

- ```python: executed here (`test_readme_python_block_runs`);
- ```py (the OpenEnv client) and the ```bash block that starts "# server quick start": run
  against a live server by tests/test_server.py (`test_readme_openenv_client_snippet_runs`,
  `test_readme_curl_quick_start_runs`); the ```py block of the MCP agent (`MCPToolClient`) by
  tests/test_mcp.py (`test_readme_mcp_agent_loop_runs`);
- ```bash blocks of `inferencegym ...` lines: every line parsed by the command's own parser
  (`test_readme_command_lines_parse`), which checks subcommands, flags and task ids;
- the ```bash setup block of `bash scripts/...` lines: the scripts exist, and the main job's
  command parses and trains the task the README names (`test_setup_block_names_the_scripts_and_the_main_job`);
- ```text: not code (a layout, a diff).

`test_every_readme_code_block_is_checked` fails on a block none of these covers.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 400
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
SERVER_TESTS = ("test_readme_curl_quick_start_runs", "test_readme_openenv_client_snippet_runs")


def code_blocks(path: Path = README) -> list[tuple[str, str]]:
    """Every fenced block of a Markdown file: (language, text), in order."""
    return FENCE.findall(path.read_text())


def python_blocks() -> list[str]:
    return [body for lang, body in code_blocks() if lang == "python"]


def _command_lines(body: str) -> list[list[str]]:
    """The block's commands, one argv per non-empty line, comments dropped; [] for a block that is
    not a list of plain command lines (a line shlex cannot split: a script, not commands)."""
    try:
        return [argv for line in body.replace("\\\n", " ").splitlines() if (argv := shlex.split(line, comments=True))]
    except ValueError:
        return []


def _is_cli_block(lang: str, body: str) -> bool:
    lines = _command_lines(body)
    return lang == "bash" and bool(lines) and all(argv[0] == "inferencegym" for argv in lines)


def _is_setup_block(lang: str, body: str) -> bool:
    lines = _command_lines(body)
    return lang == "bash" and bool(lines) and all(argv[:1] == ["bash"] and argv[1].startswith("scripts/")
                                                  for argv in lines)


def _checker(lang: str, body: str) -> str | None:
    """The name of the test that runs or checks a block (None: no test does)."""
    if lang == "python":
        return "test_readme_python_block_runs"
    if lang == "py" and "GenericEnvClient" in body:
        return "test_server.py::test_readme_openenv_client_snippet_runs"
    if lang == "py" and "MCPToolClient" in body:
        return "test_mcp.py::test_readme_mcp_agent_loop_runs"
    if lang == "bash" and body.startswith("# server quick start"):
        return "test_server.py::test_readme_curl_quick_start_runs"
    if _is_cli_block(lang, body):
        return "test_readme_command_lines_parse"
    if _is_setup_block(lang, body):
        return "test_setup_block_names_the_scripts_and_the_main_job"
    if lang == "text":
        return "not code"
    return None


def test_every_readme_code_block_is_checked():
    blocks = code_blocks()
    assert blocks, "README.md has no code blocks"
    unchecked = [f"```{lang} block {i}: {body[:60]!r}" for i, (lang, body) in enumerate(blocks)
                 if _checker(lang, body) is None]
    assert not unchecked, "no test runs these README blocks (see tests/test_readme.py):\n" + "\n".join(unchecked)
    # The blocks test_server.py runs are found by these patterns; its tests must still exist.
    server_tests = (ROOT / "tests" / "test_server.py").read_text()
    for name in SERVER_TESTS:
        assert f"def {name}(" in server_tests, name
    assert "def test_readme_mcp_agent_loop_runs(" in (ROOT / "tests" / "test_mcp.py").read_text()


def test_readme_has_a_quick_start_on_the_newest_task():
    blocks = python_blocks()
    assert blocks and 'ig.make("InferenceGym-Task3-v2")' in blocks[0]


def _python_params() -> list:
    """One case per python block; rejax's (a PPO run, ~1.5 min on 2 cores, mostly compilation) in
    the slow tier, beside tests/test_gymnax_wrappers.py's test of the same settings, and the
    fleet's (compiling its 60-s step, ~20 s), beside tests/test_fleet_env.py."""
    return [pytest.param(i, marks=[pytest.mark.slow] if "import rejax" in block or "Fleet" in block else [])
            for i, block in enumerate(python_blocks())]


@pytest.mark.parametrize("index", _python_params())
def test_readme_python_block_runs(index, capsys):
    exec(compile(python_blocks()[index], f"README.md[python {index}]", "exec"), {})


def _parse(argv: list[str], where: str):
    """argv parsed by the `inferencegym` parser; a refused line fails the test with its message."""
    from inferencegym_jax.cli import build_parser

    try:
        return build_parser().parse_args(argv)
    except SystemExit as err:  # argparse's one-line error is on stderr, which pytest shows
        pytest.fail(f"{where}: `inferencegym {shlex.join(argv)}` is refused by the parser (exit {err.code})")


def test_readme_command_lines_parse():
    lines = [argv for lang, body in code_blocks() if _is_cli_block(lang, body) for argv in _command_lines(body)]
    assert {argv[1] for argv in lines} >= {"train", "eval", "sweep", "serve"}, lines
    for argv in lines:
        args = _parse(argv[1:], "README.md")
        assert callable(args.func)


def _main_job_argv() -> list[str]:
    """The `inferencegym ...` arguments of scripts/run_main.sh's command (without its "$@")."""
    for line in (ROOT / "scripts" / "run_main.sh").read_text().splitlines():
        argv = shlex.split(line, comments=True)
        for i, word in enumerate(argv):
            if word.endswith("bin/inferencegym"):
                return [a for a in argv[i + 1:] if a != "$@"]
    raise AssertionError("scripts/run_main.sh runs no `inferencegym` command")


def test_setup_block_names_the_scripts_and_the_main_job():
    setup = [body for lang, body in code_blocks() if _is_setup_block(lang, body)]
    assert len(setup) == 1, "README.md needs one setup block of `bash scripts/...` lines"
    scripts = [argv[1] for argv in _command_lines(setup[0])]
    assert scripts == ["scripts/run_main.sh", "scripts/run_tests.sh"], scripts
    assert all((ROOT / path).is_file() for path in scripts)
    args = _parse(_main_job_argv(), "scripts/run_main.sh")
    assert args.command == "train"
    named = re.search(r"InferenceGym-Task\d+-v\d+", setup[0])
    assert named and args.task == named.group(0), (
        f"README's setup block says the main job trains {named and named.group(0)}; run_main.sh trains {args.task}")


def test_observation_table_is_current():
    from inferencegym_jax.observation import Observation

    assert Observation.describe() in README.read_text(), "paste Observation.describe() into README.md"


def test_readme_is_at_most_400_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {MAX_README_LINES})"


# --- relative links --------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        base = _anchor(heading)
        n = seen.get(base, 0)
        anchors.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return anchors


def _links(path: Path) -> list[str]:
    """Relative link targets of a Markdown file, outside code blocks and inline code."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", path.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def _docs() -> list[Path]:
    return [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_resolves():
    broken = []
    for doc in _docs():
        for target in _links(doc):
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_link_check_sees_links_and_anchors():
    """The link test can fail: it finds the README's links and tells a heading from a missing one."""
    assert "docs/RESULTS.md" in _links(README)
    assert {"setup-two-commands", "server-openenv", "train-evaluate-sweep"} <= _anchors(README)
    assert _anchor("Against issue 12's bar") == "against-issue-12s-bar"
