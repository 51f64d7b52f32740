"""The house keeps its sizes: no Python file outside tests/ over 600 lines, no function over 80.

A file or function that grows past them is split by what it does; an exception
would be listed here with its reason.
"""

from __future__ import annotations

import ast
import subprocess

from deploy.contract.paths import repo_root

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
#: path -> why it may stay longer (none today).
LONG_FILES: dict[str, str] = {}
#: "path:function" -> why it may stay longer (none today).
LONG_FUNCTIONS: dict[str, str] = {}


def python_files() -> list[str]:
    """The project's Python files outside tests/, as git knows them (committed or not, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [p for p in listed if not p.startswith("tests/") and (repo_root() / p).is_file()]


def test_no_file_is_over_600_lines():
    long = {}
    for path in python_files():
        lines = (repo_root() / path).read_text().count("\n")
        if lines > MAX_FILE_LINES and path not in LONG_FILES:
            long[path] = lines
    assert not long, f"over {MAX_FILE_LINES} lines: {long}"


def test_no_function_is_over_80_lines():
    long = {}
    for path in python_files():
        tree = ast.parse((repo_root() / path).read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and f"{path}:{node.name}" not in LONG_FUNCTIONS:
                    long[f"{path}:{node.name}"] = lines
    assert not long, f"over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_check_sees_the_files_it_judges():
    found = python_files()
    assert "deploy/ray/ray_node.py" in found and "checks/full.py" in found
    assert not [p for p in found if p.startswith("tests/")]
