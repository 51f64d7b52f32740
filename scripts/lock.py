"""The lock of the Python packages `make venv` and CI install: write it, or check a virtualenv against it.

    python scripts/lock.py write requirements.lock   # in a fresh venv with '.[test]' installed (make lock)
    python scripts/lock.py check requirements.lock   # in .venv, after make venv installed it

The lock holds one ``name==version`` line per distribution installed in the virtualenv, the whole
closure of pyproject.toml's dependencies and the test extra's, pip and setuptools included. It leaves
out rayrig itself and PyTorch (``TORCH`` in the Makefile picks the build: a CPU one for the lab)
and PyTorch's CUDA-only packages; PyTorch's other dependencies are locked like the rest.
``check`` exits 1 naming each distribution whose version differs from the lock, is missing, or is
installed without being locked.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

#: Distributions the lock leaves out: this project, and PyTorch's build with its CUDA-only parts.
UNLOCKED = re.compile(r"^(rayrig|torch|triton|nvidia-.*|cuda-.*)$")
HEADER = """\
# The Python packages `make venv` and CI install, exactly: pyproject.toml's dependencies and the
# test extra's, their whole closure. Refreshed on purpose with `make lock` (scripts/lock.py), never
# by hand; PyTorch is left out (the Makefile's TORCH picks its build) and rayrig is installed editable.
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Every distribution installed in this interpreter's environment (its site-packages, not whatever
    else is on sys.path: ``import ray`` adds the packages Ray vendors), by canonical name."""
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    found: dict[str, str] = {}
    for dist in metadata.distributions(path=paths):
        name = dist.metadata["Name"]
        if name:
            found[canonical(name)] = dist.version
    return found


def read_lock(path: Path) -> dict[str, str]:
    """The lock's ``name==version`` lines; a line of any other form is an error naming it."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;=]+)", line)
        if not match:
            raise SystemExit(f"{path}:{number}: not a name==version pin: {raw!r}")
        name = canonical(match[1])
        if name in pins:
            raise SystemExit(f"{path}:{number}: {name} is locked twice")
        pins[name] = match[2]
    return pins


def write(path: Path) -> int:
    pins = {n: v for n, v in sorted(installed().items()) if not UNLOCKED.match(n)}
    path.write_text(HEADER + "".join(f"{name}=={version}\n" for name, version in pins.items()))
    print(f"{path}: {len(pins)} packages locked")
    return 0


def differences(pins: dict[str, str], found: dict[str, str]) -> list[str]:
    """What differs between the lock and an environment, one line each."""
    lines = []
    for name, version in sorted(pins.items()):
        if name not in found:
            lines.append(f"{name}: locked at {version}, not installed")
        elif found[name] != version:
            lines.append(f"{name}: locked at {version}, installed {found[name]}")
    for name, version in sorted(found.items()):
        if name not in pins and not UNLOCKED.match(name):
            lines.append(f"{name}: installed {version}, not in the lock (run `make lock`)")
    return lines


def check(path: Path) -> int:
    lines = differences(read_lock(path), installed())
    for line in lines:
        print(f"{path}: {line}", file=sys.stderr)
    return 1 if lines else 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print("usage: python scripts/lock.py write|check LOCKFILE", file=sys.stderr)
        return 2
    return (write if argv[0] == "write" else check)(Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
