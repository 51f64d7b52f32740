"""The lab every end-to-end scenario shares, its first deploy, and the baseline each module starts from.

One lab per pytest-xdist worker: it comes up once, with fresh hosts (``lab``: a lab left over from an
interrupted run is taken down first). A module states the cluster it needs
with the ``baseline`` fixture: the lab's 3 hosts deployed from ``inventories/lab.py``, every node
alive. The fixture deploys only when the lab differs from that (a host's ray-node configuration
hash or image, rayrig's firewall table, the node exporter), so any module passes alone on a fresh
lab and the tier passes in any order.

``test_lab_cluster`` reads the first deploy of a fresh lab (``first_deploy``: through the head's
image mirror, the checks at its end) and so runs first in either order; a lab no worker runs it on
gets its first deploy from ``baseline``, without the mirror or the checks, which that module
proves once. The other modules run in ``MODULE_ORDER``: longest first, so that two workers (a
lab each, a module on one of them: scripts/run_tests.py) finish together, and monitoring off last,
which saves the deploy that would turn it on again. ``RAYRIG_E2E_ORDER=reverse`` runs them the
other way round. ``test_lab_down`` runs last either way: it takes its lab down and checks that
nothing is left.
"""

from __future__ import annotations

import datetime
import os
import socket
import time

import pytest

from cloud import lab as local
from deploy.contract import settings
from tests.e2e.labkit import (
    BUCKET,
    HOSTS,
    LAB,
    LAB_INVENTORY,
    S3_SECRET,
    Lab,
    baseline_signature,
    deploy,
    fresh_lab,
    mirror_poisoner_tries,
    start_mirror_poisoner,
    upstream_digest,
    wait_for_alive,
)

#: Scenario modules in the order they run; a module not listed runs after the listed ones but before teardown.
#: The order saves deploys, nothing else: each module starts from the baseline fixture.
MODULE_ORDER = (
    "test_fresh_machine",  # no lab: a fresh machine's first make step
    "test_image_layers",  # no lab: the image layers with real Docker
    # The lab's scenarios, longest first (a module's minutes in a run of the tier in brackets), so that
    # two workers, each with a lab, finish together.
    "test_lab_cluster",  # [6.5] bring-up, security, storage, boot order (reads the first deploy's output)
    "test_lab_health",  # [10.0] the health gate: a soak, a starved worker, a full disk, the limit, off
    "test_lab_rolling",  # [6.4] rolling changes and head failure
    # [6.6] the examples and the notebook on the development image, the shared mount: never a lab's first
    # module, so that its deploy changes a deployed cluster (as users change theirs), not fresh hosts
    "test_lab_workloads",
    "test_lab_tls",  # [5.2] Ray TLS with the cluster's CA: on, clients refused and admitted, off again
    "test_lab_checks",  # [4.5] the checks on a sick cluster: a starved worker, a paused one
    "test_lab_membership",  # [4.0] grow and shrink
    "test_lab_rerun",  # [2.4] re-runs: what they change, what they check
    "test_lab_monitoring_checks",  # [2.0] the checks read Prometheus: a stopped node exporter is named
    "test_lab_token",  # [1.6] one token for the cluster's life
    "test_lab_submit",  # [0.6] a job from this machine through the head's tunnel; Ray's CLI with the export lines
    "test_lab_operate",  # [0.5] day to day: status (and a stopped worker), exec on every host, a host's logs
    "test_lab_monitoring",  # [0.2] node exporters and Prometheus: every node scraped, ports members-only, loopback
    "test_lab_monitoring_off",  # [1.4] monitoring off: last, so that no baseline deploy turns it on again
    "test_lab_down",  # teardown leaves nothing: always last
)
FIRST = "test_lab_cluster"
LAST = "test_lab_down"


def module_rank(module: str, reverse: bool = False) -> int:
    """Where a module runs: ``MODULE_ORDER`` (or its reverse), unlisted ones after the listed; the
    first deploy's module first and teardown last in either order."""
    if module == LAST:
        return len(MODULE_ORDER) + 1
    if module == FIRST:
        return -1
    order = [m for m in MODULE_ORDER if m not in (FIRST, LAST)]
    if reverse:
        order.reverse()
    return order.index(module) if module in order else len(MODULE_ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reverse = os.environ.get("RAYRIG_E2E_ORDER", "forward") == "reverse"
    # stable: the tests of one module keep their file order
    items.sort(key=lambda item: module_rank(item.module.__name__.rsplit(".", 1)[-1], reverse))


@pytest.fixture(scope="session")
def lab():
    started = time.monotonic()
    state = fresh_lab(LAB)
    print(f"lab up took {time.monotonic() - started:.1f} s")
    try:
        yield Lab(state)
    finally:
        local.down(LAB)


@pytest.fixture(scope="session")
def first_deploy(lab):
    """The first deploy of a fresh lab, through the head's image mirror, the checks at its end: what
    ``test_lab_cluster`` reads. Its ``ray_image`` is pinned by the digest the lab's registry serves
    (``REPOSITORY:TAG@sha256:...``): what each node ran is kept in ``ran`` (the next deploy, the
    baseline's, is of the tag). The later scenarios on this lab find the mirror running; the deploys
    that leave ``image_mirror`` at its default take no notice of it."""
    deployed = lab.sh(lab.head, "command -v docker || true").strip()
    assert not deployed, "the first deploy needs a fresh lab, and this one was deployed: run test_lab_cluster first"
    started = utc_now()
    # A member tries to write into the head's mirror all along (test_lab_cluster reads what it got).
    attacker = lab.workers[0]
    start_mirror_poisoner(lab, attacker, f"{lab.head['address']}:{settings.defaults()['image_mirror_port']}")
    pinned = f"{lab.state['image']}@{upstream_digest(lab)}"
    try:
        result = deploy(LAB_INVENTORY, "--data", "image_mirror=head", "--data", f"ray_image={pinned}")
    finally:
        result_tries = mirror_poisoner_tries(lab, attacker)
    assert result.returncode == 0, "the first deploy failed"
    inspect = "sudo docker inspect --format '{{.Config.Image}} {{.Image}}' ray-node"
    result.pinned = pinned
    result.ran = {h["address"]: tuple(lab.sh(h, inspect).split()) for h in lab.hosts}
    result.started, result.ended = started, utc_now()  # the upstream registry's log in between is this deploy's
    result.mirror_write_tries = result_tries
    return result


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: The signature of the baseline deployment, taken once a deploy of inventories/lab.py succeeded.
_BASELINE: dict[str, dict[str, str] | None] = {"signature": None}


@pytest.fixture(scope="module")
def baseline(lab) -> Lab:
    """The lab's 3 hosts deployed from ``inventories/lab.py``, every node alive: deployed only when the
    lab differs from the signature the last baseline deploy left (or none was taken yet)."""
    started = time.monotonic()
    if len(local.load_state(LAB)["hosts"]) != HOSTS:  # a module that grew the lab and failed to shrink it
        local.up(hosts=HOSTS, name=LAB)
    seen = baseline_signature(lab)
    if seen is None or seen != _BASELINE["signature"]:
        why = "no baseline taken yet" if _BASELINE["signature"] is None else f"the lab differs: {seen}"
        print(f"baseline: deploying {LAB_INVENTORY} ({why})")
        result = deploy(LAB_INVENTORY, "--data", "checks_enabled=False")
        assert result.returncode == 0, "the deploy back to the baseline failed"
        _BASELINE["signature"] = baseline_signature(lab)
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])
    print(f"baseline: ready in {time.monotonic() - started:.1f} s")
    return lab


@pytest.fixture(scope="session")
def s3(lab):
    """moto's S3 server on the lab network's gateway (this machine), with one bucket.

    It lives as long as the lab, so that the hosts' mounts of it stay healthy for later scenarios.
    """
    import boto3  # only the storage scenarios need moto's server and boto3
    from moto.server import ThreadedMotoServer

    gateway = lab.state["gateway"]
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address=gateway, port=port, verbose=False)
    server.start()
    url = f"http://{gateway}:{port}"
    client = boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="e2e", aws_secret_access_key=S3_SECRET
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield url
    finally:
        server.stop()
