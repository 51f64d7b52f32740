"""The quickstart pages show only commands the e2e tier runs, and the README stays a short front door.

A command in a quickstart's code block is a line whose program is ``rayrig``, ``make`` or
``pyinfra`` (after a ``$`` prompt and ``NAME=value`` prefixes), in a block of any language. Each
must be one the e2e tier (``tests/e2e/*.py``) runs:

- ``rayrig SUB [SUBSUB]``: the e2e tier calls ``rayrig(...)`` or ``rayrig_background(...)`` (labkit's
  helpers, which run ``python -m rayrig``) with the same subcommand;
- ``make TARGET``: the e2e tier runs ``make TARGET`` (a string, or an f-string over a parametrized
  ``target``);
- ``pyinfra INVENTORY DEPLOY_FILE [OPTIONS]``: the e2e tier runs that deploy file with pyinfra
  (labkit's ``deploy()`` runs ``deploy/cluster.py``) and passes every option the page shows in
  one of its ``deploy(...)`` calls (``-y`` aside, which they all pass).

In a shell block (``bash``, ``sh``, ``shell``, ``console`` or none) any other program is refused
as well: a command the tests do not run goes in a block the page marks illustrative, an admonition
titled "Illustrative" (``!!! example "Illustrative"``) that holds the block, and the page says in
its text that such blocks are shown, not run by the test suite.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root
from rayrig.cli import build_parser, leaves

ROOT = repo_root()
QUICKSTARTS = sorted((ROOT / "docs" / "quickstart").glob("*.md"))
E2E = sorted((ROOT / "tests" / "e2e").glob("*.py"))
README = ROOT / "README.md"
README_MAX_LINES = 150

PROGRAMS = {"rayrig", "make", "pyinfra"}
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
ILLUSTRATIVE = re.compile(r'^(?P<indent>\s*)(!!!|\?\?\?\+?)\s+\w+\s+"Illustrative"\s*$')
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


@dataclass(frozen=True)
class Command:
    """One command line of a page's code block."""

    page: str
    line: int
    words: tuple[str, ...]  # the program (its basename) and its arguments
    illustrative: bool
    shell: bool  # in a shell block, where any program counts as a command

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {' '.join(self.words)}"


def page_commands(path: Path) -> list[Command]:
    """Every command line of ``path``'s code blocks, each marked illustrative or not."""
    lines = path.read_text().splitlines()
    commands: list[Command] = []
    admonition: int | None = None  # the indent of the enclosing "Illustrative" admonition
    fence: tuple[str, str, str] | None = None  # (indent, fence, language) of the open block
    for number, line in enumerate(lines, start=1):
        if fence is None:
            if admonition is not None and line.strip() and len(line) - len(line.lstrip()) <= admonition:
                admonition = None
            if m := ILLUSTRATIVE.match(line):
                admonition = len(m["indent"])
                continue
            if m := FENCE.match(line):
                fence = (m["indent"], m["fence"], m["lang"].lower())
            continue
        if line.strip().startswith(fence[1]) and not line.strip().strip(fence[1][0]):
            fence = None
            continue
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        text = re.split(r"\s#\s|\s#$", " " + text, maxsplit=1)[0].strip()  # a trailing comment
        if not text or text.startswith("#"):
            continue
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        while words and ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words:
            continue
        words[0] = Path(words[0]).name
        shell = fence[2] in SHELL_LANGUAGES
        if words[0] in PROGRAMS or shell:
            commands.append(Command(path.name, number, tuple(words), admonition is not None, shell))
    return commands


# --- What the e2e tier runs ------------------------------------------------------------------------


def _strings(node: ast.AST) -> list[str] | None:
    """The string constants a list or tuple literal starts with (None for anything else)."""
    if not isinstance(node, ast.List | ast.Tuple):
        return None
    out = []
    for element in node.elts:
        if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
            break
        out.append(element.value)
    return out


def _called(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")


@dataclass
class E2eRuns:
    """What the e2e tier's sources run: rayrig subcommand paths, make targets, pyinfra deploys."""

    rayrig: set[tuple[str, ...]]
    make: set[str]
    deploy_files: set[str]
    deploy_options: set[str]


def e2e_runs(files: list[Path] = E2E) -> E2eRuns:
    runs = E2eRuns(set(), set(), set(), set())
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        lists = {  # module-level NAME = ["submit", INVENTORY]: what *NAME passes
            target.id: _strings(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name) and _strings(node.value)
        }
        targets = set()  # the values of a parametrized "target"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and _called(node) == "parametrize"
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "target"
            ):
                targets.update(_strings(node.args[1]) or [])
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) in ("rayrig", "rayrig_background") and node.args:
                words: list[str] = []
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        words.append(arg.value)
                    elif isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name) and arg.value.id in lists:
                        words.extend(lists[arg.value.id])
                    else:
                        break
                for n in (1, 2):
                    if len(words) >= n:
                        runs.rayrig.add(tuple(words[:n]))
            elif isinstance(node, ast.Call) and _called(node) == "deploy":
                runs.deploy_options.update(
                    a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")
                )
            elif isinstance(node, ast.List):
                literal = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if "pyinfra" in literal:  # [sys.executable, "-m", "pyinfra", inventory, "deploy/cluster.py", ...]
                    runs.deploy_files.update(w for w in literal if w.endswith(".py"))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if m := re.fullmatch(r"make ([\w-]+)", node.value):
                    runs.make.add(m[1])
            elif isinstance(node, ast.JoinedStr) and node.values:
                first = node.values[0]
                if isinstance(first, ast.Constant) and first.value == "make " and len(node.values) == 2:
                    runs.make.update(targets)
    return runs


def _subcommands() -> dict[tuple[str, ...], int]:
    """Every rayrig subcommand path (``("cloud", "up")``), with how many words it has."""
    paths = {tuple(leaf.prog.split()[1:]) for leaf in leaves(build_parser())}
    return {path: len(path) for path in paths}


SUBCOMMANDS = _subcommands()


def not_run_by_e2e(command: Command, runs: E2eRuns) -> str | None:
    """Why the e2e tier does not run ``command`` (None when it does)."""
    program, args = command.words[0], list(command.words[1:])
    if program == "rayrig":
        path = next((p for p in SUBCOMMANDS if tuple(args[: len(p)]) == p), None)
        if path is None:
            return f"`rayrig {' '.join(args[:2])}` is no rayrig subcommand"
        return None if path in runs.rayrig else f"the e2e tier never runs `rayrig {' '.join(path)}`"
    if program == "make":
        missing = [t for t in args if not t.startswith("-") and "=" not in t and t not in runs.make]
        return f"the e2e tier never runs `make {' '.join(missing)}`" if missing or not args else None
    if program == "pyinfra":
        files = [a for a in args if a.endswith(".py") and not a.startswith("inventories/")]
        options = [a.split("=")[0] for a in args if a.startswith("-") and a not in ("-y", "--yes")]
        if len(files) != 1 or files[0] not in runs.deploy_files:
            return f"the e2e tier runs pyinfra with {sorted(runs.deploy_files)}, not {files}"
        unknown = [o for o in options if o not in runs.deploy_options]
        return f"the e2e tier's deploys never pass {unknown}" if unknown else None
    return f"`{program}` is not a command the test suite runs on this page"


# --- The tests -------------------------------------------------------------------------------------


def test_the_parser_finds_commands_and_illustrative_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n```bash\nrayrig status inventories/lab.py   # every host\n$ RAYRIG_LAB=x make demo\n```\n\n"
        '!!! example "Illustrative"\n\n    ```bash\n    rayrig cloud up spec.toml\n    git clone x\n    ```\n\n'
        "Text again.\n\n```text\nhost a: ray_num_gpu = 8: expected a known rayrig key\n```\n\n"
        "```bash\n.venv/bin/rayrig lab up\n```\n"
    )
    found = [(c.words[:2], c.illustrative) for c in page_commands(page)]
    assert found == [
        (("rayrig", "status"), False),
        (("make", "demo"), False),
        (("rayrig", "cloud"), True),
        (("git", "clone"), True),
        (("rayrig", "lab"), False),
    ]


def test_e2e_runs_are_read_from_the_e2e_sources():
    runs = e2e_runs()
    assert {("status",), ("submit",), ("check",), ("dashboard",), ("logs",)} <= runs.rayrig
    assert "demo" in runs.make
    assert "deploy/cluster.py" in runs.deploy_files
    assert "--limit" in runs.deploy_options


def test_a_command_the_e2e_tier_does_not_run_is_caught():
    runs = E2eRuns(rayrig={("status",)}, make={"demo"}, deploy_files={"deploy/cluster.py"}, deploy_options={"--limit"})

    def why(line: str) -> str | None:
        return not_run_by_e2e(Command("p.md", 1, tuple(line.split()), False, True), runs)

    assert why("rayrig status inventories/lab.py") is None
    assert why("make demo") is None
    assert why("pyinfra inventories/x.py deploy/cluster.py -y --limit h1") is None
    assert "never runs `rayrig cloud up`" in why("rayrig cloud up spec.toml")
    assert "no rayrig subcommand" in why("rayrig stauts inventories/lab.py")
    assert "never runs `make lab-down`" in why("make lab-down")
    assert "never pass ['--dry']" in why("pyinfra inventories/x.py deploy/cluster.py --dry")
    assert "not a command" in why("git clone somewhere")


@pytest.mark.parametrize("page", QUICKSTARTS, ids=lambda p: p.name)
def test_quickstart_commands_are_run_by_the_e2e_tier_or_marked_illustrative(page):
    runs = e2e_runs()
    commands = page_commands(page)
    assert any(not c.illustrative for c in commands), f"{page.name} shows no command the tests run"
    problems = [f"{c}: {why}" for c in commands if not c.illustrative and (why := not_run_by_e2e(c, runs))]
    assert not problems, (
        "commands in quickstart code blocks that the e2e tier does not run; run them there, or put the block "
        'in an `!!! example "Illustrative"` admonition:\n' + "\n".join(problems)
    )


@pytest.mark.parametrize("page", QUICKSTARTS, ids=lambda p: p.name)
def test_quickstart_says_what_illustrative_means(page):
    commands = page_commands(page)
    if any(c.illustrative for c in commands):
        text = " ".join(page.read_text().split())
        assert "shown, not run by rayrig's test suite" in text, f"{page.name} marks blocks illustrative unexplained"


def test_readme_is_short():
    count = len(README.read_text().splitlines())
    assert count <= README_MAX_LINES, f"README.md has {count} lines; at most {README_MAX_LINES}: move detail to docs/"


def readme_links() -> list[str]:
    text = README.read_text()
    return [m[1].split("#")[0] for m in re.finditer(r"\]\(([^)\s]+)\)", text) if not re.match(r"\w+://", m[1])]


@pytest.mark.parametrize(
    "page",
    [
        "docs/quickstart/lab.md",
        "docs/quickstart/on-prem.md",
        "docs/quickstart/ec2.md",
        "docs/guides/",
        "docs/reference/",
        "docs/troubleshooting.md",
    ],
)
def test_readme_links_into_the_site(page):
    links = readme_links()
    assert any(link == page or (page.endswith("/") and link.startswith(page)) for link in links), (
        f"README.md links to no {page}; its links: {links}"
    )


def test_readme_docs_links_point_at_files():
    links = [link for link in readme_links() if link.startswith("docs/")]
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert links and not missing, f"README.md links to docs that do not exist: {missing}"
