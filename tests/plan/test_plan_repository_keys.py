"""Plans of package repositories: their signing keys come over https only, and each is checked against
the fingerprints rayrig pins before it is written. A key fetched over plain HTTP, or one a mirror or
anyone on the path replaced, would vouch for whatever packages came with it."""

from __future__ import annotations

import shlex

import pytest

from deploy.host.base import RepositoryKeyError
from deploy.host.repo_keys import PINNED
from tests.plan.fakes.fake_os import HOST_INFO
from tests.plan.fakes.fake_repo_keys import KeyFetch, key_answer, key_fetch
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster
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


# --- Every key is checked against its pinned fingerprints before it is written -----------------------

KEY_OP = r"Download .* repository key and check its fingerprint"
DOCKER_ON = {"ubuntu22": "ubuntu", "debian12": "debian", "rocky9": "centos"}


@pytest.mark.parametrize("os_name", ["ubuntu22", "debian12", "rocky9"])
def test_docker_key_is_checked_in_a_private_folder_before_it_is_written(os_name):
    host = run_deploy(reference_cluster(os_name, data={"docker_source": "docker"}))[HEAD]
    fetch = key_fetch(host.op("Download Docker's repository key and check its fingerprint").commands)
    assert fetch.url == f"https://download.docker.com/linux/{DOCKER_ON[os_name]}/gpg"
    assert fetch.fingerprints == PINNED["docker-rpm" if os_name == "rocky9" else "docker-deb"]
    script = shlex.split(host.op("Download Docker's repository key").commands[0])[2]
    # Downloaded into a folder of its own, checked by gpg, and only then installed at its place.
    assert script.index("mktemp -d") < script.index("curl ") < script.index("--show-keys") < script.index("mv -f")
    # Nothing else fetches a key or writes one: the repository points at the checked copy.
    key_ops = [op for op in host.ops if fetch.dest in op.uploads or any(fetch.url in c for c in op.commands)]
    assert [op.name for op in key_ops] == ["Docker | Download Docker's repository key and check its fingerprint"]
    names = [op.name for op in host.ops]
    repo = next(n for n in names if n.startswith("Docker | Add Docker's"))
    assert names.index(key_ops[0].name) < names.index(repo) < names.index("Docker | Install the Docker engine")
    if os_name == "rocky9":
        assert fetch.rpm_import and fetch.dest == "/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-docker-rpm"
        assert f"gpgkey=file://{fetch.dest}\n" in host.uploads["/etc/yum.repos.d/docker-ce.repo"]
    else:
        assert not fetch.rpm_import and fetch.dest == "/etc/apt/keyrings/docker.asc"


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_a_key_in_place_with_its_pinned_fingerprint_plans_nothing(os_name):
    run = run_deploy(reference_cluster(os_name, "converged", data={"docker_source": "docker"}))
    assert run.changed_hosts == {}
    assert not any(run[name].has_op(KEY_OP) for name in (HEAD, GPU_WORKER))


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_a_key_in_place_with_another_fingerprint_is_fetched_and_checked_again(os_name):
    hosts = reference_cluster(os_name, "converged", data={"docker_source": "docker"})
    dest = "/etc/apt/keyrings/docker.asc" if os_name == "ubuntu22" else "/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-docker-rpm"
    for _name, data in hosts:
        data["fake_responses"].update(key_answer(dest, ["0" * 40]))
    host = run_deploy(hosts)[HEAD]
    assert key_fetch(host.op("Download Docker's repository key").commands).dest == dest
    toolkit = run_deploy(hosts)[GPU_WORKER]
    assert not toolkit.has_op("Download the NVIDIA Container Toolkit repository key")  # its own key is fine


# --- EPEL: its release package verified, from the distribution's extras or with its key pinned ------

S3FS = {"storage_s3_mounts": [{"bucket": "datasets", "path": "/mnt/datasets", "driver": "s3fs"}]}


def as_rhel(hosts: list) -> list:
    """``hosts`` (a rocky9 cluster) on Red Hat Enterprise Linux 9 itself: os-release says ID="rhel"."""
    for _name, data in hosts:
        responses = data["fake_responses"]
        responses[HOST_INFO] = [
            'ID="rhel"' if line == 'ID="rocky"' else line for line in responses[HOST_INFO]
        ]  # fmt: skip
    return hosts


def test_epel_on_rocky_comes_from_the_distributions_extras_before_s3fs():
    host = run_deploy(reference_cluster("rocky9", data=S3FS))[HEAD]
    assert host.op("Add the EPEL repository \\(for s3fs\\)").commands == ["dnf install -y epel-release"]
    assert not host.has_op("EPEL's repository key")


def test_epel_on_rhel_is_installed_only_after_its_key_is_checked_and_with_its_signature_checked():
    host = run_deploy(as_rhel(reference_cluster("rocky9", data=S3FS)))[HEAD]
    fetch = key_fetch(host.op("Download EPEL's repository key and check its fingerprint").commands)
    assert fetch == KeyFetch(
        "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9",
        "/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-epel-9",
        True,
        ("FF8AD1344597106ECE813B918A3872BF3228467C",),
    )
    add = host.op("Add the EPEL repository \\(for s3fs\\)")
    assert add.commands == [
        "dnf install -y --setopt=localpkg_gpgcheck=1 "
        "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm"
    ]
    key = host.op("EPEL's repository key").step
    assert key < add.step < host.op("Install the shared-storage packages").step
    assert "s3fs-fuse" in host.op("Install the shared-storage packages").commands[-1]


def test_epel_for_the_driver_comes_before_the_driver_and_not_inside_its_commands():
    hosts = as_rhel(
        reference_cluster("rocky9", data={"nvidia_driver": "install"}, options={GPU_WORKER: {"driver": False}})
    )
    host = run_deploy(hosts)[GPU_WORKER]
    add = host.op("Add the EPEL repository \\(for the NVIDIA driver's DKMS\\)")
    assert host.op("EPEL's repository key").step < add.step < host.op("Install the NVIDIA 550 driver").step
    assert not any("epel-release" in c for c in host.op("Install the NVIDIA 550 driver").commands)


def test_epel_for_the_node_exporter_on_rhel_goes_through_the_checked_path_too():
    host = run_deploy(as_rhel(reference_cluster("rocky9")))[CPU_WORKER]
    add = host.op("Add the EPEL repository \\(for the node exporter\\)")
    assert add.commands[0].startswith("dnf install -y --setopt=localpkg_gpgcheck=1 ")
    assert host.op("Download EPEL's repository key").step < add.step < host.op("Install the node exporter").step
