"""``checks`` is a library beside the layers: no module of it imports pyinfra or rayrig's own
deploy, cloud, images or rayrig packages (it works on the nodes the deploy side hands it)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import checks

FORBIDDEN = ("pyinfra", "pyinfra_cli", "deploy", "cloud", "images", "rayrig")
MODULES = sorted(f"checks.{m.name}" for m in pkgutil.iter_modules(checks.__path__))
ROOT = Path(checks.__file__).resolve().parents[1]


def test_every_module_of_checks_is_found():
    assert {"checks.full", "checks.node", "checks.benchmark", "checks.storage_probe"} <= set(MODULES)


def test_importing_every_checks_module_imports_no_pyinfra_and_no_upper_layer():
    code = (
        "import importlib, json, sys\n"
        f"for name in {MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
