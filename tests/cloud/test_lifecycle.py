"""An EC2 cluster's life on this machine and on AWS: private state files without secrets,
``down`` in the wrong region, two ``up`` runs at once, idempotent launches."""

from __future__ import annotations

import contextlib
import json
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from cloud import ec2
from cloud.ec2 import aws as ec2_aws
from cloud.ec2 import bring_up
from cloud.ec2.aws import forget_connections
from cloud.ec2.spec import load_spec
from cloud.ec2.state import cluster_lock
from tests.cloud.conftest import REGION, Calls, base_spec, raw_client, run_cli

pytestmark = pytest.mark.cloud

SECRET = "hunter2-do-not-store"


@pytest.fixture
def client(aws: str) -> Any:
    return raw_client("ec2", aws)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def heads(client: Any, name: str = "sprint42") -> list[str]:
    """The live head instances of cluster ``name``."""
    flt = [
        {"Name": "tag:rayrig:cluster", "Values": [name]},
        {"Name": "tag:rayrig:role", "Values": ["head"]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    return [i["InstanceId"] for r in client.describe_instances(Filters=flt)["Reservations"] for i in r["Instances"]]


def bring(path: Path, probe: Any) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print)


# --------------------------------------------------------------------------- the state files


def test_state_files_are_private_and_hold_no_secret(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "state" / "ec2"
    folder.mkdir(parents=True, mode=0o755)  # as an older rayrig left it
    data = base_spec(keys[0])
    data["host_data"] = {
        "ray_image": "registry.example.com/ray:2.60.0-gpu",
        "docker_registry_auth": {"registry": "registry.example.com", "username": "ci", "password": SECRET},
        "storage_s3_credentials": {"access_key_id": "AKIAEXAMPLE", "secret_access_key": SECRET},
        "ray_env": {"WANDB_API_KEY": SECRET},
    }
    data["network"] = {"public_ips": False, "bastion": "ec2-user@bastion.example.com"}
    result = bring(write_spec(data), no_ssh)
    ec2.cluster_hosts("sprint42")  # writes the bastion's ssh_config

    assert mode(folder) == 0o700
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["current", "sprint42.json", "sprint42.lock", "sprint42.ssh_config"]
    for path in folder.iterdir():
        assert mode(path) == 0o600, path.name
        assert SECRET not in path.read_text()
    state = json.loads(result.state_file.read_text())
    assert state["host_data"] == {"ray_image": "registry.example.com/ray:2.60.0-gpu"}
    assert state["secret_keys"] == ["docker_registry_auth", "ray_env", "storage_s3_credentials"]


def test_the_inventory_reads_secrets_from_the_spec_and_refuses_without_it(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any
) -> None:
    data = base_spec(keys[0])
    data["host_data"] = {"docker_registry_auth": {"registry": "r.example.com", "username": "ci", "password": SECRET}}
    path = write_spec(data)
    bring(path, no_ssh)

    ((_, head),), _ = ec2.cluster_hosts("sprint42")
    assert head["docker_registry_auth"]["password"] == SECRET

    path.unlink()
    with pytest.raises(ec2.CloudError) as caught:
        ec2.cluster_hosts("sprint42")
    assert f"the spec {path}" in str(caught.value) and "docker_registry_auth are only in the spec" in str(caught.value)
    assert SECRET not in str(caught.value)


# --------------------------------------------------------------------------- down in the wrong region


def test_down_in_another_region_refuses_and_keeps_the_cluster(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bring(write_spec(), no_ssh)
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--region", "eu-west-1", "--yes") == 1

    err = capsys.readouterr().err
    assert "nothing of cluster sprint42 is in eu-west-1" in err and f"records it in {REGION}" in err
    assert "--region us-east-1" in err
    assert (tmp_path / "state" / "ec2" / "sprint42.json").is_file()
    assert len(heads(client)) == 1

    assert run_cli("cloud", "down", "sprint42", "--yes") == 0  # the recorded region
    assert heads(client) == [] and not (tmp_path / "state" / "ec2" / "sprint42.json").exists()


def test_down_in_another_region_takes_down_what_is_there_but_keeps_the_record(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    aws: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bring(write_spec(), no_ssh)  # us-east-1, recorded here
    west = raw_client("ec2", aws)
    west.meta.config.region_name = "eu-west-1"
    other = json.loads((tmp_path / "state" / "ec2" / "sprint42.json").read_text())
    # The same name in eu-west-1, brought up from another machine: this machine's record still says us-east-1.
    (tmp_path / "state" / "ec2" / "sprint42.json").rename(tmp_path / "saved.json")
    bring(write_spec(base_spec(keys[0], region="eu-west-1")), no_ssh)
    (tmp_path / "state" / "ec2" / "sprint42.json").write_text(json.dumps(other))
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--region", "eu-west-1", "--yes") == 0

    out = capsys.readouterr().out
    assert "Nothing is left with the tag rayrig:cluster=sprint42 in eu-west-1." in out
    assert "it records cluster sprint42 in us-east-1, which was not searched" in out
    assert json.loads((tmp_path / "state" / "ec2" / "sprint42.json").read_text())["region"] == REGION
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0


def test_up_refuses_a_name_recorded_in_another_region(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, client: Any
) -> None:
    bring(write_spec(), no_ssh)
    with pytest.raises(ec2.CloudError, match="records cluster sprint42 in us-east-1, not eu-west-1"):
        bring(write_spec(base_spec(keys[0], region="eu-west-1")), no_ssh)
    assert len(heads(client)) == 1


# --------------------------------------------------------------------------- two runs at once


def run_together(
    *runs: Callable[[], Any], sync_on: pytest.MonkeyPatch, meet_at: tuple[str, ...] = ("resolve_ami",)
) -> list[BaseException | None]:
    """Run ``runs`` in threads that wait for each other after each step of ``up`` named in ``meet_at``:
    after ``resolve_ami`` (before the lock), both runs are under way; after ``discover`` (no lock in
    common), both have looked before either launches."""
    errors: list[BaseException | None] = [None] * len(runs)

    def wrap(i: int, run: Callable[[], Any]) -> None:
        try:
            run()
        except BaseException as exc:  # reported by the test
            errors[i] = exc

    def meeting(real: Callable[..., Any]) -> Callable[..., Any]:
        barrier = threading.Barrier(len(runs), timeout=30)

        def then_wait(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            return result

        return then_wait

    for step in meet_at:
        sync_on.setattr(bring_up, step, meeting(getattr(bring_up, step)))
    threads = [threading.Thread(target=wrap, args=(i, r)) for i, r in enumerate(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def lose_the_head(client: Any) -> None:
    """A spot reclaim, or someone's console click: the head is terminated, the rest of the cluster stays."""
    (head,) = heads(client)
    client.terminate_instances(InstanceIds=[head])
    client.get_waiter("instance_terminated").wait(InstanceIds=[head], WaiterConfig={"Delay": 0.1})


def test_two_ups_at_once_end_with_one_head(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_spec()
    bring(path, no_ssh)
    lose_the_head(client)
    capsys.readouterr()

    errors = run_together(lambda: bring(path, no_ssh), lambda: bring(path, no_ssh), sync_on=monkeypatch)

    assert errors == [None, None]
    assert len(heads(client)) == 1
    assert "waiting for another 'rayrig cloud up' or 'down' of cluster sprint42" in capsys.readouterr().out
    lock = tmp_path / "state" / "ec2" / "sprint42.lock"
    assert mode(lock) == 0o600 and mode(lock.parent) == 0o700


class ClientTokens:
    """AWS's idempotent RunInstances (moto 5 ignores ClientToken): a token seen before answers with its
    instances as they are now, or IdempotentParameterMismatch when other parameters come with it."""

    def __init__(self, url: str):
        self.ec2 = raw_client("ec2", url)
        self.seen: dict[str, tuple[dict[str, Any], list[str]]] = {}
        self.lock = threading.Lock()

    def remember(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["test_params"] = dict(params)

    def run(self, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        params = context["test_params"]
        token = params["ClientToken"]
        with self.lock:
            if token not in self.seen:
                answer = self.ec2.run_instances(**params)
                self.seen[token] = (params, [i["InstanceId"] for i in answer["Instances"]])
            first, ids = self.seen[token]
            if first != params:
                return AWSResponse("https://ec2.amazonaws.com/", 400, {}, None), {  # type: ignore[arg-type]
                    "Error": {"Code": "IdempotentParameterMismatch", "Message": "inconsistent arguments"},
                    "ResponseMetadata": {"HTTPStatusCode": 400},
                }
            now = [i for r in self.ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]]
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, None), {"Instances": now}  # type: ignore[arg-type]


@pytest.fixture
def client_tokens(aws: str, monkeypatch: pytest.MonkeyPatch) -> ClientTokens:
    tokens = ClientTokens(aws)
    hooked = ec2_aws.aws_session

    def with_tokens(region: str | None) -> Any:
        session = hooked(region)
        session.events.register("before-parameter-build.ec2.RunInstances", tokens.remember)
        session.events.register("before-call.ec2.RunInstances", tokens.run)
        return session

    monkeypatch.setattr(ec2_aws, "aws_session", with_tokens)
    forget_connections()
    return tokens


@contextlib.contextmanager
def no_lock(name: str, say: Any) -> Iterator[None]:
    yield None


def test_two_ups_on_two_machines_launch_each_slot_once(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    client: Any,
    client_tokens: ClientTokens,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = write_spec()
    bring(path, no_ssh)
    lose_the_head(client)
    monkeypatch.setattr(bring_up, "cluster_lock", no_lock)  # two machines: no lock in common

    errors = run_together(
        lambda: bring(path, no_ssh), lambda: bring(path, no_ssh), sync_on=monkeypatch, meet_at=("discover",)
    )

    assert errors == [None, None]
    assert len(heads(client)) == 1
    # The lost head's token is spent on a terminated instance: the slot's next token launched the new one.
    assert len(client_tokens.seen) == 4


def test_a_slot_launched_by_another_run_with_other_parameters_is_taken_as_it_is(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    client_tokens: ClientTokens,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_spec()
    bring(path, no_ssh)
    lose_the_head(client)
    monkeypatch.setattr(bring_up, "cluster_lock", no_lock)
    bigger = write_spec(base_spec(keys[0], head={"instance_type": "m5.2xlarge", "root_volume_gb": 60}))
    capsys.readouterr()

    errors = run_together(
        lambda: bring(path, no_ssh), lambda: bring(bigger, no_ssh), sync_on=monkeypatch, meet_at=("discover",)
    )

    assert errors == [None, None]
    assert len(heads(client)) == 1
    assert "head slot 0: another run launched" in capsys.readouterr().out


def test_a_new_cluster_of_the_same_name_never_reuses_a_token(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, client_tokens: ClientTokens, calls: Calls
) -> None:
    # AWS keeps a token for a day after its instance ended: a cluster brought up again must not meet them.
    path = write_spec()
    bring(path, no_ssh)
    first = {p["ClientToken"] for p in calls.params("RunInstances")}
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    calls.clear()

    bring(path, no_ssh)

    again = [p["ClientToken"] for p in calls.params("RunInstances")]
    assert len(again) == 3 and not first & set(again)
    assert len(heads(client)) == 1


def test_the_cluster_lock_waits_for_the_holder(tmp_path: Path) -> None:
    said: list[str] = []
    order: list[str] = []
    with cluster_lock("sprint42", said.append):
        second = threading.Thread(target=lambda: cluster_lock_then(order))
        second.start()
        second.join(0.3)
        order.append("first done")
    second.join(10)
    assert order == ["first done", "second"]


def cluster_lock_then(order: list[str]) -> None:
    with cluster_lock("sprint42", lambda line: None):
        order.append("second")
