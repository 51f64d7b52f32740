"""The layers of pyproject.toml's import-linter contracts hold, and they have teeth.

``make lint`` runs ``lint-imports`` on the tree; these tests also run it on a copy of
the packages with one deliberate back-edge each, and expect it to fail naming it.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root

PACKAGES = ("rayrig", "cloud", "images", "deploy", "checks")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the packages and pyproject.toml, to break on purpose."""
    copy = tmp_path_factory.mktemp("layers")
    for package in PACKAGES:
        shutil.copytree(repo_root() / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo_root() / "pyproject.toml", copy)
    return copy


def test_the_tree_keeps_its_layers(tree):
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "back_edge", "words"),
    [
        ("deploy/contract/settings.py", "import cloud.ssh", "deploy is not allowed to import cloud"),
        ("cloud/ssh.py", "import rayrig.cli", "cloud is not allowed to import rayrig"),
        ("deploy/contract/ports.py", "import images", "deploy is not allowed to import images"),
        ("deploy/contract/schema.py", "import pyinfra.api", "deploy.contract is not allowed to import pyinfra"),
        ("deploy/contract/ports.py", "import deploy.run.memo", "deploy.contract is not allowed to import deploy.run"),
        ("deploy/run/memo.py", "import deploy.ray.auth", "deploy.run is not allowed to import deploy.ray"),
        ("checks/maths.py", "import pyinfra", "checks is not allowed to import pyinfra"),
        ("checks/maths.py", "import deploy.contract.settings", "checks is not allowed to import deploy"),
    ],
)
def test_a_back_edge_fails_the_contracts(tree, module, back_edge, words):
    path = tree / module
    original = path.read_text()
    path.write_text(original + f"\n{back_edge}  # noqa\n")
    try:
        result = lint_imports(tree)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    assert words in result.stdout, result.stdout


def _imports_in_functions(path: Path) -> list[tuple[int, str]]:
    """(line, module) of the imports inside functions whose function says nowhere why they are there.

    A function explains its late imports with a comment on one of their lines or on one of the two lines
    above one (``try:  # ...`` before an optional import counts).
    """
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        imports = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
        explained = any("#" in line for n in imports for line in lines[max(n.lineno - 3, 0) : n.lineno])
        if not explained:
            found += [(n.lineno, n.module if isinstance(n, ast.ImportFrom) else n.names[0].name) for n in imports]
    return found


def test_every_import_inside_a_function_says_why():
    unexplained = {
        str(path.relative_to(repo_root())): found
        for package in (*PACKAGES, "inventories")
        for path in sorted((repo_root() / package).rglob("*.py"))
        if (found := _imports_in_functions(path))
    }
    assert unexplained == {}
