"""OS detection: each supported system's Platform, and an unsupported one named with its host."""

from __future__ import annotations

import pytest

from deploy.host import platform
from deploy.run.facts import HostInfo
from tests.plan.fakes.fakehosts import OS_RELEASE


def host_info(os_name: str, **extra: str) -> dict:
    lines = [*OS_RELEASE[os_name], "RAYRIG_ARCH=x86_64", "RAYRIG_MEM_KB=16384000", "RAYRIG_NOFILE_HARD=1048576"]
    return HostInfo().process(lines + [f"{k}={v}" for k, v in extra.items()])


@pytest.mark.parametrize(
    "os_name,family,codename,base,repo_path",
    [
        ("ubuntu22", "apt", "jammy", ("ca-certificates", "curl", "gnupg"), "ubuntu"),
        ("ubuntu24", "apt", "noble", ("ca-certificates", "curl", "gnupg"), "ubuntu"),
        ("debian12", "apt", "bookworm", ("ca-certificates", "curl", "gnupg"), "debian"),
        ("rocky9", "dnf", "", ("ca-certificates", "curl", "gnupg2"), "centos"),
        ("al2023", "dnf", "", ("ca-certificates", "curl-minimal", "gnupg2-minimal"), ""),
    ],
)
def test_detect_each_supported_os(os_name, family, codename, base, repo_path):
    plat = platform.detect(host_info(os_name), "h1")
    assert (plat.family, plat.codename, plat.base_packages, plat.docker_repo_path) == (
        family,
        codename,
        base,
        repo_path,
    )


@pytest.mark.parametrize(
    "info,found",
    [
        (host_info("centos7"), "'centos 7'"),
        ({"id": "ubuntu", "version_id": "20.04"}, "'ubuntu 20.04'"),
        ({"id": "debian", "version_id": "13"}, "'debian 13'"),  # no plan tests cover it yet
        ({"id": "amzn", "version_id": "2"}, "'amzn 2'"),
        ({}, "'unknown'"),
    ],
)
def test_detect_unsupported_os_names_the_host(info, found):
    with pytest.raises(platform.UnsupportedPlatform) as error:
        platform.detect(info, "old-box.lab.example")
    assert str(error.value).startswith(f"host old-box.lab.example: unsupported OS {found}")
    assert platform.SUPPORTED in str(error.value)
