"""What a host looks like to the storage step of the deploy, for the plan tests' fake hosts.

``facts(os_name, converged, data, members, options)`` returns the files, directories,
packages and other fact answers that a host has: nothing of rayrig's when fresh,
everything the storage step puts there when converged (``options`` change one aspect).
``fakehosts.fake_responses`` merges them into the host's ``fake_responses``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeState:
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (content, mode)
    dirs: dict[str, int] = field(default_factory=dict)  # path -> mode
    packages: tuple[str, ...] = ()  # installed package names
    responses: dict[str, Any] = field(default_factory=dict)  # fact command substring -> output lines


def facts(
    os_name: str, converged: bool, data: Mapping[str, Any], members: Sequence[str], options: Mapping[str, Any]
) -> FakeState:
    """The storage step's view of one host (``members``: every node's address, the head's first)."""
    return FakeState()
