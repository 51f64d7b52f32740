"""The head's image mirror: how an image's reference maps into it, and the registry's configuration."""

from __future__ import annotations

import pytest

from deploy.host import image_mirror
from deploy.host.ray_image import pull_seconds


@pytest.mark.parametrize(
    ("image", "registry", "path"),
    [
        ("rayproject/ray:2.60.0-py311-gpu", "docker.io", "rayproject/ray"),
        ("ubuntu", "docker.io", "library/ubuntu"),
        ("ubuntu:24.04", "docker.io", "library/ubuntu"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch"),
        ("10.0.0.5:5000/ml/ray-torch:2.60.0-cu128", "10.0.0.5:5000", "ml/ray-torch"),
        ("localhost/ray:1", "localhost", "ray"),
        ("registry.lab.example/team/ray@sha256:" + "ab" * 32, "registry.lab.example", "team/ray"),
        ("10.0.0.5:5000/ray", "10.0.0.5:5000", "ray"),  # a port is not a tag
    ],
)
def test_references_are_read_the_way_docker_reads_them(image, registry, path):
    assert image_mirror.split_reference(image) == (registry, path)


def test_the_mirror_reference_keeps_the_path_and_takes_the_runs_tag():
    ref = image_mirror.mirror_reference("nvcr.io/nvidia/pytorch@sha256:" + "ab" * 32, "10.0.0.1:5000", "rayrig-1-a")
    assert ref == "10.0.0.1:5000/nvidia/pytorch:rayrig-1-a"


def test_the_registry_listens_on_the_port_and_keeps_its_storage():
    text = image_mirror.registry_config("10.0.0.1:5050")
    assert "addr: 10.0.0.1:5050\n" in text
    assert f"rootdirectory: {image_mirror.STORAGE}\n" in text
    assert "proxy" not in text  # a copy, not a pull-through proxy: see the module's docstring


def test_the_pulls_own_seconds_come_from_its_waits_last_line():
    assert pull_seconds(["result 0 81.2"]) == 81.2
    assert pull_seconds(["noise", "result 0 3.0"]) == 3.0
    assert pull_seconds(["result 1 2.0"]) is None  # a failed pull is not counted
    assert pull_seconds(["copied 0 4.0"]) is None
    assert pull_seconds([]) is None


class _Meta:
    def __init__(self, lines: list[str], ok: bool = True):
        self.stdout_lines, self.ok = lines, ok

    def is_complete(self) -> bool:
        return True

    def did_succeed(self) -> bool:
        return self.ok


class _Run:
    """What :class:`image_mirror.MirrorDigest` reads of a pyinfra run: the head's operations' output."""

    def __init__(self, lines: list[str] | None, executing: bool = True, ok: bool = True):
        self.is_executing = executing
        self.inventory = self
        self.ops = (
            {"head": {"h1": type("Data", (), {"operation_meta": _Meta(lines, ok)})()}} if lines is not None else {}
        )

    def get_host(self, name: str) -> str:
        return name


def _pinned(run: _Run) -> str:
    image_mirror.run_memo(run, "mirror_digests")["ray_image"] = "h1"
    digest = image_mirror.MirrorDigest(run, "head", "ray_image")
    return str(image_mirror.PinnedPull(digest, "10.0.0.1:5000/r/ray:rayrig-1", "r/ray:1", 60))


DIGEST = "sha256:" + "ab" * 32


def test_a_host_pulls_the_digest_the_heads_copy_printed_never_the_tag():
    command = _pinned(_Run(["noise", f"copied 0 12.3 {DIGEST}"]))
    assert command.startswith(f"timeout 60 docker pull --quiet 10.0.0.1:5000/r/ray@{DIGEST} && ")
    assert f"docker tag 10.0.0.1:5000/r/ray@{DIGEST} r/ray:1" in command
    assert "docker pull --quiet 10.0.0.1:5000/r/ray:rayrig-1" not in command


@pytest.mark.parametrize(
    "run",
    [_Run(["copied 0 12.3"]), _Run(None), _Run([f"digest {DIGEST}"], ok=False), _Run(["digest sha256:short"])],
    ids=["no digest printed", "the head ran no copy", "the copy failed", "not a digest"],
)
def test_without_the_heads_digest_the_pull_fails_and_names_the_head(run):
    command = _pinned(run)
    assert "docker" not in command and command.startswith("sh -c ")
    assert "the head (head) printed no digest for its copy of r/ray:1" in command


def test_before_the_run_the_plan_shows_where_the_digest_goes():
    assert "'10.0.0.1:5000/r/ray@<the digest the head copied>'" in _pinned(_Run(None, executing=False))


def test_the_cluster_side_of_the_mirror_refuses_writes_and_the_copy_side_listens_on_loopback():
    cluster = image_mirror.registry_config("10.0.0.1:5000")
    assert "addr: 10.0.0.1:5000\n" in cluster and "readonly:\n      enabled: true" in cluster
    assert "delete:\n    enabled: false" in cluster
    copy_side = image_mirror.registry_config("127.0.0.1:5000", read_only=False)
    assert "addr: 127.0.0.1:5000\n" in copy_side and "readonly" not in copy_side
    assert "delete:\n    enabled: false" in copy_side


@pytest.mark.parametrize(
    ("image", "source", "local"),
    [
        ("rayproject/ray:2.60.0", "rayproject/ray:2.60.0", "rayproject/ray:2.60.0"),  # a tag: as it is
        ("r/ray:1@sha256:" + "0a" * 32, "r/ray@sha256:" + "0a" * 32, "r/ray:rayrig-0a0a0a0a0a0a"),
        ("10.0.0.5:5000/ml/ray@sha256:" + "fe" * 32, "10.0.0.5:5000/ml/ray@sha256:" + "fe" * 32,
         "10.0.0.5:5000/ml/ray:rayrig-fefefefefefe"),  # a registry's port is not a tag
        ("[fd00::5]:5000/ray:2@sha256:" + "12" * 32, "[fd00::5]:5000/ray@sha256:" + "12" * 32,
         "[fd00::5]:5000/ray:rayrig-121212121212"),
    ],
)  # fmt: skip
def test_a_pinned_image_is_fetched_by_its_digest_alone_and_run_by_a_tag_of_that_digest(image, source, local):
    assert image_mirror.source_reference(image) == source
    assert image_mirror.local_name(image) == local
    assert "@" not in image_mirror.local_name(image)  # docker tag refuses a digest
