"""The cloud tier: moto's server on a free local port, real boto3 clients pointed at it.

rayrig's code is unchanged under test: it makes its clients in ``cloud.ec2.aws``
with the endpoint from ``RAYRIG_AWS_ENDPOINT_URL``. What the tests add goes
through botocore's own event hooks on the sessions rayrig makes:

- ``calls`` records every API call (operation and parameters);
- ``inject`` answers chosen calls with an AWS error response, which botocore
  parses and retries exactly as it would a real one;
- EC2 placement groups, which moto 5 does not implement, are emulated in memory
  (create, describe with tag filters, tag, delete);
- the AWS Pricing API, which moto lacks, answers from a recorded price list on a
  local port of its own (``pricing_api.py``, ``RAYRIG_AWS_PRICING_ENDPOINT_URL``).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.endpoint
import botocore.loaders
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.httpsession import URLLib3Session, create_urllib3_context
from botocore.retries.standard import ExponentialBackoff
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from moto.server import ThreadedMotoServer

from cloud.ec2 import aws as ec2_aws
from cloud.ec2 import waits
from cloud.ec2.spec import SpecError, load_spec
from cloud.ec2.state import state_path
from rayrig.cli import main
from tests.cloud import pricing_api as pricing

REGION = "us-east-1"
#: moto's value of AWS's public parameter: an Amazon Linux 2023 AMI (SSH user ec2-user).
AL2023_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
#: An Ubuntu AMI in moto's catalogue (SSH user ubuntu).
UBUNTU_AMI = "ami-1e749f67"


def run_cli(*argv: str) -> int:
    """``rayrig cloud ...`` as the command line runs it (errors printed as one line); returns the exit status."""
    return main(list(argv))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tls_context_broken_by_gevent() -> bool:
    """Whether gevent monkey-patched this process after ssl was imported (gevent issue 1016).

    pyinfra's CLI patches first thing, so rayrig's real runs never see this. In a pytest run
    that also collects the plan tier, importing ``pyinfra_cli`` patches the process late, and
    building any TLS context then recurses forever.
    """
    try:
        create_urllib3_context()
    except RecursionError:
        return True
    return False


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """One moto server for the whole tier; each test resets its state."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    with pytest.MonkeyPatch.context() as patch:
        if _tls_context_broken_by_gevent():
            # moto is plain HTTP: botocore needs no TLS context to reach it, so do not build one.
            patch.setattr(URLLib3Session, "_get_ssl_context", lambda self: None)
        yield from _serve_moto()


def _serve_moto() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    try:
        server.stop()
    except Exception as exc:  # gevent's LoopExit when the run was patched late; the thread is a daemon
        logging.getLogger(__name__).warning("moto server did not stop cleanly: %r", exc)


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def error_response(service: str, code: str, message: str, status: int = 400) -> AWSResponse:
    """An AWS error as the service sends it (botocore parses it and decides about retries):
    XML for EC2's query protocol, JSON for the others rayrig uses (SSM)."""
    if service == "ec2":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>rayrig-test</RequestID></Response>"
        ).encode()
        headers = {"Content-Type": "text/xml"}
    else:
        body = json.dumps({"__type": code, "message": message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": "rayrig-test"}
    return AWSResponse(f"https://{service}.amazonaws.com/", status, headers, _Raw(body))


class PlacementGroups:
    """EC2 placement groups in memory (moto 5 lacks them), answered at botocore's before-call hook."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], dict[str, Any]] = {}  # by (region, name)
        self._ids = itertools.count(1)

    def _ok(self, parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, _Raw(b"")), parsed

    def _error(self, code: str, message: str) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("https://ec2.amazonaws.com/", 400, {}, _Raw(b"")), {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }

    def remember(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["test_params"] = dict(params)

    def create(self, context: dict[str, Any], region: str, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        params = context["test_params"]
        name = params["GroupName"]
        if (region, name) in self.groups:
            return self._error("InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists.")
        tags = [t for spec in params.get("TagSpecifications", []) for t in spec.get("Tags", [])]
        group = {
            "GroupName": name,
            "GroupId": f"pg-{next(self._ids):017x}",
            "Strategy": params.get("Strategy", "cluster"),
            "State": "available",
            "Tags": tags,
        }
        self.groups[region, name] = group
        return self._ok({"PlacementGroup": group})

    def describe(self, context: dict[str, Any], region: str, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        params = context["test_params"]
        here = {name: g for (where, name), g in self.groups.items() if where == region}
        groups = list(here.values())
        for name in params.get("GroupNames", []):
            if name not in here:
                return self._error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        if params.get("GroupNames"):
            groups = [g for g in groups if g["GroupName"] in params["GroupNames"]]
        for flt in params.get("Filters", []):
            name, values = flt["Name"], flt["Values"]
            if name.startswith("tag:"):
                key = name[4:]
                groups = [g for g in groups if any(t["Key"] == key and t["Value"] in values for t in g["Tags"])]
            elif name == "tag-key":
                groups = [g for g in groups if any(t["Key"] in values for t in g["Tags"])]
            elif name == "group-name":
                groups = [g for g in groups if g["GroupName"] in values]
            else:
                raise AssertionError(f"the placement group emulation does not know filter {name}")
        return self._ok({"PlacementGroups": [dict(g) for g in groups]})

    def delete(self, context: dict[str, Any], region: str, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        name = context["test_params"]["GroupName"]
        if self.groups.pop((region, name), None) is None:
            return self._error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        return self._ok({})

    def create_tags(self, context: dict[str, Any], region: str, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        """CreateTags on placement groups (by GroupId, one call for groups only); any other call goes on to moto."""
        params = context["test_params"]
        ids = params.get("Resources", [])
        if not ids or not all(rid.startswith("pg-") for rid in ids):
            return None
        here = {g["GroupId"]: g for (where, _), g in self.groups.items() if where == region}
        for rid in ids:
            if rid not in here:
                return self._error("InvalidPlacementGroup.Unknown", f"The Placement Group '{rid}' is unknown.")
            tags = {t["Key"]: t for t in here[rid]["Tags"]}
            tags.update({t["Key"]: dict(t) for t in params.get("Tags", [])})
            here[rid]["Tags"] = list(tags.values())
        return self._ok({})

    def register(self, events: Any, region: str) -> None:
        """Answer the placement group calls of a session in ``region`` (groups are per region, as on AWS)."""
        for op, answer in (
            ("CreatePlacementGroup", self.create),
            ("DescribePlacementGroups", self.describe),
            ("DeletePlacementGroup", self.delete),
            ("CreateTags", self.create_tags),
        ):
            events.register(f"before-parameter-build.ec2.{op}", self.remember)
            events.register(f"before-call.ec2.{op}", functools.partial(answer, region=region))


class Calls:
    """Every API call made through rayrig's sessions: (operation, parameters)."""

    MUTATING = ("Create", "Run", "Import", "Authorize", "Revoke", "Attach", "Associate", "Modify", "Start", "Delete",
                "Terminate", "Detach", "Disassociate")  # fmt: skip

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.log.append((model.name, dict(params)))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def mutating(self) -> list[str]:
        return [name for name in self.names() if name.startswith(self.MUTATING)]

    def params(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.log if name == operation]

    def clear(self) -> None:
        self.log.clear()


class Injector:
    """Answer chosen calls with AWS error responses: ``inject.fail("RunInstances", code, times=..., after=...)``."""

    def __init__(self) -> None:
        self.rules: list[dict[str, Any]] = []

    def fail(self, operation: str, code: str, message: str = "injected", *, status: int = 400,
             times: int | None = None, after: int = 0,
             when: Callable[[dict[str, str]], bool] | None = None) -> None:  # fmt: skip
        """Fail ``operation`` with ``code`` after letting ``after`` calls through, ``times`` times (None: always);
        with ``when``, only the requests whose parameters (as sent: ``{"InstanceType": ...,
        "NetworkInterface.1.SubnetId": ...}``) it accepts."""
        self.rules.append(
            {"op": operation, "code": code, "message": message, "status": status, "times": times, "after": after,
             "when": when}
        )  # fmt: skip

    def before_send(self, request: Any, event_name: str, **_: Any) -> AWSResponse | None:
        _, service, operation = event_name.split(".", 2)
        for rule in self.rules:
            if rule["op"] != operation:
                continue
            if rule["when"] is not None and not rule["when"](_form(request)):
                continue
            if rule["after"] > 0:
                rule["after"] -= 1
                return None
            if rule["times"] is not None:
                if rule["times"] <= 0:
                    continue
                rule["times"] -= 1
            return error_response(service, rule["code"], rule["message"], rule["status"])
        return None


def _form(request: Any) -> dict[str, str]:
    """The parameters of a query-protocol request (EC2's), as sent."""
    body = request.body or b""
    text = body.decode() if isinstance(body, bytes) else str(body)
    return {key: values[0] for key, values in urllib.parse.parse_qs(text).items()}


@pytest.fixture(scope="session")
def pricing_server() -> Iterator[tuple[pricing.PricingApi, str]]:
    """One Pricing API server for the whole tier: its state and its URL."""
    api = pricing.PricingApi()
    for url in pricing.serve(api):
        yield api, url


@pytest.fixture(autouse=True)
def pricing_api(pricing_server: tuple[pricing.PricingApi, str], monkeypatch: pytest.MonkeyPatch) -> pricing.PricingApi:
    """The Pricing API with the recorded products (a test may change ``products``), where rayrig asks it."""
    api, url = pricing_server
    api.reset()
    monkeypatch.setenv("RAYRIG_AWS_PRICING_ENDPOINT_URL", url)
    return api


@pytest.fixture
def placement_groups() -> PlacementGroups:
    return PlacementGroups()


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def inject() -> Injector:
    return Injector()


@functools.cache
def _shared_loader() -> Any:
    return botocore.loaders.create_loader()


@pytest.fixture(autouse=True)
def aws(
    moto_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    placement_groups: PlacementGroups,
    calls: Calls,
    inject: Injector,
) -> Iterator[str]:
    """A fresh moto, fake credentials, a private state dir, fast polling, and the hooks above."""
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "RAYRIG_CLUSTER", "RAYRIG_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("RAYRIG_AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("RAYRIG_AWS_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(waits, "POLL_S", 0.01)
    monkeypatch.setattr(waits, "SSH_POLL_S", 0.01)
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")).close()

    # botocore's retry backoff is up to seconds per attempt; the tests keep its logic, not its waits.
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.01)

    real_session = ec2_aws.aws_session

    def hooked_session(region: str | None) -> Any:
        session = real_session(region)
        # Parse the EC2 API model once per test run, not once per session (only speed changes).
        session._session.register_component("data_loader", _shared_loader())
        placement_groups.register(session.events, session.region_name)
        session.events.register("provide-client-params", calls.record)
        session.events.register("before-send", inject.before_send)
        return session

    monkeypatch.setattr(ec2_aws, "aws_session", hooked_session)
    ec2_aws.forget_connections()
    yield moto_url
    ec2_aws.forget_connections()


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    """An ed25519 key pair on disk: (public, private)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = tmp_path / "keys" / "id_ed25519"
    private.parent.mkdir()
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    private.chmod(0o600)
    public = private.with_suffix(".pub")
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        + b" test@rayrig\n"
    )
    return public, private


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + " }"
    raise TypeError(value)


def to_toml(data: dict[str, Any]) -> str:
    """A small TOML writer for specs: scalars and inline tables first, then tables, then arrays of tables."""
    lines = [f'"{k}" = {_toml_value(v)}' for k, v in data.items() if not isinstance(v, (dict, list)) or
             (isinstance(v, list) and not (v and isinstance(v[0], dict)))]  # fmt: skip
    for key, value in data.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]"] + [f'"{k}" = {_toml_value(v)}' for k, v in value.items()]
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                lines += ["", f"[[{key}]]"] + [f'"{k}" = {_toml_value(v)}' for k, v in item.items()]
    return "\n".join(lines) + "\n"


def base_spec(public_key: Path, name: str = "sprint42", **changes: Any) -> dict[str, Any]:
    """A valid spec (as data) for moto: AL2023 through SSM, a head and two spot g5.12xlarge workers."""
    spec: dict[str, Any] = {
        "name": name,
        "region": REGION,
        "owner": "aiko@example.com",
        "ttl": "7d",
        "admin_cidrs": ["198.51.100.0/24"],
        "ssh_public_key": str(public_key),
        "placement_group": True,
        "ami": {"ssm_parameter": AL2023_PARAMETER},
        "head": {"instance_type": "m5.2xlarge", "root_volume_gb": 50},
        "workers": [
            {
                "name": "gpu",
                "instance_type": "g5.12xlarge",
                "count": 2,
                "market": "spot",
                "root_volume_gb": 200,
                "host_data": {"ray_resources": {"a10g": 4}},
            }
        ],
        "host_data": {"ray_image": "registry.example.com/ray:2.60.0-gpu"},
    }
    spec.update(changes)
    return spec


@pytest.fixture
def write_spec(tmp_path: Path, keys: tuple[Path, Path]) -> Callable[..., Path]:
    """``write_spec(name=..., **top_level_changes)`` writes a spec file and returns its path."""
    counter = itertools.count()

    def write(data: dict[str, Any] | None = None, **changes: Any) -> Path:
        spec = data if data is not None else base_spec(keys[0], **changes)
        path = tmp_path / f"spec{next(counter)}-{spec.get('name', 'x')}.toml"
        path.write_text(to_toml(spec), encoding="utf-8")
        return path

    return write


@pytest.fixture
def no_ssh() -> Callable[[str, int, float], bool]:
    """An SSH probe for moto's instances (they have no sshd): answers at once and records the addresses."""
    probed: list[str] = []

    def probe(host: str, port: int, timeout: float) -> bool:
        probed.append(host)
        return True

    probe.probed = probed  # type: ignore[attr-defined]
    return probe


def record_expiry_at(name: str, when: str) -> None:
    """Set the expiry this machine's record of cluster ``name`` holds (what ``reap`` goes by) to ``when``:
    the record as it would be once that time has come, without waiting for it."""
    path = state_path(name)
    state = json.loads(path.read_text(encoding="utf-8"))
    state["expires_at"] = when
    path.write_text(json.dumps(state), encoding="utf-8")


def raw_client(service: str, url: str) -> Any:
    """A plain boto3 client on moto (no rayrig code, no hooks) for the tests' own checks."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _shared_loader())
    return boto3.session.Session(botocore_session=core, region_name=REGION).client(service, endpoint_url=url)


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record any attempt to make a session or send a request (there must be none)."""
    attempts: list[str] = []

    def no_session(region: str | None) -> Any:
        attempts.append(f"session {region}")
        raise AssertionError("a bad spec must not open an AWS session")

    def no_send(self: Any, request: Any) -> Any:
        attempts.append(f"request {request.url}")
        raise AssertionError("a bad spec must not send an AWS request")

    monkeypatch.setattr(ec2_aws, "aws_session", no_session)
    monkeypatch.setattr(botocore.endpoint.Endpoint, "_send", no_send)
    return attempts


def assert_refused_before_any_aws_call(path: Path, fragments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The spec at ``path`` is refused naming it and each of ``fragments``, and so is ``rayrig cloud up`` of it
    (exit 2) before it contacts AWS (with the ``no_aws`` fixture, any attempt fails the test)."""
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"

    assert run_cli("cloud", "up", str(path), "--yes") == 2
    err = capsys.readouterr().err
    assert str(path) in err and fragments[0] in err and "AWS was not contacted" in err
