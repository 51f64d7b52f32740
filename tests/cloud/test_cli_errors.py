"""``rayrig cloud ls`` and ``down`` against moto: the region they find themselves, and one line when AWS fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud import ec2
from cloud.ec2.aws import forget_connections
from cloud.ec2.spec import load_spec
from cloud.ec2.state import recorded_regions, state_path
from tests.cloud.conftest import PlacementGroups, run_cli

pytestmark = pytest.mark.cloud


def one_line(err: str) -> str:
    """The error's line: exactly one line on stderr, and no traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def lacking_placement_groups(placement_groups: PlacementGroups) -> None:
    """moto's server as it is: it does not implement DescribePlacementGroups and answers with an HTML error page."""
    placement_groups.describe = lambda **_: None  # type: ignore[method-assign]  # the call reaches moto


@pytest.mark.parametrize("argv", [["cloud", "ls", "--region", "us-east-1"], ["cloud", "down", "sprint42"]])
def test_an_endpoint_that_lacks_a_call_is_one_line_naming_it(
    argv: list[str], lacking_placement_groups: None, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(*argv) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"rayrig cloud {argv[1]}: ")
    assert f"{aws} answered with something that is not an AWS response" in line
    assert "it may not implement this call: check RAYRIG_AWS_ENDPOINT_URL" in line


def test_ls_without_a_region_looks_where_the_recorded_clusters_are(
    write_spec: Callable[..., Path], no_ssh: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ec2.up(load_spec(write_spec(region="eu-west-1")), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)
    assert recorded_regions() == ["eu-west-1"]
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    forget_connections()
    capsys.readouterr()

    assert run_cli("cloud", "ls") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[0] == "NAME" and any(line.startswith("sprint42") for line in out)


def test_ls_looks_in_the_recorded_regions_and_boto3s_and_says_which_is_which(
    write_spec: Callable[..., Path], no_ssh: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ec2.up(load_spec(write_spec(region="eu-west-1")), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)
    capsys.readouterr()
    assert run_cli("cloud", "ls") == 0  # AWS_DEFAULT_REGION is us-east-1, where nothing runs
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "==> eu-west-1" and out[1].split()[0] == "NAME" and out[2].startswith("sprint42")
    assert out[-2:] == ["==> us-east-1", "No rayrig cluster in us-east-1."]


def test_ls_without_any_region_known_says_what_to_pass(
    monkeypatch: pytest.MonkeyPatch, calls: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert run_cli("cloud", "ls") == 2
    assert one_line(capsys.readouterr().err) == (
        "rayrig cloud ls: no AWS region known: this machine records no cluster and boto3 has no default region; "
        "pass --region REGION, or set AWS_REGION"
    )
    assert calls.names() == []


def test_down_of_an_unrecorded_cluster_without_any_region_says_what_to_pass(
    monkeypatch: pytest.MonkeyPatch, calls: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert run_cli("cloud", "down", "sprint42") == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("rayrig cloud down: no AWS region known for cluster sprint42: this machine has no record")
    assert str(state_path("sprint42")) in line and line.endswith(
        "pass --region REGION (the region it runs in), or set AWS_REGION"
    )
    assert calls.names() == []


def test_an_unreadable_record_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    state_path("sprint42").parent.mkdir(parents=True)
    state_path("sprint42").write_text("{not json")
    assert run_cli("cloud", "ls") == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"rayrig cloud ls: cannot read {state_path('sprint42')}")


def test_a_spec_that_is_not_toml_is_one_line_naming_the_file(
    tmp_path: Path, calls: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in (("spec.json", json.dumps({"name": "sprint42"})), ("spec.yaml", "name: sprint42\n")):
        path = tmp_path / name
        path.write_text(text)
        assert run_cli("cloud", "up", str(path), "--yes") == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"rayrig cloud up: invalid cluster spec: {path}: not valid TOML: ")
        assert line.endswith("fix it; nothing was created and AWS was not contacted")
    assert run_cli("cloud", "up", str(tmp_path), "--yes") == 2
    assert f"invalid cluster spec: {tmp_path}: cannot read it" in one_line(capsys.readouterr().err)
    assert calls.names() == []


def test_a_spec_of_wrong_types_names_each_key_below_one_line(
    tmp_path: Path, calls: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "types.toml"
    path.write_text('name = "sprint42"\nworkers = 3\nhead = "a"\nhost_data = 5\n')
    assert run_cli("cloud", "up", str(path), "--yes") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first, *details = err.splitlines()
    assert first.startswith(f"rayrig cloud up: invalid cluster spec {path} (")
    assert f"  - {path}: workers = 3: expected an array of tables ([[workers]])" in details
    assert f"  - {path}: head = 'a': expected a table with instance_type" in "\n".join(details)
    assert all(line.startswith("  - ") for line in details)
    assert calls.names() == []


def test_down_goes_on_past_a_deletion_the_endpoint_lacks_and_names_it(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    placement_groups: PlacementGroups,
    aws: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ec2.up(load_spec(write_spec()), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)
    placement_groups.delete = lambda **_: None  # type: ignore[method-assign]  # DeletePlacementGroup reaches moto
    forget_connections()  # sessions made from here on answer the deletion with moto's HTML error page
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--yes") == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert f"could not delete: deleting placement group rayrig-sprint42: {aws} answered with something" in captured.out
    assert "deleting VPC" in captured.out  # the deletions after it went on
    assert "placement group rayrig-sprint42" in captured.out.split("Still tagged rayrig:cluster=sprint42")[1]
