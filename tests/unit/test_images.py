"""Building images (images/): wheelhouses, build inputs, progress, and one Ray version everywhere."""

from __future__ import annotations

import re

import pytest

import images
from deploy.contract import paths, settings
from images import build, stream, wheelhouse


def test_manylinux_platforms_cover_older_tags():
    tags = wheelhouse.manylinux_platforms((2, 36))
    assert tags[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_37_x86_64" not in tags


def test_pip_download_command_targets_the_image_python(tmp_path):
    cmd = wheelhouse.pip_download_command(tmp_path, ["ray[default,train]==2.60.0", "torch==2.13.0"], "3.11")
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--abi") + 1] == "cp311" and cmd[cmd.index("--python-version") + 1] == "3.11"
    assert cmd[-2:] == ["ray[default,train]==2.60.0", "torch==2.13.0"]


def test_wheelhouse_requirements():
    assert wheelhouse.wheelhouse_requirements("2.60.0", ["pyyaml"]) == [
        "ray[default,train]==2.60.0",
        "torch==2.13.0",
        "pyyaml",
    ]
    assert wheelhouse.wheelhouse_requirements("2.60.0", torch_requirement=None) == ["ray[default,train]==2.60.0"]


def test_image_inputs_hash_changes_with_every_input():
    files = {"Dockerfile": b"FROM x\n", "install-ray.sh": b"echo\n"}
    args = {"RAY_VERSION": "2.60.0"}
    base = build.image_inputs_hash(files, args, "sha256:aaa", ["ray-2.60.0-cp311.whl"])
    assert base == build.image_inputs_hash(dict(reversed(files.items())), args, "sha256:aaa", ["ray-2.60.0-cp311.whl"])
    variants = [
        build.image_inputs_hash({**files, "Dockerfile": b"FROM y\n"}, args, "sha256:aaa", ["ray-2.60.0-cp311.whl"]),
        build.image_inputs_hash(files, {"RAY_VERSION": "2.61.0"}, "sha256:aaa", ["ray-2.60.0-cp311.whl"]),
        build.image_inputs_hash(files, args, "sha256:bbb", ["ray-2.60.0-cp311.whl"]),
        build.image_inputs_hash(files, args, "sha256:aaa", ["ray-2.61.0-cp311.whl"]),
        build.image_inputs_hash(files, args, "sha256:aaa", []),
    ]
    assert len({base, *variants}) == 6


def test_ray_image_context_has_the_dockerfile_and_its_scripts():
    files = build.context_files(images.context_dir("ray"))
    assert {"Dockerfile", "ensure-python.sh", "install-ray.sh"} <= set(files)
    dockerfile = files["Dockerfile"].decode()
    assert "ARG BASE_IMAGE" in dockerfile and "ARG RAY_VERSION" in dockerfile


def test_stream_command_throttles_output_and_reports_failures():
    shown: list[str] = []
    lines = stream.stream_command(
        ["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done; echo Step 2/2"],
        shown.append,
        "> ",
        every_s=3600,
        always=lambda line: line.startswith("Step"),
    )
    assert lines == ["line1", "line2", "line3", "line4", "line5", "Step 2/2"]
    assert shown == ["> line1", "> Step 2/2 (+4 lines)"]
    with pytest.raises(stream.CommandError, match=r"exit status 3[\s\S]*boom"):
        stream.stream_command(["sh", "-c", "echo boom; exit 3"], shown.append, "> ")


def test_one_ray_version_the_data_contract_default():
    version = settings.defaults()["ray_version"]
    assert version == images.RAY_VERSION
    pyproject = (paths.repo_root() / "pyproject.toml").read_text()
    pins = re.findall(r'"ray\[[a-z,]+\]==([^"]+)"', pyproject)
    assert len(pins) >= 3 and set(pins) == {version}, pins


def test_one_torch_requirement_for_the_image_and_the_test_environment():
    makefile = (paths.repo_root() / "Makefile").read_text()
    assert f"TORCH ?= {wheelhouse.DEFAULT_TORCH_REQUIREMENT}\n" in makefile


def test_ray_dockerfile_has_no_versions_of_its_own():
    dockerfile = (images.context_dir("ray") / "Dockerfile").read_text()
    assert re.findall(r"^ARG (?:BASE_IMAGE|RAY_VERSION|TORCH_REQUIREMENT)\b.*$", dockerfile, re.M) == [
        "ARG BASE_IMAGE", "ARG RAY_VERSION", "ARG TORCH_REQUIREMENT", "ARG RAY_VERSION",
    ]  # fmt: skip


def test_build_image_passes_the_ray_version_and_torch(monkeypatch):
    calls = []
    monkeypatch.setattr(build, "docker_build", lambda tag, files, progress, **kw: calls.append((files, kw)) or "id")
    build.build_image("rayrig/ray:test", base_image="debian:bookworm")
    files, kwargs = calls[0]
    assert "Dockerfile" in files and "install-ray.sh" in files
    assert kwargs["build_args"]["BASE_IMAGE"] == "debian:bookworm"
    assert kwargs["build_args"]["RAY_VERSION"] == images.RAY_VERSION
    assert kwargs["build_args"]["TORCH_REQUIREMENT"] == wheelhouse.DEFAULT_TORCH_REQUIREMENT
    assert kwargs["labels"]["rayrig.ray_version"] == images.RAY_VERSION


def test_context_dir_names_an_image_folder():
    assert (images.context_dir("lab-base") / "Dockerfile").is_file()
    with pytest.raises(FileNotFoundError, match="no Dockerfile"):
        images.context_dir("nothing-here")
