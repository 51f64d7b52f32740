"""image_mirror = "head": the head copies the image into its registry once, every host pulls from it."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from deploy.firewall import nftables
from deploy.host import image_mirror
from deploy.host.image_mirror import MirrorError
from tests.plan.fakes import fake_mirror
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster
from tests.plan.harness import run_deploy

IMAGE = "rayproject/ray:2.60.0-py311-gpu"
MIRROR = "10.0.0.1:5000"
MIRROR_DATA = {"image_mirror": "head"}


def job_args(command: str) -> list[str]:
    """The background pull's arguments (pull-image.sh) from the command that starts it."""
    words = shlex.split(command.split("; systemd-run ", 1)[1])
    return words[words.index("/usr/local/lib/rayrig/pull-image.sh") + 1 :]


@pytest.fixture(scope="module")
def fresh():
    return run_deploy(reference_cluster("ubuntu22", "fresh", data=MIRROR_DATA))


def test_the_head_installs_the_registry_with_docker_and_configures_it(fresh):
    head = fresh[HEAD]
    install = " ".join(head.op("Install base packages").commands)
    assert "docker.io" in install and "docker-registry" in install and "skopeo" in install
    config = head.op("Configure the image mirror's registry").uploads["/etc/docker/registry/config.yml"]
    # the cluster's side: on the head's cluster address only, every write refused, deletes off
    assert "addr: 10.0.0.1:5000\n" in config
    assert "readonly:\n      enabled: true" in config and "delete:\n    enabled: false" in config
    copy_side = head.op("Configure the image mirror's copy side").uploads[image_mirror.WRITER_CONFIG]
    assert "addr: 127.0.0.1:5000\n" in copy_side and "readonly" not in copy_side
    for worker in (GPU_WORKER, CPU_WORKER):
        assert not fresh[worker].has_op("image mirror")
        assert "skopeo" not in " ".join(fresh[worker].commands)


def test_the_registry_is_held_until_configured_and_answers_only_behind_the_firewall(fresh):
    names = [op.name for op in fresh[HEAD].ops]
    held = names.index("Keep the image mirror's registry stopped until it is configured")
    assert fresh[HEAD].op("Keep the image mirror's registry stopped").commands == [
        "systemctl mask docker-registry.service"
    ]
    assert held < names.index(next(n for n in names if "Install base packages" in n))
    started = names.index("Image mirror | Enable and start the image mirror")
    assert names.index("Image mirror | Let the image mirror's registry start") < started
    assert max(i for i, n in enumerate(names) if n.startswith("Firewall |")) < started
    drop_in = fresh[HEAD].op("Put the image mirror behind rayrig's firewall").uploads[image_mirror.DROP_IN_PATH]
    assert "Wants=rayrig-firewall.service" in drop_in and "nft list table inet rayrig" in drop_in


def test_the_head_copies_once_and_every_host_pulls_the_digest_it_copied(fresh):
    head = job_args(fresh[HEAD].op("into the head's mirror").commands[0])
    # DIR TIMEOUT_S IMAGE PULL_REF DOCKER_CONFIG COPY_SRC COPY_DEST SRC_TLS_VERIFY AUTHFILE MODE WRITER WRITER_CONFIG
    assert head[2] == IMAGE and head[5] == IMAGE
    assert re.fullmatch(r"rayproject/ray:rayrig-\d{14}-[0-9a-f]{6}", head[6]), head[6]
    assert head[3] == f"{MIRROR}/{head[6]}"  # the head pulls the copy too (by the digest it copied: pull-image.sh)
    assert head[9:] == ["tag", "127.0.0.1:5000", image_mirror.WRITER_CONFIG]
    for worker in (GPU_WORKER, CPU_WORKER):
        args = job_args(fresh[worker].op(r"from the head's mirror \(in the background\)").commands[0])
        assert args[3] == head[3] and args[5] == "" and args[6] == ""
        assert args[9] == "warm"  # the tag only ahead: anyone who could move it would choose the image
        names = [op.name for op in fresh[worker].ops]
        pinned = names.index(f"Ray image | Pull {IMAGE} from the head's mirror by the digest the head copied")
        assert names.index(f"Ray image | Wait for the pull of {IMAGE}") < pinned
        command = fresh[worker].op(f"Pull {IMAGE} from the head's mirror by the digest").commands[0]
        # made when it runs, from what the head's wait for its copy printed (tests/plan/fakes/fake_mirror.py)
        assert f"docker pull --quiet {MIRROR}/rayproject/ray@{fake_mirror.DIGEST} " in command
        assert f"docker tag {MIRROR}/rayproject/ray@{fake_mirror.DIGEST} {IMAGE}" in command


def test_every_host_trusts_the_mirror_over_plain_http(fresh):
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        daemon = json.loads(fresh[name].op("Merge rayrig's keys into daemon.json").uploads["/etc/docker/daemon.json"])
        assert MIRROR in daemon["insecure-registries"]


def test_the_head_waits_for_its_copy_and_the_workers_stop_if_it_failed(fresh):
    names = [op.name for op in fresh[HEAD].ops]
    copy_wait = names.index("Ray image | Wait for the head's mirror to hold the image")
    assert copy_wait < names.index(f"Ray image | Wait for the pull of {IMAGE}")
    for worker in (GPU_WORKER, CPU_WORKER):  # "Stop waiting..." is skipped while the head is fine
        assert fresh[worker].has_op(f"Wait for the pull of {IMAGE}")
        assert not fresh[worker].has_op("Wait for the head's mirror")


def test_where_every_host_has_the_image_nothing_is_copied_or_pulled():
    run = run_deploy(reference_cluster("ubuntu22", "converged", data=MIRROR_DATA))
    for name, host in run.hosts.items():
        assert not any("pull-image.sh" in c or "wait-image" in c for c in host.commands), name
        assert not host.has_op("Wait for the")


def test_a_host_without_the_image_makes_the_head_copy_it_and_pulls_it_from_there():
    hosts = reference_cluster("ubuntu22", "converged", data=MIRROR_DATA, options={CPU_WORKER: {"image_present": False}})
    run = run_deploy(hosts)
    head = job_args(run[HEAD].op("into the head's mirror").commands[0])
    assert head[3] == "" and head[5] == IMAGE  # the head has the image: it only copies
    worker = job_args(run[CPU_WORKER].op(r"from the head's mirror \(in the background\)").commands[0])
    assert worker[3] == f"{MIRROR}/{head[6]}"
    assert not run[GPU_WORKER].has_op("Pull ")


def test_a_head_without_debian_packages_is_refused_before_anything_runs():
    with pytest.raises(MirrorError, match=f'host {HEAD}: image_mirror = "head" needs a Debian or Ubuntu head'):
        run_deploy(reference_cluster("rocky9", "fresh", data=MIRROR_DATA))


def ruleset(run, name: str) -> str:
    return str(run[name].op("Install rayrig's nftables ruleset").uploads[nftables.RULESET_PATH])


def test_the_heads_firewall_names_the_mirror_port_only_where_the_members_do_not_reach_every_port(fresh):
    closed = {**MIRROR_DATA, "firewall_members_all_ports": False}
    run = run_deploy(reference_cluster("ubuntu22", "fresh", data=closed))
    assert "the image mirror (TCP 5000) from the cluster's members" in ruleset(run, HEAD)
    assert "image mirror" not in ruleset(run, CPU_WORKER)
    # the default: the members reach every port, so the ruleset is the one without the mirror
    without = run_deploy(reference_cluster("ubuntu22", "fresh"))
    assert ruleset(fresh, HEAD) == ruleset(without, HEAD)


# --- A ray_image pinned by digest -----------------------------------------------------------------

PINNED_DIGEST = "sha256:" + "0123456789abcdef" * 4
PINNED = f"{IMAGE}@{PINNED_DIGEST}"
PINNED_LOCAL = "rayproject/ray:rayrig-0123456789ab"  # Docker tags no digest: the name the hosts run it by


def no_tag_to_a_digest(run) -> None:
    """``docker tag SRC DEST`` with a digest in DEST is refused by Docker; no host is sent one."""
    for name, h in run.hosts.items():
        for command in h.commands:
            for dest in re.findall(r"docker tag \S+ (\S+)", command):
                assert "@" not in dest, (name, command)


def test_a_pinned_image_is_copied_by_its_digest_alone_and_every_host_runs_that_digest_by_one_name():
    run = run_deploy(reference_cluster("ubuntu22", "fresh", data={**MIRROR_DATA, "ray_image": PINNED}))
    head = job_args(run[HEAD].op("into the head's mirror").commands[0])
    # skopeo takes no tag beside a digest: the head copies upstream's digest, and upstream serves it or nothing
    assert head[5] == f"rayproject/ray@{PINNED_DIGEST}"
    assert head[2] == PINNED_LOCAL  # what the head's pull of its own copy is named
    for worker in (GPU_WORKER, CPU_WORKER):
        command = run[worker].op(f"Pull {PINNED} from the head's mirror by the digest").commands[0]
        assert f"docker tag {MIRROR}/rayproject/ray@{fake_mirror.DIGEST} {PINNED_LOCAL}" in command
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        create = run[name].docker_create()
        assert PINNED_LOCAL in create and PINNED not in create, name
    no_tag_to_a_digest(run)


def test_without_the_mirror_a_pinned_image_is_pulled_by_its_digest_and_named_for_it():
    run = run_deploy(reference_cluster("ubuntu22", "fresh", data={"ray_image": PINNED}))
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        args = job_args(run[name].op(f"Pull {PINNED} \\(in the background\\)").commands[0])
        assert args[2:4] == [PINNED_LOCAL, f"rayproject/ray@{PINNED_DIGEST}"] and args[9] == "tag", args
        assert PINNED_LOCAL in run[name].docker_create()
    no_tag_to_a_digest(run)
