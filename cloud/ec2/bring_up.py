"""``rayrig cloud up``: resolve, discover, plan, confirm, apply; roll back what a failed run created.

A second run finds what the first created by its tags and creates nothing;
a run that fails half way removes what it created and says what failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from cloud.ec2 import efa, expiry
from cloud.ec2.ami import check_fit, instance_type_info, resolve_ami
from cloud.ec2.apply import Build, Ledger, apply, owned
from cloud.ec2.aws import (
    TAG_CLUSTER,
    TAG_CREATED,
    TAG_CREATED_AT,
    TAG_EXPIRES,
    TAG_OWNER,
    TAG_ROLE,
    Aws,
    CloudError,
    Confirm,
    Progress,
    address,
    connect,
    explain_error,
    iso,
    tags_of,
    utc_now,
)
from cloud.ec2.failover import check_zones
from cloud.ec2.plan import discover, make_plan, plan_summary
from cloud.ec2.pricing import PriceBook
from cloud.ec2.rules import ray_ports
from cloud.ec2.spec import ClusterSpec
from cloud.ec2.state import cluster_lock, load_state, recorded_expiry, save_state, state_path, stranger_line
from cloud.ec2.teardown import delete_resources
from cloud.ec2.waits import WAIT_TIMEOUT_S, SshProbe, wait_for_ssh
from cloud.ssh import ssh_answers


@dataclass
class UpResult:
    """What ``up`` did: what it created, the instances, and whether SSH answered everywhere."""

    name: str
    region: str
    created: list[tuple[str, str]]
    instances: list[dict[str, Any]]
    ssh_pending: list[str]
    state_file: Path | None


def up(
    spec: ClusterSpec,
    *,
    assume_yes: bool = False,
    confirm: Confirm | None = None,
    wait_ssh: bool = True,
    ssh_probe: SshProbe = ssh_answers,
    timeout_s: float = WAIT_TIMEOUT_S,
    say: Progress,
) -> UpResult:
    """Bring the cluster of ``spec`` up (see ``cloud.ec2``); idempotent.

    The plan is said first; unless ``assume_yes``, ``confirm`` must accept it
    before anything is created. From discovery to the record, the run holds the
    cluster's lock (``<state>/ec2/NAME.lock``): a second ``up`` of the same
    cluster here waits, then finds what the first made.

    >>> up(load_spec("examples/sprint42.toml"), assume_yes=True, say=print)  # doctest: +SKIP
    """
    aws = connect(spec.region)
    ports = ray_ports(spec.host_data)
    ami = resolve_ami(aws, spec)
    types = instance_type_info(aws, {t for g in spec.groups for t in g.preferences})
    check_fit(spec, ami, types)
    check_zones(aws, spec)
    efa_counts = efa.efa_plan(spec, types)  # an "on" that a type cannot honour stops here
    with cluster_lock(spec.name, say):  # one up or down of the cluster at a time on this machine
        recorded = load_state(spec.name).get("region")
        if recorded not in (None, spec.region):
            raise CloudError(
                f"{state_path(spec.name)} records cluster {spec.name} in {recorded}, not {spec.region}: "
                f"take it down there first ('rayrig cloud down {spec.name}'), or name this cluster otherwise"
            )
        existing = discover(aws, spec)
        for stranger in existing.strangers:
            say(stranger_line(spec.name, stranger))
        for line in existing.foreign:
            say(line)
        now = utc_now()
        # The record's expiry first: a tag anyone may move neither ends the cluster early nor keeps it on.
        expires_at = recorded_expiry(load_state(spec.name), spec.region) or existing.expires_at or now + spec.ttl
        created_at = existing.created_at or now
        book = PriceBook(aws)  # on-demand from the Pricing API, spot from the history; the table if they fail
        plan = make_plan(spec, existing, ports, book.rate)
        expiry.refuse_expired(spec.name, expires_at, now, bool(plan.launches or plan.starts))
        for line in plan_summary(spec, ami, plan, expires_at) + book.notices:
            say(line)
        for line in efa.plan_lines(spec, efa_counts, types):
            say(f"  EFA     {line}")

        _confirm(plan.creates, assume_yes, confirm, say)

        base_tags = {
            TAG_CLUSTER: spec.name,
            TAG_OWNER: spec.owner,
            TAG_EXPIRES: iso(expires_at),
            TAG_CREATED: "true",
            TAG_CREATED_AT: iso(created_at),
        }
        ledger = Ledger(say)
        try:
            build = Build(aws, spec, ami, existing, ports, base_tags, ledger, say, timeout_s, efa=efa_counts)
            instances = apply(build, plan)
        except (CloudError, ClientError, BotoCoreError, KeyboardInterrupt) as exc:
            _undo(aws, spec, ledger, exc, timeout_s, say)

        state_file = save_state(spec, ami.ssh_user, instances, owned(build), expires_at)
    addresses = [address(i, spec.network.public_ips and not spec.network.bastion) for i in instances]
    pending: list[str] = []
    if wait_ssh and spec.network.bastion:
        say(f"  not probing SSH: the hosts are reached through the bastion {spec.network.bastion}")
    elif wait_ssh:
        say(f"  waiting for SSH on {len(addresses)} host(s)")
        pending = wait_for_ssh(addresses, ssh_probe, timeout_s, say=say)
    head = [address(i, spec.network.public_ips) for i in instances if tags_of(i).get(TAG_ROLE) == "head"]
    say(
        f"Cluster {spec.name} is up: {len(instances)} instance(s), head {', '.join(head) or '?'}. "
        f"Next: RAYRIG_CLUSTER={spec.name} pyinfra inventories/ec2.py deploy/cluster.py"
    )
    return UpResult(spec.name, spec.region, ledger.created, instances, pending, state_file)


def _confirm(creates: Any, assume_yes: bool, confirm: Confirm | None, say: Progress) -> None:
    """Go on only when there is nothing to create, or creating was accepted (``--yes``, or ``confirm``)."""
    if creates and not assume_yes:
        if confirm is None:
            raise CloudError("not confirmed: nobody to ask; pass --yes to create without asking")
        if not confirm("Create these resources?"):
            raise CloudError("not confirmed; nothing was created")
    elif not creates:
        say("Nothing to create: every resource of the cluster exists.")


def _undo(aws: Aws, spec: ClusterSpec, ledger: Ledger, exc: BaseException, timeout_s: float, say: Progress) -> NoReturn:
    """Remove what this run created after ``exc`` stopped it, and raise the error that says so."""
    if isinstance(exc, (ClientError, BotoCoreError)):
        reason = explain_error(exc, "bringing the cluster up", spec.region)
    elif isinstance(exc, KeyboardInterrupt):
        reason = "interrupted"
    else:
        reason = str(exc)
    left = roll_back(aws, ledger, reason, timeout_s, say)
    if left:
        raise CloudError(
            f"{reason}; could not remove {len(left)} resource(s) this run created (listed above): "
            f"run 'rayrig cloud down {spec.name}'"
        ) from None
    raise CloudError(f"{reason}; removed what this run created") from None


def roll_back(aws: Aws, ledger: Ledger, reason: str, timeout_s: float, say: Progress) -> list[str]:
    """Delete what this run created; return what could not be deleted."""
    say(f"up failed: {reason}")
    res = ledger.resources()
    if not res:
        say("  this run had created nothing")
        return []
    say("  removing what this run created")
    failures = delete_resources(aws, res, say=say, timeout_s=timeout_s)
    for failure in failures:
        say(f"  could not remove: {failure}")
    return failures
