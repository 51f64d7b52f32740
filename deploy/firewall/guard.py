"""The firewall guard: while rayrig's nftables table is not loaded, nothing rayrig runs listens.

Debian's and RHEL's ``nftables.service`` flush the whole ruleset when they stop, and
``nft flush ruleset`` does the same by hand: without a guard, Ray, the exporters, the
image mirror and Prometheus would stay up and open to everyone until the next deploy.
``rayrig-firewall-guard.service`` (``firewall-guard.sh``) reads the loaded table every
second. When it is missing at two looks in a row (not while a restart of nftables or
of rayrig-firewall is loading it again, up to 10 s), or was loaded from another ruleset than the one on disk
for longer than a deploy takes to load a new one, it stops every service that wants
``rayrig-firewall.service`` (each of rayrig's units says so: ``Wants=``), and starts
again the ones it stopped once the table is back. A ``systemctl restart nftables``
loads the table again within milliseconds (rayrig's drop-in): Ray stays up.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.facts.files import File
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from deploy.run.facts import fact
from deploy.run.templating import put_template, render, resource
from deploy.run.units import daemon_reload

#: rayrig's table, the unit that loads it and nft: what the guard watches (deploy.firewall.nftables uses the same).
TABLE = "inet rayrig"
FIREWALL_UNIT = "rayrig-firewall.service"
NFT = "/usr/sbin/nft"  # where every supported distribution installs it
UNIT = "rayrig-firewall-guard.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
UNIT_TEMPLATE = resource(__package__, "rayrig-firewall-guard.service.j2")
GUARDED_TEMPLATE = resource(__package__, "guarded-service.conf.j2")
SCRIPT = "/usr/local/lib/rayrig/firewall-guard.sh"
INTERVAL_S = 1
#: How long the loaded table may differ from the ruleset on disk: a deploy writes the file, then loads it.
GRACE_S = 60


def unit_values(table: str, ruleset_path: str, firewall_unit: str) -> dict[str, object]:
    """The template values of ``rayrig-firewall-guard.service.j2``."""
    return {
        "script": SCRIPT,
        "table": table,
        "ruleset_path": ruleset_path,
        "firewall_unit": firewall_unit,
        "interval_s": INTERVAL_S,
        "grace_s": GRACE_S,
    }


def unit_text(table: str, ruleset_path: str, firewall_unit: str) -> str:
    """rayrig-firewall-guard.service, as written."""
    return render(UNIT_TEMPLATE, **unit_values(table, ruleset_path, firewall_unit))


def guarded_drop_in() -> str:
    """A drop-in that puts a service of a package's (the image mirror's registry) behind rayrig's
    firewall: it starts only once the table is loaded, and the guard stops it with the table."""
    return render(GUARDED_TEMPLATE, firewall_unit=FIREWALL_UNIT, wait_for_table=wait_for_table_command(NFT, TABLE))


def wait_for_table_command(nft: str, table: str, wait_s: int = 60) -> str:
    """An ``ExecStartPre=`` line that waits up to ``wait_s`` seconds for rayrig's table: a service
    that answers the network starts only behind it.

    >>> print(wait_for_table_command("/usr/sbin/nft", "inet rayrig", 5))  # doctest: +ELLIPSIS
    /bin/sh -c 'i=0; until /usr/sbin/nft list table inet rayrig >/dev/null 2>&1; do ... sleep 1; done'
    """
    script = (
        f"i=0; until {nft} list table {table} >/dev/null 2>&1; do i=$$((i+1)); "
        f'if [ $$i -gt {int(wait_s)} ]; then echo "the firewall table {table} is not loaded after '
        f'{int(wait_s)} s" >&2; exit 1; fi; sleep 1; done'
    )
    return f"/bin/sh -c {shlex.quote(script)}"


def keep_guard(table: str, ruleset_path: str, firewall_unit: str) -> None:
    """The guard installed, enabled and running; restarted when its script or unit changed.

    keep_guard("inet rayrig", "/etc/rayrig/firewall.nft", "rayrig-firewall.service")
    """
    script = files.put(
        name="Install rayrig's firewall guard",
        src=resource(__package__, "firewall-guard.sh"),
        dest=SCRIPT,
        mode="755",
    )
    unit = put_template(
        f"Install the {UNIT} unit", UNIT_TEMPLATE, UNIT_PATH, **unit_values(table, ruleset_path, firewall_unit)
    )
    daemon_reload("Reload systemd units for the firewall guard", [unit], [UNIT])
    systemd.service(
        name="Keep rayrig's firewall guard running (rayrig's services stop while the table is not loaded)",
        service=UNIT,
        running=True,
        enabled=True,
    )
    systemd.service(
        name="Restart rayrig's firewall guard for its new version",
        service=UNIT,
        restarted=True,
        _if=any_changed(script, unit),
    )


def remove_guard() -> None:
    """The guard stopped and taken away (before the table is: it would stop the services it finds
    without one); plans nothing where there is none."""
    if not fact(host, File, UNIT_PATH) and not fact(host, File, SCRIPT):
        return
    systemd.service(name=f"Stop and disable {UNIT}", service=UNIT, running=False, enabled=False)
    removed = [
        files.file(name=f"Remove the {UNIT} unit", path=UNIT_PATH, present=False),
        files.file(name="Remove rayrig's firewall guard", path=SCRIPT, present=False),
    ]
    daemon_reload("Reload systemd units without the firewall guard", removed, [UNIT])
