"""Hostile strings in every string-valued key of the inventory schema.

Each string, put into each place of the host data where the schema takes a string (nested
items, mapping values and mapping keys included), is either refused with a message that names
the host, the key and what is expected before any operation runs, or reaches the planned
commands only as one shell word: whole inside a single-quoted word or a word of its own, never
split, never where a shell would expand it.
"""

from __future__ import annotations

import copy
import shlex
from typing import Any

import pytest
from pyinfra.api import Inventory

from deploy.contract import schema, settings
from deploy.contract.schema import InventoryError, validate_cluster
from tests.hostile_corpus import BASE, HOSTILE, KEY, LOCAL_ONLY, VALUE, label, put, string_slots
from tests.plan.fakes.fakehosts import HEAD, cluster
from tests.plan.harness import run_deploy

SLOTS = sorted((slot for slot in string_slots(schema.SCHEMA) if slot[0] not in LOCAL_ONLY or len(slot) == 1), key=repr)


def hosts_with(slots: list[tuple[Any, ...]], value: str, token_file: str) -> list[tuple[str, dict[str, Any]]]:
    """The fake cluster with ``value`` in ``slots``: on every host (many keys must agree across
    the cluster), or on the head alone for its own address, which the workers then dial."""
    data = copy.deepcopy(BASE)
    data["ray_auth_token_file"] = token_file
    head: dict[str, Any] = {}
    for slot in slots:
        put(head if slot[0] in HEAD_ONLY else data, slot, value)
    return cluster("ubuntu22", data=data, host_data={HEAD: head})


#: Keys set on the head alone (each host has its own).
HEAD_ONLY = ("ray_node_ip",)


def verdicts(value: str, token_file: str) -> dict[tuple[Any, ...], list[schema.Problem]]:
    """The problems validation finds with ``value`` in each slot alone."""
    found = {}
    for slot in SLOTS:
        hosts = hosts_with([slot], value, token_file)
        found[slot] = validate_cluster([(n, d, d.get("ray_node_ip") or n) for n, d in hosts])
    return found


# --- Where a value sits in a shell command ------------------------------------------------------


def words(command: str) -> list[str]:
    """The shell words of ``command`` (operators such as ; && | are words of their own)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _quoting_at(command: str, end: int) -> str:
    """The quoting in force at ``command[end]``: "'" (single), '"' (double) or "" (none)."""
    state, i = "", 0
    while i < end:
        char = command[i]
        if state == "'":
            state = "" if char == "'" else state
        elif char == "\\":
            i += 1
        elif state == '"':
            state = "" if char == '"' else state
        elif char in "'\"":
            state = char
        i += 1
    return state


def assert_one_word(command: str, value: str) -> None:
    """``value`` appears in ``command`` only within one word, and single-quoted where it has
    anything a shell would read; scripts given to ``bash -c``/``sh -c`` are checked the same way."""
    start = command.find(value)
    while start != -1:
        if any(c in value for c in "$`\\\"'\n;&|<>()*?[] \t"):
            assert _quoting_at(command, start) == "'", f"{value!r} is not single-quoted in: {command}"
        start = command.find(value, start + 1)
    parts = words(command)
    if value in command or any(value in part for part in parts):
        assert any(value in part for part in parts), f"{value!r} is split across words in: {command}"
    for index, part in enumerate(parts[:-1]):
        if part == "-c" and index > 0 and parts[index - 1].rsplit("/", 1)[-1] in ("bash", "sh"):
            assert_one_word(parts[index + 1], value)


def test_the_corpus_reaches_every_string_key_of_the_schema():
    tops = {slot[0] for slot in string_slots(schema.SCHEMA)}
    numbers_and_flags = {
        "base_wait_timeout_s", "checks_enabled", "checks_matmul_min_fraction", "checks_membw_min_fraction",
        "checks_outlier_fraction", "checks_timeout_s", "checks_peer_timeout_factor", "checks_node_timeout_s",
        "firewall_allow_ssh_from_anywhere", "firewall_enabled", "ray_auth_allow_none",
        "firewall_members_all_ports",
        "nvidia_allow_reboot", "nvidia_reboot_timeout_s", "ray_head_wait_s", "ray_object_store_bytes", "ray_ports",
        "ray_replace_timeout_s", "ray_drain_timeout_s", "ray_gcs_fault_tolerance", "ray_efa", "ray_efa_device_rdma",
        "ray_ulimit_nofile", "ray_image_pull_timeout_s", "image_mirror_port", "ray_container_hardened",
        "monitoring_enabled", "monitoring_ports", "monitoring_prometheus_port", "monitoring_grafana",
        "monitoring_grafana_port", "checks_monitoring", "checks_monitoring_window_s",
        "ray_tls_renew_days", "ray_tls_validity_days", "ray_tls_ca_validity_days",
        "health_gate", "health_interval_s", "health_probe_interval_s", "health_probe_deadline_s", "health_probe_work",
        "health_probe_fraction", "health_min_free_fraction", "health_fail_after", "health_pass_after",
        "health_drain_timeout_s", "health_metrics_port",
    }  # fmt: skip
    assert set(schema.PROPERTIES) - tops == numbers_and_flags
    # nested items, mapping values and mapping keys are slots too
    for slot in [
        ("storage_nfs_mounts", 0, "server"),
        ("ray_env", VALUE),
        ("ray_env", KEY),
        ("ray_resources", KEY),
        ("docker_registry_auth", "password"),
        ("firewall_extra_tcp_ports", 0),
    ]:
        assert slot in SLOTS, slot


def test_the_quoting_check_catches_unquoted_values():
    assert_one_word("echo 'a;b' x", "a;b")
    assert_one_word(shlex.join(["bash", "-c", 'echo "$1"', "_", "$(id)"]), "$(id)")
    for bad in ["echo a;b", 'echo "a;b"', "bash -c 'echo a;b'", "bash -c 'echo \"$(id)\"'"]:
        with pytest.raises(AssertionError):
            assert_one_word(bad, "$(id)" if "id" in bad else "a;b")


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v) for v in HOSTILE])
def test_a_hostile_string_is_refused_or_stays_one_word(value, tmp_path):
    token_file = str(tmp_path / "token")
    found = verdicts(value, token_file)
    refused = [slot for slot, problems in found.items() if problems]
    accepted = [slot for slot in SLOTS if not found[slot] and slot[0] not in LOCAL_ONLY]

    # Refused: each problem names the host, the key and the value (secrets masked), and what is expected.
    for slot in refused:
        top = [p for p in found[slot] if p.key.startswith(slot[0])]
        assert top, f"{label(slot)} = {value!r}: problems name other keys only: {[str(p) for p in found[slot]]}"
        for problem in top:
            text = str(problem)
            assert text.startswith(f"host {problem.host}: {slot[0]}") and ": expected " in text, text
            assert repr(value) in text or "'***'" in text or value in repr(problem.value), text

    # The refusal happens before any operation: the deploy stops at the inventory.
    if refused:
        with pytest.raises(InventoryError) as error:
            run_deploy(hosts_with(refused, value, token_file))
        message = str(error.value)
        assert message.endswith("Nothing was changed on any host.")
        for slot in refused:
            assert f": {slot[0]}" in message, f"{label(slot)} missing from:\n{message}"

    # Accepted: the planned commands hold the string only as one word.
    if accepted:
        run = run_deploy(hosts_with(accepted, value, token_file))
        for host in run.hosts.values():
            for command in host.raw_commands:
                assert_one_word(command, value)


def test_what_reaches_a_host_is_mostly_refused():
    """Free text is accepted only where the schema means it: environment values, log options,
    daemon options, credentials (which travel in files). Everything else refuses the corpus."""
    free = {
        ("ray_env", VALUE),
        ("ray_env_secret", VALUE),
        ("docker_log_opts", VALUE),
        ("docker_log_opts", KEY),
        ("docker_daemon_options", VALUE),
        ("docker_daemon_options", KEY),
        ("docker_registry_auth", "registry"),
        ("docker_registry_auth", "username"),
        ("docker_registry_auth", "password"),
        ("storage_s3_credentials", "access_key_id"),
        ("storage_s3_credentials", "secret_access_key"),
    }
    for value in ["$(touch /tmp/P)", "a;touch /tmp/P", "-oProxyCommand=touch /tmp/P"]:
        accepted = {slot for slot, problems in verdicts(value, "/nonexistent/token").items() if not problems}
        assert accepted - set(LOCAL_ONLY_SLOTS) <= free, sorted(accepted - free, key=repr)


LOCAL_ONLY_SLOTS = [(key,) for key in LOCAL_ONLY]


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v) for v in HOSTILE])
def test_a_hostile_host_name_is_refused_before_anything_runs(value, tmp_path):
    """A host's inventory name reaches messages, files and (quoted) commands: the corpus never gets that far
    (or pyinfra itself keeps a harmless name: it strips surrounding whitespace)."""
    data = {**copy.deepcopy(BASE), "ray_auth_token_file": str(tmp_path / "token")}
    hosts = cluster("ubuntu22", data=data)
    name = "@fake/" + value
    hosts = [(name if n == hosts[-1][0] else n, d) for n, d in hosts]  # a worker named so
    kept = next(iter(Inventory(([(name, {})], {})))).name
    if kept != name and settings.is_host_name(kept):
        assert run_deploy(hosts)[kept].raw_commands  # deployed under the name pyinfra kept
        return
    with pytest.raises(InventoryError) as error:
        run_deploy(hosts)
    problems = error.value.problems
    assert [(p.key, p.value) for p in problems] == [("the host's name", name)]
    assert str(problems[0]).startswith(f"host {name!r}: the host's name = {name!r}: expected an IP address, ")
    assert str(error.value).endswith("Nothing was changed on any host.")
