"""The cluster's membership: which hosts are members, the record each member keeps of it, and
the guard that stops a run limited to some hosts (``--limit``, ``--exclude``, or hosts it could
not connect to) from changing it behind the others' backs.

The members are the inventory's hosts not marked ``ray_state = "absent"``. What depends on
them, on every other host: the firewall's member sets (each member's node address and
``firewall_member_cidrs``) and the NFS server's exports (each member's node address). A host
that joins or leaves changes both on every host that has them, and the ray-node containers
do not depend on them at all, so growing or shrinking replaces no running node.

Each member keeps a record of the membership its last deploy applied, ``MEMBERS_PATH``: the
node addresses and member networks, one a line (``record_members``, the last step of a
present host). Before any operation, ``check_membership`` compares the members this run
wants with the record of every host in the run. When the run leaves out hosts whose member
sets or exports depend on the membership, and a host in the run has no record (it is new to
the cluster), a record that differs (a host joins, leaves or changes its address), or is
absent and still recorded as a member, the run stops before any change on any host and names
the hosts to add to it.

Why the hosts in the run, and not a file on the operator's machine: a run limited to some
hosts connects to those only, so the others' live member sets cannot be read. A record on the
hosts travels with the cluster: a deploy from another checkout or another operator's machine
sees it, where a file in the state directory would be missing or stale. And since this guard
refuses every limited run that would change the membership, a member's record is what every
other member holds: the last run that changed it included them all (a run that died half-way
may have left some behind; the next run of every host puts them right). A run that is not
limited, or whose left-out hosts depend on nothing of the membership (no firewall, not the NFS
server), is never stopped. A new host that no record holds yet needs a run that includes every
member; a limited run that changes nothing of the membership (a new setting on one worker)
goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase, deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import files

from deploy.contract.settings import host_settings, is_absent, node_address, present_hosts
from deploy.firewall.members import member_cidrs
from deploy.run.facts import fact
from deploy.run.memo import run_memo
from deploy.storage.nfs import serves_nfs

MEMBERS_PATH = "/etc/rayrig/members"
_FOUND = "RAYRIG_MEMBERS"


class MembershipChange(PyinfraError):
    """A limited run would change the cluster's membership and leaves out hosts that depend on it."""


class RecordedMembers(FactBase):
    """The cluster's members as the last deploy that reached this host applied them
    (``MEMBERS_PATH``): ``["10.0.0.1", "10.0.0.2", "192.168.100.0/24"]``, or None when
    the host keeps no record (it has never been a member, or was removed)."""

    @staticmethod
    def default() -> None:
        return None

    def command(self) -> str:
        return f"if [ -f {MEMBERS_PATH} ]; then echo {_FOUND}; cat {MEMBERS_PATH}; fi; true"

    def process(self, output: list[str]) -> list[str] | None:
        if not output or output[0].strip() != _FOUND:
            return None
        return parse_record(output[1:])


# --- Pure helpers ---------------------------------------------------------------------------------


def cluster_membership(addresses: Iterable[str], cidrs: Iterable[str]) -> list[str]:
    """The members every member's firewall and the NFS exports admit: node addresses, then
    member networks, each once and sorted.

    >>> cluster_membership(["10.0.0.2", "10.0.0.1"], ["192.168.100.0/24"])
    ['10.0.0.1', '10.0.0.2', '192.168.100.0/24']
    """
    return sorted(set(addresses)) + sorted(set(cidrs) - set(addresses))


def record_text(members: Sequence[str]) -> str:
    """The record a member keeps (``MEMBERS_PATH``): a comment, then one member a line."""
    return "".join(
        [
            "# Managed by rayrig: the cluster's members as the last deploy of this host applied them\n",
            "# (node addresses and firewall_member_cidrs). A deploy limited to some hosts reads it to\n",
            "# tell whether the hosts it leaves out would need their member sets or NFS exports changed.\n",
            *(f"{member}\n" for member in members),
        ]
    )


def parse_record(lines: Iterable[str]) -> list[str]:
    """The members in a record's lines (``record_text``)."""
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@dataclass(frozen=True)
class Host:
    """What the guard knows of one inventory host."""

    name: str
    address: str  # its node address
    absent: bool  # marked ray_state = "absent"
    depends: bool  # its firewall member sets or NFS exports follow the membership
    in_run: bool  # this run reaches it
    recorded: tuple[str, ...] | None = None  # its record (hosts in the run only); None: it keeps none


def membership_problem(hosts: Sequence[Host], members: Sequence[str]) -> str | None:
    """Why this run must not go on, or None: it leaves out hosts that depend on the membership
    (``Host.depends``) and changes the membership (``members``: what this run wants)."""
    left_out = [h for h in hosts if not h.in_run and not h.absent and h.depends]
    if not left_out:
        return None
    wanted = list(members)
    recorded_anywhere = {m for h in hosts if h.in_run and h.recorded for m in h.recorded}
    changes = []
    for h in hosts:
        if not h.in_run:
            continue
        label = h.name if h.name == h.address else f"{h.name} ({h.address})"
        if h.absent:
            if h.recorded is not None:
                changes.append(f'{label} leaves the cluster (ray_state = "absent")')
        elif h.recorded is None:
            changes.append(f"{label} is new to the cluster")
        elif list(h.recorded) != wanted:
            added = sorted(set(wanted) - set(h.recorded))
            gone = sorted(set(h.recorded) - set(wanted))
            parts = [f"joining: {', '.join(added)}"] if added else []
            parts += [f"leaving: {', '.join(gone)}"] if gone else []
            what = "; ".join(parts)
            changes.append(f"the members recorded on {h.name} differ from this inventory's ({what})")
    if not changes:
        return None
    leaving = [h for h in hosts if not h.in_run and h.absent and h.address in recorded_anywhere]
    include = [h.name for h in [*left_out, *leaving]]
    in_run = [h.name for h in hosts if h.in_run]
    return "\n".join(
        [
            "this run leaves out some hosts (--limit, --exclude, or hosts it could not connect to) "
            "and changes the cluster's members:",
            *(f"  - {change}" for change in changes),
            f"but the firewall member sets or NFS exports of {', '.join(h.name for h in left_out)} do not "
            "follow until a run includes them.",
            f"Add them to the run: --limit {' --limit '.join([*in_run, *include])}",
            "(or run without --limit). Nothing was changed on any host.",
        ]
    )


# --- The run --------------------------------------------------------------------------------------


def desired_members(hosts: Iterable[Any]) -> list[str]:
    """The membership an inventory wants: its present hosts' node addresses and member networks."""
    present = present_hosts(hosts)
    return cluster_membership([node_address(h) for h in present], member_cidrs(present))


def depends_on_members(current: Any) -> bool:
    """Whether a host's firewall member sets or NFS exports follow the cluster's membership."""
    settings = host_settings(current)
    return bool(settings["firewall_enabled"] or serves_nfs(settings, current.name))


def check_membership(state: Any, inventory: Any) -> None:
    """Stop the run before any operation when it is limited to some hosts and would change the
    membership that the hosts it leaves out depend on (``MembershipChange`` names them). Once per run."""
    memo = run_memo(state, "membership")
    if memo.get("checked"):
        return
    in_run = set(inventory.iter_activated_hosts())
    if not any(h not in in_run and not is_absent(h) and depends_on_members(h) for h in inventory):
        memo["checked"] = True  # a run of every host that depends on the members: no record to read
        return
    hosts = [
        Host(
            name=h.name,
            address=node_address(h),
            absent=is_absent(h),
            depends=depends_on_members(h),
            in_run=h in in_run,
            recorded=_recorded(h) if h in in_run else None,
        )
        for h in inventory
    ]
    problem = membership_problem(hosts, desired_members(inventory))
    if problem:
        raise MembershipChange(problem)
    memo["checked"] = True


def _recorded(current: Any) -> tuple[str, ...] | None:
    found = fact(current, RecordedMembers)
    return None if found is None else tuple(found)


def run_members() -> list[str]:
    """The membership this run applies (``desired_members`` of the inventory, once per run)."""
    memo = run_memo(host.state, "membership")
    if "members" not in memo:
        memo["members"] = desired_members(inventory)
    return memo["members"]


@deploy("Cluster membership")
def record_members() -> None:
    """Keep the membership this run applied on the host (``MEMBERS_PATH``), for later limited runs."""
    files.put(
        name="Record the cluster's members",
        src=StringIO(record_text(run_members())),
        dest=MEMBERS_PATH,
        mode="644",
    )
