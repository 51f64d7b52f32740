"""The lab every end-to-end scenario shares, its first deploy, and the order the scenarios run in.

One lab for the whole tier: it comes up once, the first deploy runs once, and
each scenario module leaves the cluster alive for the next. The modules run in
``MODULE_ORDER``, bring-up first and teardown last (which checks that nothing
is left); the lab fixture tears down too when a test fails.
"""

from __future__ import annotations

import datetime
import socket
import time

import pytest

from cloud import lab as local
from tests.e2e.labkit import BUCKET, HOSTS, LAB, S3_SECRET, Lab, deploy

#: Scenario modules in the order they run; a module not listed runs after the listed ones but before teardown.
MODULE_ORDER = (
    "test_lab_cluster",  # bring-up, security, storage, boot order
    "test_lab_checks",  # the checks on a sick cluster: a starved worker, a paused one
    "test_lab_operate",  # day to day: status (and a stopped worker), exec on every host, a host's logs
    "test_lab_submit",  # a job from this machine through the head's tunnel; Ray's CLI with the export lines
    "test_lab_rerun",  # re-runs: what they change, what they check
    "test_lab_monitoring",  # node exporters and Prometheus: every node scraped, ports members-only, loopback
    "test_lab_monitoring_checks",  # the checks read Prometheus: a stopped node exporter is named
    "test_lab_token",  # one token for the cluster's life
    "test_lab_tls",  # Ray TLS with the cluster's CA: on, clients refused and admitted, off again
    "test_lab_rolling",  # rolling changes and head failure
    "test_lab_membership",  # grow and shrink
    "test_lab_monitoring_off",  # monitoring off leaves nothing of it (last: no deploy turns it on again)
    "test_lab_down",  # teardown leaves nothing
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.module.__name__.rsplit(".", 1)[-1]
        if module == MODULE_ORDER[-1]:
            return len(MODULE_ORDER) + 1
        return MODULE_ORDER.index(module) if module in MODULE_ORDER else len(MODULE_ORDER)

    items.sort(key=rank)  # stable: the tests of one module keep their file order


@pytest.fixture(scope="session")
def lab():
    started = time.monotonic()
    state = local.up(hosts=HOSTS, name=LAB)
    print(f"lab up took {time.monotonic() - started:.1f} s")
    try:
        yield Lab(state)
    finally:
        local.down(LAB)


@pytest.fixture(scope="session")
def first_deploy(lab):
    """The first deploy, through the head's image mirror: every later scenario finds the mirror
    running, and the deploys that leave ``image_mirror`` at its default take no notice of it."""
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    result = deploy("inventories/lab.py", "--data", "image_mirror=head")
    assert result.returncode == 0, "the first deploy failed"
    result.started = started  # the upstream registry's log from here on is this deploy's
    return result


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
