"""Waiting on EC2: eventual consistency, instance states, deletions blocked by dependants, and SSH.

The intervals are module attributes so that tests can shorten them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from cloud.ec2.aws import (
    IN_USE_CODES,
    Aws,
    CloudError,
    Progress,
    aws_step,
    error_code,
    explain_error,
    instances_matching,
    is_gone,
)
from cloud.ec2.iam import profile_not_ready
from cloud.ssh import ssh_answers

SshProbe = Callable[[str, int, float], bool]

#: Seconds between two polls of AWS while waiting (tests lower it).
POLL_S = 5.0
#: Seconds between two rounds of SSH probes.
SSH_POLL_S = 5.0
#: Default limit for each wait (instances running, SSH, termination, deletions).
WAIT_TIMEOUT_S = 900.0
#: How long a call about a resource made a moment ago is retried while EC2 says it does not exist yet.
SETTLE_S = 60.0


def settled(call: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Run ``call(**kwargs)``, which refers to resources made a moment ago: EC2 is eventually
    consistent, so a '...NotFound' answer (or RunInstances' "Invalid IAM Instance Profile" for a
    profile IAM has not spread yet) is retried for up to ``SETTLE_S`` seconds."""
    deadline = time.monotonic() + SETTLE_S
    delay = min(POLL_S, 1.0)
    while True:
        try:
            return call(**kwargs)
        except ClientError as exc:
            code = error_code(exc)
            settling = (code.endswith(".NotFound") or code == "InvalidPlacementGroup.Unknown") and not code.startswith(
                "InvalidAMIID"
            )
            settling = settling or profile_not_ready(exc)  # an instance profile made a moment ago
            if not settling or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def wait_vpc_available(aws: Aws, vpc_id: str) -> None:
    """Wait until a VPC made a moment ago is available."""
    aws.ec2.get_waiter("vpc_available").wait(VpcIds=[vpc_id], WaiterConfig={"Delay": max(POLL_S, 0.1)})


def delete_when_free(aws: Aws, what: str, call: Callable[[], Any], timeout_s: float, failures: list[str]) -> None:
    """Run one deletion; 'not found' counts as done, 'in use' is retried until ``timeout_s``.

    A deletion that fails otherwise adds one line to ``failures``.
    """
    deadline = time.monotonic() + timeout_s
    delay = POLL_S
    while True:
        try:
            call()
            return
        except ClientError as exc:
            if is_gone(exc):
                return
            if error_code(exc) in IN_USE_CODES and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 1.5 + 0.01, 30.0)
                continue
            failures.append(explain_error(exc, f"deleting {what}", aws.region))
            return
        except (BotoCoreError, ResponseParserError) as exc:  # the second: an endpoint that lacks the call
            failures.append(explain_error(exc, f"deleting {what}", aws.region))
            return


def wait_instances(
    aws: Aws,
    ids: list[str],
    want: str,
    timeout_s: float = WAIT_TIMEOUT_S,
    fail_states: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Poll until every instance in ``ids`` is in state ``want``; return them described.

    An instance that reaches one of ``fail_states`` (a spot reclaim, a capacity
    loss) raises ``CloudError`` at once, with AWS's reason.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        # A filter, not InstanceIds=: an instance launched a moment ago is simply not listed yet.
        with aws_step(f"waiting for {len(ids)} instance(s) to be {want}", aws.region):
            described = instances_matching(aws, [{"Name": "instance-id", "Values": ids}])
        states = {i["InstanceId"]: i["State"]["Name"] for i in described}
        for instance in described:
            if instance["State"]["Name"] in fail_states:
                reason = instance.get("StateReason", {}).get("Message") or "no reason given"
                raise CloudError(
                    f"instance {instance['InstanceId']} ({instance.get('InstanceType')}) went "
                    f"{instance['State']['Name']} instead of {want}: {reason}"
                )
        if len(described) == len(ids) and all(s == want for s in states.values()):
            return described
        if time.monotonic() >= deadline:
            late = ", ".join(f"{i} {states.get(i, 'unknown')}" for i in ids if states.get(i) != want)
            raise CloudError(f"timed out after {timeout_s:.0f}s waiting for instances to be {want}: {late}")
        time.sleep(POLL_S)


def wait_for_ssh(
    hosts: Iterable[str],
    probe: SshProbe = ssh_answers,
    timeout_s: float = WAIT_TIMEOUT_S,
    port: int = 22,
    *,
    say: Progress,
) -> list[str]:
    """Probe ``hosts`` until each answers; return those that did not within ``timeout_s``."""
    pending = list(dict.fromkeys(hosts))
    deadline = time.monotonic() + timeout_s
    while pending:
        pending = [h for h in pending if not probe(h, port, min(5.0, max(timeout_s, 0.1)))]
        if not pending or time.monotonic() >= deadline:
            break
        say(f"  SSH not answering yet on {', '.join(pending)}")
        time.sleep(SSH_POLL_S)
    return pending
