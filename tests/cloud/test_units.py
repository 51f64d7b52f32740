"""The pure parts of cloud/ec2/ and the SSH probe (cloud.ssh) against real local TCP listeners."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from cloud.ec2 import instance_types, waits
from cloud.ec2.ami import gpus_of
from cloud.ec2.aws import explain_error
from cloud.ec2.rules import Rule, exposed_ray_ports, ray_ports, rules_of
from cloud.ec2.state import without_secrets
from cloud.ssh import ssh_answers
from deploy.contract.settings import defaults

pytestmark = pytest.mark.cloud


# --------------------------------------------------------------------------- SSH probe


class Listener:
    """A TCP server on 127.0.0.1 that greets each connection with ``greeting`` (or stays silent)."""

    def __init__(self, greeting: bytes | None, delay_s: float = 0.0):
        self.greeting = greeting
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.delay_s = delay_s
        if not delay_s:
            self.sock.listen(8)  # listening before the test connects
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)  # a host whose sshd comes up late: refused until then
            self.sock.listen(8)
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                if self.greeting is not None:
                    conn.sendall(self.greeting)
                time.sleep(0.3)

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]  # bound, never listening: connections are refused


def test_ssh_answers_when_an_ssh_server_greets() -> None:
    with Listener(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n") as server:
        assert ssh_answers("127.0.0.1", server.port, 2.0)


def test_ssh_does_not_answer_when_something_else_listens() -> None:
    with Listener(b"HTTP/1.1 400 Bad Request\r\n\r\n") as server:
        assert not ssh_answers("127.0.0.1", server.port, 2.0)


def test_ssh_does_not_answer_when_the_port_stays_silent() -> None:
    with Listener(None) as server:
        started = time.monotonic()
        assert not ssh_answers("127.0.0.1", server.port, 0.2)
        assert time.monotonic() - started < 2


def test_ssh_does_not_answer_on_a_closed_port(closed_port: int) -> None:
    assert not ssh_answers("127.0.0.1", closed_port, 1.0)


def test_wait_for_ssh_waits_for_a_late_sshd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waits, "SSH_POLL_S", 0.05)
    lines: list[str] = []
    with Listener(b"SSH-2.0-late\r\n", delay_s=0.4) as server:
        pending = waits.wait_for_ssh(["127.0.0.1"], timeout_s=10, port=server.port, say=lines.append)
    assert pending == []
    assert lines and lines[0] == "  SSH not answering yet on 127.0.0.1"


def test_wait_for_ssh_gives_up_after_the_timeout(closed_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waits, "SSH_POLL_S", 0.05)
    started = time.monotonic()
    assert waits.wait_for_ssh(["127.0.0.1"], timeout_s=0.3, port=closed_port, say=lambda _: None) == ["127.0.0.1"]
    assert time.monotonic() - started < 3


# --------------------------------------------------------------------------- rules and ports


def test_ray_ports_come_from_the_defaults() -> None:
    assert ray_ports() == {**defaults()["ray_ports"], **defaults()["monitoring_ports"]}
    assert ray_ports({"ray_ports": {"gcs": 7000}})["gcs"] == 7000  # a spec's host_data overrides a port


def test_the_members_ports_are_the_firewalls_single_list() -> None:
    """The security group guards exactly the ports the host firewall admits from the members only:
    Ray's (its metrics ports included) and the exporters' while monitoring is on."""
    ports = ray_ports()
    assert {ports[k] for k in ("metrics_export", "dashboard_metrics", "autoscaler_metrics")} == {6383, 44227, 44217}
    assert {ports["node_exporter"], ports["gpu_exporter"]} == {9100, 9400}
    assert ray_ports({"monitoring_ports": {"node_exporter": 9200}})["node_exporter"] == 9200
    assert "node_exporter" not in ray_ports({"monitoring_enabled": False})
    assert "gpu_exporter" not in ray_ports({"monitoring_gpu_exporter": "none"})


def test_exposed_ray_ports_flags_address_ranges_reaching_a_metrics_port() -> None:
    ports = ray_ports()
    for port in (9100, 9400, 6383, 44217, 44227):
        rule = Rule("ingress", "tcp", port, port, "cidr", "203.0.113.0/24")
        [problem] = exposed_ray_ports({rule}, ports)
        assert problem.startswith(f"ingress tcp {port}-{port} from 203.0.113.0/24 reaches Ray or metrics port(s) ")
    assert exposed_ray_ports({Rule("ingress", "tcp", 9100, 9100, "sg", "sg-1")}, ports) == []


def test_exposed_ray_ports_flags_address_ranges_only() -> None:
    ports = defaults()["ray_ports"]
    rules = {
        Rule("ingress", "-1", None, None, "sg", "sg-1"),
        Rule("ingress", "tcp", 22, 22, "cidr", "0.0.0.0/0"),
        Rule("egress", "-1", None, None, "cidr", "0.0.0.0/0"),
    }
    assert exposed_ray_ports(rules, ports) == []
    assert exposed_ray_ports({Rule("ingress", "tcp", 6000, 6500, "cidr", "0.0.0.0/0")}, ports) == [
        "ingress tcp 6000-6500 from 0.0.0.0/0 reaches Ray or metrics port(s) 6379-6383"
    ]
    assert len(exposed_ray_ports({Rule("ingress", "-1", None, None, "cidr6", "::/0")}, ports)) == 6


def test_rules_round_trip_through_ip_permissions() -> None:
    rule = Rule("ingress", "tcp", 22, 22, "cidr", "198.51.100.0/24")
    group = {"IpPermissions": [rule.permission("ssh")], "IpPermissionsEgress": []}
    assert rules_of(group) == {rule}


# --------------------------------------------------------------------------- errors


def _client_error(code: str, message: str, retries: int = 0) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"RetryAttempts": retries}}, "RunInstances"
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (NoCredentialsError(), "no AWS credentials found"),
        (EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com/"), "cannot reach https://ec2"),
        (_client_error("AuthFailure", "AWS was not able to validate the provided access credentials"), "rejected"),
        (_client_error("RequestLimitExceeded", "Request limit exceeded.", retries=7), "8 attempts"),
        (_client_error("InsufficientInstanceCapacity", "no g5.12xlarge capacity"), "no capacity for it in us-east-1"),
        (_client_error("VcpuLimitExceeded", "You have requested more vCPU capacity"), "Service Quotas"),
        (_client_error("InvalidAMIID.NotFound", "The image id '[ami-1]' does not exist"), "check [ami] in the spec"),
        (
            _client_error("UnauthorizedOperation", "Not authorized. Encoded authorization failure message: QkFE"),
            "not permitted (UnauthorizedOperation)",
        ),
        (_client_error("SomethingNew", "first line\nsecond line"), "AWS error SomethingNew: first line"),
    ],
)
def test_aws_errors_become_one_clear_line(exc: Exception, expected: str) -> None:
    line = explain_error(exc, "launching 2 x g5.12xlarge for gpu", "us-east-1")
    assert line.startswith("launching 2 x g5.12xlarge for gpu: ")
    assert expected in line and "\n" not in line and "QkFE" not in line


def test_credentials_are_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    line = explain_error(
        _client_error("Odd", "key AKIAIOSFODNN7EXAMPLE secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"), "x"
    )
    assert "AKIA" not in line and "wJalr" not in line and line.count("***") == 2


# --------------------------------------------------------------------------- prices


def test_price_table_covers_the_common_gpu_types() -> None:
    for itype in ("p5.48xlarge", "p4d.24xlarge", "p4de.24xlarge", "g5.xlarge", "g5.48xlarge", "g6.xlarge",
                  "g6e.12xlarge", "g4dn.xlarge", "p3.2xlarge", "m5.2xlarge", "c5.xlarge"):  # fmt: skip
        assert instance_types.hourly_usd(itype) is not None and instance_types.gpu_count(itype) is not None
    assert instance_types.gpu_count("p5.48xlarge") == 8 and instance_types.gpu_count("g5.12xlarge") == 4
    assert instance_types.gpu_count("m5.2xlarge") == 0
    assert instance_types.PRICES_AS_OF in instance_types.PRICE_NOTE and "approximate" in instance_types.PRICE_NOTE


def test_gpus_of_falls_back_to_the_described_type() -> None:
    assert gpus_of("g5.12xlarge") == 4
    assert gpus_of("p5e.48xlarge", {"GpuInfo": {"Gpus": [{"Count": 8}]}}) == 8
    assert gpus_of("r7i.large", {}) == 0
    assert gpus_of("unknown.type") is None


# --------------------------------------------------------------------------- what the state keeps


def test_the_state_keeps_no_secret_looking_key() -> None:
    data = {
        "ray_image": "registry.example.com/ray:2.60.0-gpu",
        "ray_resources": {"a10g": 4},
        "storage_s3_mounts": [{"bucket": "data", "path": "/mnt/data"}],
        "docker_registry_auth": {"registry": "r.example.com", "username": "ci", "password": "x"},
        "storage_s3_credentials": {"access_key_id": "AKIA", "secret_access_key": "x"},
        "ray_env": {"HF_TOKEN": "x", "OMP_NUM_THREADS": "4"},
        "docker_log_opts": {"max-size": "10m"},
        "nested": [{"inner": {"db_password": "x"}}],
    }
    kept, omitted = without_secrets(data)
    assert kept == {
        "ray_image": "registry.example.com/ray:2.60.0-gpu",
        "ray_resources": {"a10g": 4},
        "storage_s3_mounts": [{"bucket": "data", "path": "/mnt/data"}],
        "docker_log_opts": {"max-size": "10m"},
    }
    assert omitted == ["docker_registry_auth", "nested", "ray_env", "storage_s3_credentials"]
