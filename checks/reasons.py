"""One finding of the checks and its level: what every part of the checks reports, and the verdict judges.

Its own module so that the parts that find things (:mod:`checks.gpu_health`, :mod:`checks.preflight`)
and the part that judges them all (:mod:`checks.verdict`) can share it without importing each other.

Example::

    Reason(FAIL, "PCIe link x8, below its maximum x16", host="gpu-3", device="gpu 2",
           source="the GPU's own maximum link (nvidia-smi -q)")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PASS, WARN, FAIL, INFO = "PASS", "WARN", "FAIL", "INFO"


@dataclass(frozen=True)
class Reason:
    """One finding: its level (FAIL, WARN or INFO), what it says, and where."""

    level: str
    message: str
    host: str | None = None
    device: str | None = None
    flag: str | None = None
    source: str | None = None  # where the threshold comes from (a datasheet, the peers' median, NVIDIA's docs)

    def __str__(self) -> str:
        return f"{self.level}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def host_label(entry: dict[str, Any]) -> str:
    """The host name, with " (ip)" when the IP is known and differs from it."""
    host = entry.get("host") or "?"
    ip = entry.get("ip")
    return f"{host} ({ip})" if ip and ip != host else host
