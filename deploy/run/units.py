"""systemd units the deploy writes: reloaded when a file changed, or when systemd says so.

``systemctl daemon-reload`` after writing a unit file is a follow-up that a run can die
before; the next run sees "no change" in the file. systemd itself knows better: its
``NeedDaemonReload`` property says that a unit's files (unit file or drop-in) on disk
are newer than what it runs. ``daemon_reload`` asks it, so that a re-run converges.
"""

from __future__ import annotations

from shlex import quote
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from deploy.run.facts import fact


class NeedDaemonReload(FactBase):
    """Whether systemd runs an older version of a unit than its files on disk: True or False
    (False for a unit systemd does not know)."""

    @staticmethod
    def default() -> bool:
        return False

    def command(self, unit: str) -> str:
        return (
            "command -v systemctl >/dev/null 2>&1 && "
            f"systemctl show --property NeedDaemonReload -- {quote(unit)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> bool:
        return any(line.strip() == "NeedDaemonReload=yes" for line in output)


def daemon_reload(name: str, changed: list[Any], units: list[str]) -> None:
    """``systemctl daemon-reload`` when one of the ``changed`` operations changed a file, or
    when systemd says one of ``units`` needs it (a run that died after writing the file).

    daemon_reload("Reload systemd units for rayrig's firewall", [unit], ["rayrig-firewall.service"])
    """
    stale = any(fact(host, NeedDaemonReload, unit) for unit in units)
    systemd.daemon_reload(name=name, **({} if stale else {"_if": any_changed(*changed)}))
