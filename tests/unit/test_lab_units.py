"""Pure helpers of the local lab (cloud/lab/), its inventory and its image folders."""

from __future__ import annotations

import contextlib
import importlib.util
import json
from pathlib import Path

import pytest

import images
from cloud import lab
from cloud.lab import build as lab_build
from cloud.lab import engine, hosts, state
from deploy.contract import paths

ROUTE_TABLE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
br-1\t0000D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


def test_parse_proc_net_route_reads_networks_and_skips_default():
    assert engine.parse_proc_net_route(ROUTE_TABLE) == ["192.168.0.0/24", "172.17.0.0/16", "10.213.0.0/24"]


def test_choose_subnet_prefers_10_213():
    assert engine.choose_subnet(["172.17.0.0/16", "192.168.0.0/24"]) == "10.213.0.0/24"


def test_choose_subnet_skips_taken_and_overlapping_networks():
    # 10.213.0.0/24 is taken; a /16 route covers every 10.214.x.0/24 candidate.
    taken = ["10.213.0.0/24", "10.213.1.0/24", "10.214.0.0/16"]
    assert engine.choose_subnet(taken) == "10.213.2.0/24"
    assert engine.choose_subnet(["10.213.0.0/16", "10.214.0.0/16"]) == "10.215.0.0/24"


def test_choose_subnet_fails_when_everything_is_taken():
    with pytest.raises(RuntimeError, match="no free /24"):
        engine.choose_subnet(["10.0.0.0/8"])


def test_addresses_follow_the_subnet():
    assert state.host_address("10.213.0.0/24", 1) == "10.213.0.10"
    assert state.host_address("10.220.3.0/24", 3) == "10.220.3.12"
    assert state.registry_address("10.220.3.0/24") == "10.220.3.2:5000"
    with pytest.raises(ValueError, match="does not fit"):
        state.host_address("10.213.0.0/24", 300)


def test_host_run_flags_without_privileged_drop_sys_resource_and_mount_cgroups():
    flags = hosts.host_run_flags(privileged=False, cgroup_version="1")
    assert "--privileged" not in flags
    assert flags[flags.index("--cap-drop") + 1] == "SYS_RESOURCE"
    assert "seccomp=unconfined" in flags and "--cgroupns=host" in flags
    assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in flags
    assert flags[flags.index("--device") + 1] == "/dev/fuse"


def test_host_run_flags_prefer_privileged_where_it_works():
    flags = hosts.host_run_flags(privileged=True, cgroup_version="2")
    assert "--privileged" in flags and "--cap-add" not in flags
    assert "--cgroupns=private" in flags and "/sys/fs/cgroup:/sys/fs/cgroup:rw" not in flags


def _state(tmp_path: Path, hosts: int = 3, subnet: str = "10.213.0.0/24") -> dict:
    return lab.make_state("lab-x", subnet, hosts, tmp_path / "id_ed25519", tmp_path / "known_hosts")


def test_make_state_shape(tmp_path):
    state = _state(tmp_path, subnet="10.217.0.0/24")
    assert state["registry"] == "10.217.0.2:5000"
    assert state["image"] == "10.217.0.2:5000/rayrig/lab-ray:2.60.0"
    assert state["network"] == "lab-x-net" and state["ssh_user"] == "rayrig"
    assert [h["role"] for h in state["hosts"]] == ["head", "worker", "worker"]
    assert state["hosts"][1] == {
        "name": "lab-x-2",
        "container": "lab-x-host-2",
        "address": "10.217.0.11",
        "role": "worker",
        "num_cpus": 2,
        "resources": {"lab-x-2": 1},
    }
    json.dumps(state)  # state.json must be plain JSON


def test_inventory_groups_follow_the_data_contract(tmp_path):
    groups = lab.inventory_groups(_state(tmp_path))
    assert [name for name, _ in groups["heads"]] == ["10.213.0.10"]
    assert [name for name, _ in groups["workers"]] == ["10.213.0.11", "10.213.0.12"]
    name, data = groups["workers"][0]
    assert data["ray_role"] == "worker" and data["ray_node_ip"] == name
    assert data["ray_resources"] == {"lab-x-2": 1}
    assert data["ray_num_gpus"] == 0 and data["ray_num_cpus"] == 2
    assert data["ray_image"] == "10.213.0.2:5000/rayrig/lab-ray:2.60.0"
    assert data["docker_insecure_registries"] == ["10.213.0.2:5000"]
    assert data["ssh_strict_host_key_checking"] == "yes" and data["_sudo"] is True
    assert data["ssh_known_hosts_file"] == str(tmp_path / "known_hosts")


def test_inventory_keys_are_known_to_the_contract(tmp_path):
    spec = importlib.util.spec_from_file_location("all_defaults", paths.repo_root() / "inventories/group_data/all.py")
    defaults = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(defaults)
    _, data = lab.inventory_groups(_state(tmp_path))["heads"][0]
    rayrig_keys = {k for k in data if k.startswith(("ray_", "docker_", "base_"))}
    assert rayrig_keys <= set(vars(defaults)), rayrig_keys - set(vars(defaults))


def test_known_hosts_text_pins_each_address_and_drops_comments():
    text = hosts.known_hosts_text(
        [
            ("10.213.0.11", "ssh-ed25519 AAAAB root@lab-x-2"),
            ("10.213.0.10", "ssh-ed25519 AAAAA root@lab-x-1"),
            ("10.213.0.10", "ssh-ed25519 AAAAA root@lab-x-1"),
        ]
    )
    assert text == "10.213.0.10 ssh-ed25519 AAAAA\n10.213.0.11 ssh-ed25519 AAAAB\n"


def test_lab_inventory_file_reads_the_state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RAYRIG_LAB", "lab-x")
    inventory = paths.repo_root() / "inventories" / "lab.py"

    def load():
        spec = importlib.util.spec_from_file_location("lab_inventory", inventory)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    with pytest.raises(RuntimeError, match=r"rayrig lab up --name lab-x"):
        load()
    directory = lab.lab_dir("lab-x")
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps(_state(tmp_path, hosts=2)))
    module = load()
    assert [h for h, _ in module.heads] == ["10.213.0.10"]
    assert [h for h, _ in module.workers] == ["10.213.0.11"]


def test_state_dir_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    assert paths.state_dir() == tmp_path
    assert lab.lab_dir("a") == tmp_path / "labs" / "a"
    monkeypatch.delenv("RAYRIG_STATE_DIR")
    assert paths.state_dir() == paths.repo_root() / ".rayrig"
    with pytest.raises(ValueError, match="invalid lab name"):
        lab.lab_dir("../x")


def required_build_args(folder: Path) -> set[str]:
    """The build args a Dockerfile declares without a default (the build must pass them)."""
    lines = (folder / "Dockerfile").read_text().splitlines()
    return {line.split()[1] for line in lines if line.startswith("ARG ") and "=" not in line}


def test_lab_builds_pass_every_build_arg_their_dockerfiles_require(monkeypatch):
    builds: dict[str, dict] = {}

    def docker_build(tag, files, progress, *, build_args=None, **_):
        assert "Dockerfile" in files
        builds[tag] = {"files": files, "args": dict(build_args or {})}
        return "sha256:x"

    def build_image(tag, **kwargs):
        builds[tag] = {"ray_version": kwargs["ray_version"]}
        return "sha256:y"

    monkeypatch.setattr(lab_build, "image_lock", contextlib.nullcontext)
    monkeypatch.setattr(lab_build, "ensure_rootfs", lambda log: "debian:bookworm")
    monkeypatch.setattr(lab_build, "docker_build", docker_build)
    monkeypatch.setattr(lab_build, "build_wheelhouse", lambda dest, version, progress: dest)
    monkeypatch.setattr(lab_build, "build_image", build_image)
    lab_build.ensure_images(lambda line: None, "2.60.0")

    base, registry = builds[state.BASE_IMAGE], builds[state.REGISTRY_IMAGE]
    assert base["args"] == {"ROOTFS": "debian:bookworm", "SSH_USER": state.SSH_USER}
    assert set(base["args"]) == required_build_args(images.context_dir("lab-base"))
    assert registry["args"] == {"BASE": state.BASE_IMAGE}
    assert set(registry["args"]) == required_build_args(images.context_dir("lab-registry"))
    assert set(base["files"]) == {"Dockerfile", "sources.list", "rayrig-ssh-host-keys.service"}
    assert builds["rayrig/lab-ray:2.60.0"] == {"ray_version": "2.60.0"}


def test_lab_image_files_agree_with_the_lab_constants():
    base = images.context_dir("lab-base")
    assert all(line.split()[1] in {state.DEBIAN_MIRROR, "http://deb.debian.org/debian-security"}
               for line in (base / "sources.list").read_text().splitlines())  # fmt: skip
    registry = images.context_dir("lab-registry")
    assert f"EXPOSE {state.REGISTRY_PORT}\n" in (registry / "Dockerfile").read_text()
    assert f"  addr: :{state.REGISTRY_PORT}\n" in (registry / "config.yml").read_text()


def test_ssh_check_raises_with_the_command_address_and_exit_status(tmp_path, monkeypatch):
    calls = []

    def run(target, command, timeout):
        calls.append((target, command))
        return (0, "ok\n") if command == "true" else (1, "sudo: a password is required\n")

    monkeypatch.setattr(hosts, "run", run)
    assert hosts.ssh_check("10.213.0.10", "rayrig", tmp_path / "key", tmp_path / "known_hosts", "true") == "ok\n"
    assert calls[0][0].known_hosts == tmp_path / "known_hosts"  # host keys stay pinned
    with pytest.raises(RuntimeError, match=r"`sudo -n true` on 10.213.0.11 exited 1: sudo: a password is required"):
        hosts.ssh_check("10.213.0.11", "rayrig", tmp_path / "key", tmp_path / "known_hosts")


def test_summary_shows_ray_status_on_the_head_and_the_next_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    assert "run `rayrig lab up --name lab-x`" in lab.summary("lab-x", "==> checks: none")
    lab.lab_dir("lab-x").mkdir(parents=True)
    lab.state_path("lab-x").write_text(json.dumps(_state(tmp_path, hosts=2)))
    commands = []
    monkeypatch.setattr(lab, "run", lambda target, command, timeout: commands.append((target.address, command))
                        or (0, "Active:\n 2 node(s)\n"))  # fmt: skip
    text = lab.summary("lab-x", "==> checks: PASS")
    assert commands == [("10.213.0.10", "sudo docker exec ray-node ray status")]
    assert "==> Ray cluster on lab lab-x: head 10.213.0.10 (2 hosts)" in text
    assert " 2 node(s)\n==> checks: PASS\n" in text
    assert "RAYRIG_LAB=lab-x rayrig dashboard inventories/lab.py" in text
    assert f"ssh -i {tmp_path / 'id_ed25519'}" in text and "rayrig@10.213.0.10" in text
