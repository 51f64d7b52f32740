"""The last scenario: ``rayrig lab down`` leaves no container, network, volume or state behind."""

from __future__ import annotations

import subprocess

import pytest

from cloud import lab as local
from tests.e2e.labkit import LAB

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_lab_down_leaves_nothing(lab):
    local.down(LAB)
    for kind in ("container ls -a", "network ls", "volume ls"):
        listed = subprocess.run(
            ["docker", *kind.split(), "--quiet", "--filter", f"label=rayrig.lab={LAB}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert listed == "", f"lab down left {kind.split()[0]}s: {listed}"
    assert local.load_state(LAB) is None
