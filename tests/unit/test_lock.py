"""requirements.lock: every dependency pyproject.toml names is locked, at a version its range admits, and
scripts/lock.py's check names what differs between a virtualenv and the lock."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
import tomllib
from packaging.requirements import Requirement

from deploy.contract.paths import repo_root

_spec = importlib.util.spec_from_file_location("lock_script", repo_root() / "scripts" / "lock.py")
lock_script = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("lock_script", lock_script)
_spec.loader.exec_module(lock_script)

LOCK = repo_root() / "requirements.lock"


def declared() -> list[Requirement]:
    """pyproject.toml's dependencies and the test extra's (what make venv installs), for this Python."""
    project = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate()]


def missing_from(pins: dict[str, str], requirements: list[Requirement]) -> list[str]:
    """Each requirement the lock lacks, or locks at a version outside the requirement's range."""
    problems = []
    for req in requirements:
        version = pins.get(lock_script.canonical(req.name))
        if version is None:
            problems.append(f"{req.name} is not in requirements.lock")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version} is outside pyproject.toml's {req.specifier}")
    return problems


def test_every_dependency_of_pyproject_is_locked_within_its_range():
    assert missing_from(lock_script.read_lock(LOCK), declared()) == []


def test_a_dependency_missing_from_the_lock_is_named():
    pins = lock_script.read_lock(LOCK)
    del pins["moto"]
    pins["boto3"] = "1.0.0"
    assert missing_from(pins, declared()) == [
        "boto3==1.0.0 is outside pyproject.toml's >=1.34",
        "moto is not in requirements.lock",
    ]


def test_the_lock_pins_the_tools_that_install_it_and_leaves_out_torch_and_rayrig():
    pins = lock_script.read_lock(LOCK)
    assert {"pip", "setuptools", "pytest-xdist", "ray", "pyinfra"} <= set(pins)
    assert not [name for name in pins if lock_script.UNLOCKED.match(name)]
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values()), pins


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("ray>=2.60\n", "not a name==version pin"),
        ("ray==2.60.0\nRay==2.60.0\n", "ray is locked twice"),
    ],
)
def test_a_lock_line_that_pins_nothing_exactly_is_refused(tmp_path, text, error):
    path = tmp_path / "requirements.lock"
    path.write_text(text)
    with pytest.raises(SystemExit, match=error):
        lock_script.read_lock(path)


def test_the_check_names_each_difference_between_the_venv_and_the_lock():
    pins = {"boto3": "1.44.8", "moto": "5.1.0", "torch": "2.13.0"}
    found = {"boto3": "1.44.9", "pyinfra": "3.10", "torch": "2.13.0+cpu", "rayrig": "0.1.0"}
    assert lock_script.differences(pins, found) == [
        "boto3: locked at 1.44.8, installed 1.44.9",
        "moto: locked at 5.1.0, not installed",
        "torch: locked at 2.13.0, installed 2.13.0+cpu",
        "pyinfra: installed 3.10, not in the lock (run `make lock`)",
    ]


def test_what_is_installed_is_read_from_site_packages_alone(monkeypatch, tmp_path):
    """``import ray`` puts the packages Ray vendors on sys.path: they are not installed in the venv."""
    vendored = tmp_path / "thirdparty_files" / "vendored_only-1.0.dist-info"
    vendored.mkdir(parents=True)
    (vendored / "METADATA").write_text("Metadata-Version: 2.1\nName: vendored-only\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(vendored.parent))
    assert "vendored-only" not in lock_script.installed()
    assert "pytest" in lock_script.installed()


def test_this_venv_is_the_lock_when_make_venv_made_it():
    """The suite runs in the venv make venv made: it holds the lock's versions and nothing unlocked."""
    if not (repo_root() / ".venv" / ".installed").exists() or not sys.prefix.startswith(str(repo_root() / ".venv")):
        pytest.skip("not running in the .venv that make venv made")
    assert lock_script.differences(lock_script.read_lock(LOCK), lock_script.installed()) == []
