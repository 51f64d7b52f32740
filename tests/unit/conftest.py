"""Unit-tier fixtures: a real, local, single-node Ray for the programs the checks run in the head container.

A test that uses it is marked ``real_ray`` (so are the modules that start a Ray of their own): they
measure time, and scripts/run_tests.py runs them alone, before the rest of the tier runs on every core.
"""

from __future__ import annotations

import time

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "local_ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_ray)


@pytest.fixture(scope="module")
def local_ray():
    """A local single-node Ray, started once per module; a program connects to it as its own driver
    (``RAY_ADDRESS``), as in the head container. Yields its node's ``ip`` and its ``address``."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("RAY_ADDRESS", raising=False)  # a fresh local Ray, never someone's cluster
        context = ray.init(
            "local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR"
        )  # "local": always a new one, even where another Ray on this machine runs
    try:
        ip = next(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
        yield {"ip": ip, "address": context.address_info["gcs_address"]}
    finally:
        ray.shutdown()


@pytest.fixture
def utc(monkeypatch):
    """This process in UTC, so that local times read the same on every machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
