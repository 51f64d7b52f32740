"""What one step of the deploy finds on a fake host (see ``fake_firewall`` and ``fake_storage``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeState:
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (content, mode)
    dirs: dict[str, int] = field(default_factory=dict)  # path -> mode
    packages: tuple[str, ...] = ()  # installed package names
    responses: dict[str, Any] = field(default_factory=dict)  # fact command substring -> output lines
