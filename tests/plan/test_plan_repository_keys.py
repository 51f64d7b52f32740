"""Plans of package repositories: their signing keys come over https only. A key fetched over
plain HTTP could be replaced on the way, and with it every package it vouches for."""

from __future__ import annotations

import pytest

from deploy.host.base import RepositoryKeyError
from tests.plan.fakes.fakehosts import GPU_WORKER, reference_cluster
from tests.plan.harness import run_deploy

MIRROR = "http://mirror.lab.example"


@pytest.mark.parametrize(
    "os_name,data,setting,key_url",
    [
        ("ubuntu22", {"docker_source": "docker", "docker_repo_url": MIRROR}, "docker_repo_url",
         f"{MIRROR}/ubuntu/gpg"),
        ("rocky9", {"docker_repo_url": MIRROR + "/"}, "docker_repo_url", f"{MIRROR}/centos/gpg"),
        ("ubuntu22", {"nvidia_toolkit_repo_url": MIRROR}, "nvidia_toolkit_repo_url", f"{MIRROR}/gpgkey"),
        ("rocky9", {"nvidia_toolkit_repo_url": MIRROR}, "nvidia_toolkit_repo_url", f"{MIRROR}/gpgkey"),
        ("debian12", {"nvidia_cuda_repo_url": MIRROR, "nvidia_driver": "install"}, "nvidia_cuda_repo_url",
         f"{MIRROR}/debian12/x86_64/3bf863cc.pub"),
        ("rocky9", {"nvidia_cuda_repo_url": MIRROR, "nvidia_driver": "install"}, "nvidia_cuda_repo_url",
         f"{MIRROR}/rhel9/x86_64/D42D0685.pub"),
    ],
)  # fmt: skip
def test_a_repository_key_over_plain_http_stops_the_deploy_naming_host_and_key(os_name, data, setting, key_url):
    options = {GPU_WORKER: {"driver": False}} if data.get("nvidia_driver") == "install" else None
    kwargs = {"options": options} if options else {}
    expected = rf"host @fake/[a-z0-9-]+: {setting}: the repository's signing key would be fetched from '{key_url}'"
    with pytest.raises(RepositoryKeyError, match=expected + r" over plain HTTP.*expected an https:// URL"):
        run_deploy(reference_cluster(os_name, data=data, **kwargs))
