"""``rayrig status``, ``exec`` and ``logs`` against fake hosts.

The report is built from recorded answers (:func:`rayrig.operate.build_status`); the commands
run end to end with a fake ``ssh`` on PATH that runs the remote command line here, in bash,
with fake ``systemctl``, ``docker`` and ``sudo`` that answer from a folder per host: so the
quoting, the probe script and the exit codes are the real ones.
"""

from __future__ import annotations

import json
import os
import shlex
import textwrap
from pathlib import Path

import pytest

from rayrig import operate
from rayrig.cli import build_parser, main
from rayrig.commands.operate import exec_arguments, render_status
from rayrig.inventory import inventory_of
from rayrig.operate import Answer, Answers

HEAD, W1, W2 = "192.0.2.10", "192.0.2.11", "192.0.2.12"


def node(ip: str, cpus: float = 2.0, **custom: float) -> dict:
    return {"ip": ip, "resources": {"CPU": cpus, "memory": 1e9, f"node:{ip}": 1.0, **custom}, "ray_version": "2.60.0"}


def cluster_answer(*nodes: dict) -> Answer:
    state = {"nodes": list(nodes), "total": {"CPU": sum(n["resources"]["CPU"] for n in nodes)}, "ray_version": "2.60.0"}
    return Answer(0, "2026-12-01 WARNING something Ray says\nRESULT " + json.dumps(state) + "\n")


def probe(
    unit: str = "active", container: str = "running", version: str | None = "2.60.0", quarantine: str | None = None
) -> Answer:
    lines = [f"UNIT {unit}", f"CONTAINER {container}"] + ([f"RAY_VERSION {version}"] if version else [])
    lines += [f"QUARANTINE {quarantine}"] if quarantine is not None else []
    return Answer(0, "\n".join(lines) + "\n")


#: 2026-12-01 09:40:00 UTC, when the gate quarantined a worker.
SINCE = 1796118000
MARKER = json.dumps({"since": SINCE, "by": "gate", "reason": "probe: missed its deadline of 60 s",
                     "findings": [{"level": "FAIL", "message": "probe: missed its deadline of 60 s"}]})  # fmt: skip


def lab_inventory(**extra_data):
    data = {"ray_num_cpus": 2, "ray_num_gpus": 0, "ssh_user": "rayrig", **extra_data}
    return inventory_of(
        "inventories/lab.py",
        [
            {"name": HEAD, "data": {**data, "ray_role": "head", "ray_resources": {"lab-1": 1}}},
            {"name": W1, "data": {**data, "ray_resources": {"lab-2": 1}}},
            {"name": W2, "data": {**data, "ray_resources": {"lab-3": 1}}},
        ],
    )


HEALTHY = {
    HEAD: probe(),
    W1: probe(),
    W2: probe(),
    "cluster": cluster_answer(node(HEAD, **{"lab-1": 1.0}), node(W1, **{"lab-2": 1.0}), node(W2, **{"lab-3": 1.0})),
    "ray status": Answer(0, "======== Autoscaler status ========\nActive:\n 3 nodes\n"),
}


def answers(recorded: dict[str, Answer]) -> Answers:
    """The answers of ``rayrig status`` as recorded: by host, and the head's "cluster" and "ray status"."""
    hosts = {k: v for k, v in recorded.items() if k not in ("cluster", "ray status")}
    return Answers(hosts, recorded.get("cluster"), recorded.get("ray status"))


# --- the report, from recorded answers ---------------------------------------------------------


def test_a_healthy_cluster_lists_every_host_alive_with_declared_and_registered_resources():
    report = operate.build_status(
        lab_inventory(), answers(HEALTHY), {"verdict": "PASS", "report": "r.json", "plot": None}
    )
    assert report["ok"] is True and report["not_alive"] == []
    head = report["hosts"][0]
    assert {k: head[k] for k in ("name", "address", "role", "unit", "container", "ray_version", "alive")} == {
        "name": HEAD, "address": HEAD, "role": "head", "unit": "active", "container": "running",
        "ray_version": "2.60.0", "alive": True,
    }  # fmt: skip
    assert head["declared"] == {"CPU": 2, "GPU": 0, "lab-1": 1}
    assert head["registered"]["CPU"] == 2.0 and head["registered"]["lab-1"] == 1.0
    assert report["cluster"]["nodes_alive"] == 3 and report["cluster"]["problems"] == []
    assert report["cluster"]["ray_status"].startswith("======== Autoscaler status")
    assert report["checks"] == {"verdict": "PASS", "report": "r.json", "plot": None}
    assert operate.exit_status(report) == 0
    json.dumps(report)  # --json prints it as it is


def test_a_stopped_worker_is_named_with_its_unit_and_container_and_status_exits_1():
    recorded = {
        **HEALTHY,
        W1: probe(unit="inactive", container="exited", version=None),
        "cluster": cluster_answer(node(HEAD, **{"lab-1": 1.0}), node(W2, **{"lab-3": 1.0})),
    }
    report = operate.build_status(lab_inventory(), answers(recorded), None)
    assert report["ok"] is False and report["not_alive"] == [W1]
    worker = next(h for h in report["hosts"] if h["name"] == W1)
    assert (worker["alive"], worker["unit"], worker["container"], worker["registered"]) == (
        False, "inactive", "exited", None,
    )  # fmt: skip
    assert operate.why_not_alive(worker) == "unit inactive, container exited"
    assert {"host": W1, "message": f"not an alive Ray node (expected at {W1})"} in report["cluster"]["problems"]
    assert operate.exit_status(report) == 1


def test_resources_that_differ_from_the_declaration_are_problems_but_an_alive_node_is_alive():
    recorded = {**HEALTHY, "cluster": cluster_answer(node(HEAD, 1.0, **{"lab-1": 1.0}), node(W1, **{"lab-2": 1.0}),
                                                     node(W2, **{"lab-3": 1.0}))}  # fmt: skip
    report = operate.build_status(lab_inventory(), answers(recorded), None)
    assert report["ok"] is True
    assert {"host": HEAD, "message": "ray_num_cpus = 2 but its Ray node has 1 CPU"} in report["cluster"]["problems"]


def test_the_text_shows_registered_next_to_declared_and_the_problems_of_alive_nodes():
    recorded = {
        **HEALTHY,
        W1: probe(unit="failed", container="exited", version=None),
        "cluster": cluster_answer(node(HEAD, 1.0, **{"lab-1": 1.0}), node(W2, **{"lab-3": 1.0})),
    }
    inventory = lab_inventory()
    text = render_status(inventory, operate.build_status(inventory, answers(recorded), None)).splitlines()
    rows = {line.split()[0]: line for line in text if line.startswith("192.0.2.")}
    assert rows[HEAD].endswith("yes    CPU 1/2, GPU 0/0, lab-1 1/1      ok")  # Ray lists no GPU it has none of
    assert rows[W1].endswith("no     CPU -/2, GPU -/0, lab-2 -/1      ok")
    assert text[1].split()[-1] == "HEALTH"
    assert f"  - {HEAD}: ray_num_cpus = 2 but its Ray node has 1 CPU" in text
    assert not any(line.startswith(f"  - {W1}:") for line in text)  # the last line names it
    assert text[-2] == "==> last checks: none on this machine yet (rayrig check inventories/lab.py)"
    assert text[-1] == f"NOT OK: not alive Ray nodes: {W1} (unit failed, container exited)"


def test_an_unreachable_host_and_an_unreadable_cluster_say_so_and_what_to_check():
    recorded = {
        **HEALTHY,
        W2: Answer(255, "", "ssh: connect to host 192.0.2.12 port 22: Connection refused\n"),
        "cluster": Answer(1, "", "Error response from daemon: container is not running\n"),
        "ray status": Answer(None, "", "no answer within 45 s"),
    }
    report = operate.build_status(lab_inventory(), answers(recorded), None)
    assert report["not_alive"] == [HEAD, W1, W2]  # without the head's answer no node is known alive
    unreachable = report["hosts"][2]
    assert unreachable["reached"] is False
    assert unreachable["error"] == (
        "unreachable over SSH as rayrig@192.0.2.12 (ssh: connect to host 192.0.2.12 port 22: Connection refused): "
        "check that the host is up and its ssh_* settings in inventories/lab.py"
    )
    assert operate.why_not_alive(unreachable) == "unreachable over SSH"
    assert report["cluster"]["error"] == (
        "could not read the cluster's state from the head's ray-node "
        "(Error response from daemon: container is not running)"
    )
    assert report["cluster"]["ray_status"] is None


def test_a_host_leaving_the_cluster_is_listed_but_not_required_alive():
    inventory = inventory_of(
        "inv.py",
        [
            {"name": HEAD, "data": {"ray_role": "head"}},
            {"name": W1, "data": {"ray_state": "absent"}},
        ],
    )
    recorded = {HEAD: probe(), W1: probe(unit="inactive", container="absent", version=None),
               "cluster": cluster_answer(node(HEAD))}  # fmt: skip
    report = operate.build_status(inventory, answers(recorded), None)
    assert report["ok"] is True
    assert [(h["name"], h["member"], h["alive"]) for h in report["hosts"]] == [(HEAD, True, True), (W1, False, False)]


def test_every_reached_host_says_whether_it_is_quarantined_and_an_unreached_one_is_unknown():
    recorded = {**HEALTHY, W2: Answer(255, "", "ssh: connect to host 192.0.2.12 port 22: Connection refused\n")}
    report = operate.build_status(lab_inventory(), answers(recorded), None)
    assert [h["health"] for h in report["hosts"]] == [
        {"status": "ok", "since": None, "by": None, "reason": None},
        {"status": "ok", "since": None, "by": None, "reason": None},
        {"status": "unknown", "since": None, "by": None, "reason": None},
    ]
    assert report["quarantined"] == []


def test_a_quarantined_worker_is_named_with_since_by_and_why_and_status_exits_1():
    recorded = {
        **HEALTHY,
        W1: probe(unit="inactive", container="exited", version=None, quarantine=MARKER),
        "cluster": cluster_answer(node(HEAD, **{"lab-1": 1.0}), node(W2, **{"lab-3": 1.0})),
    }
    report = operate.build_status(lab_inventory(), answers(recorded), None)
    worker = report["hosts"][1]
    assert worker["health"] == {
        "status": "quarantined", "since": SINCE, "by": "gate", "reason": "probe: missed its deadline of 60 s"
    }  # fmt: skip
    assert report["quarantined"] == [W1] and report["not_alive"] == [W1]
    assert operate.why_not_alive(worker) == "quarantined by the health gate"
    assert report["ok"] is False and operate.exit_status(report) == 1
    json.dumps(report)


def test_a_quarantined_member_still_alive_while_it_drains_makes_status_not_ok():
    marker = json.dumps({"since": SINCE, "by": "operator", "reason": "fans failing"})
    report = operate.build_status(lab_inventory(), answers({**HEALTHY, W2: probe(quarantine=marker)}), None)
    assert report["not_alive"] == [] and report["quarantined"] == [W2]
    assert report["ok"] is False and operate.exit_status(report) == 1


@pytest.mark.parametrize(
    ("marker", "health"),
    [
        ("", {"status": "quarantined", "since": None, "by": None,
              "reason": "its marker /var/lib/rayrig/health/quarantined is not a JSON object"}),
        ("[1, 2]", {"status": "quarantined", "since": None, "by": None,
                    "reason": "its marker /var/lib/rayrig/health/quarantined is not a JSON object"}),
        ('{"since": "yesterday", "by": "", "reason": 3}', {"status": "quarantined", "since": None, "by": None,
                                                           "reason": None}),
        ('{ "since": 1.5,  "by": "operator",  "reason": "x" } ', {"status": "quarantined", "since": 1.5,
                                                                  "by": "operator", "reason": "x"}),
    ],
)  # fmt: skip
def test_a_marker_that_cannot_be_read_still_means_quarantined(marker, health):
    assert operate.parse_quarantine(marker) == health


def test_the_text_shows_the_quarantine_in_the_health_column_and_how_to_let_the_host_back_in(utc):
    reason = "GPU 0: Xid 79 (the GPU has fallen off the bus), and 3 more findings of the same round on this host"
    marker = json.dumps({"since": SINCE, "by": "gate", "reason": reason})
    recorded = {
        **HEALTHY,
        W1: probe(unit="inactive", container="exited", version=None, quarantine=marker),
        "cluster": cluster_answer(node(HEAD, **{"lab-1": 1.0}), node(W2, **{"lab-3": 1.0})),
    }
    inventory = lab_inventory()
    text = render_status(inventory, operate.build_status(inventory, answers(recorded), None)).splitlines()
    rows = {line.split()[0]: line for line in text if line.startswith("192.0.2.")}
    assert rows[W1].endswith(
        "quarantined since 2026-12-01 09:40:00 by gate: GPU 0: Xid 79 (the GPU has fallen off the bus), and 3 more…"
    )
    assert rows[HEAD].endswith("  ok") and rows[W2].endswith("  ok")
    assert text[6] == (  # under the table
        f"Quarantined, kept out of the cluster: {W1} (by gate). Let it back in: rayrig health admit "
        f"inventories/lab.py {W1} (why and since when: rayrig health inventories/lab.py)"
    )
    assert text[-1] == f"NOT OK: not alive Ray nodes: {W1} (quarantined by the health gate)"


def test_the_text_names_a_quarantined_node_that_is_still_draining_and_one_line_for_several(utc):
    marker = json.dumps({"since": SINCE, "by": "operator", "reason": "fans failing"})
    recorded = {
        **HEALTHY,
        W1: probe(unit="inactive", container="exited", version=None, quarantine=marker),
        W2: probe(quarantine=marker),
        "cluster": cluster_answer(node(HEAD, **{"lab-1": 1.0}), node(W2, **{"lab-3": 1.0})),
    }
    inventory = lab_inventory()
    text = render_status(inventory, operate.build_status(inventory, answers(recorded), None)).splitlines()
    assert text[6].startswith(f"Quarantined, kept out of the cluster: {W1} (by operator), {W2} (by operator). "
                              "Let one back in: rayrig health admit inventories/lab.py HOST")  # fmt: skip
    assert text[-1] == (
        f"NOT OK: not alive Ray nodes: {W1} (quarantined by an operator). Quarantined, still draining: {W2}"
    )


def test_long_reasons_are_cut_at_a_words_end_and_words_without_blanks_anywhere():
    assert operate.shorten("fans  failing\n on the left", 60) == "fans failing on the left"
    assert operate.shorten("one two three four five", 16) == "one two three…"
    assert operate.shorten("x" * 100, 10) == "xxxxxxxxx…"


# --- the remote command lines ------------------------------------------------------------------


def test_exec_quotes_every_word_and_takes_one_word_with_blanks_as_a_shell_line():
    head = lab_inventory().head
    assert operate.exec_command(head, ["ray", "--version"]) == "sudo -n docker exec ray-node ray --version"
    assert (
        operate.exec_command(head, ["echo", "$HOME; rm -rf /"]) == "sudo -n docker exec ray-node echo '$HOME; rm -rf /'"
    )
    assert operate.exec_command(head, ["ls /tmp | wc -l"], stdin="tty") == (
        "sudo -n docker exec -it ray-node sh -c 'ls /tmp | wc -l'"
    )
    assert operate.exec_command(head, ["df", "-h"], on_host=True) == "df -h"
    assert operate.exec_command(head, ["df -h | head -3"], on_host=True) == "df -h | head -3"


def test_logs_read_the_units_journal_or_rays_own_session_logs():
    inventory = lab_inventory()
    assert operate.journal_command(inventory.head, 50, follow=True) == (
        "sudo -n journalctl --no-pager -u ray-node.service -n 50 -f"
    )
    worker = shlex.split(operate.ray_logs_command(inventory.pick(W1), 20, follow=False))
    assert worker[:8] == ["sudo", "-n", "docker", "exec", "ray-node", "tail", "-n", "20"]
    assert worker[9:] == ["/tmp/ray/session_latest/logs/raylet.out", "/tmp/ray/session_latest/logs/raylet.err"]
    head = shlex.split(operate.ray_logs_command(inventory.head, 20, follow=True))
    assert "-F" in head and "/tmp/ray/session_latest/logs/gcs_server.out" in head


# --- end to end, with fake hosts ---------------------------------------------------------------

FAKE_SSH = r"""#!/bin/bash
# Runs the remote command line here, as the host named after "--"; 255 when that host is "down".
while [ "$1" != "--" ]; do echo "$1" >> "$FAKE_HOSTS/ssh-options"; shift; done
export FAKE_HOST=$2 remote=$3
if [ -e "$FAKE_HOSTS/$FAKE_HOST/down" ]; then
  echo "ssh: connect to host $FAKE_HOST port 22: Connection refused" >&2; exit 255
fi
cd "$FAKE_HOSTS/$FAKE_HOST"  # the host's own files: a relative path is the host's
exec bash -c "$remote"
"""
FAKE_SUDO = '#!/bin/bash\n[ "$1" = -n ] && shift\nexec "$@"\n'
FAKE_SYSTEMCTL = '#!/bin/bash\ncat "$FAKE_HOSTS/$FAKE_HOST/unit"\n[ "$(cat "$FAKE_HOSTS/$FAKE_HOST/unit")" = active ]\n'
FAKE_JOURNALCTL = '#!/bin/bash\necho "$FAKE_HOST journal: $*"\n'
FAKE_DOCKER = r"""#!/bin/bash
here=$FAKE_HOSTS/$FAKE_HOST
case $1 in
  inspect) [ -e "$here/container" ] || { echo "Error: No such object: ray-node" >&2; exit 1; }; cat "$here/container" ;;
  exec)
    shift; while [ "${1#-}" != "$1" ]; do shift; done; shift  # the flags, then the container
    case "$*" in
      *--expect*) cat "$FAKE_HOSTS/cluster" ;;
      *importlib.metadata*) echo 2.60.0 ;;
      "ray --version") echo "ray, version 2.60.0" ;;
      "ray status") echo "Active: 3 nodes" ;;
      *) "$@" ;;
    esac ;;
esac
"""


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    """Three fake lab hosts (all healthy) and the inventory naming them; ``hosts.stop(ip)`` stops one's node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("ssh", FAKE_SSH), ("sudo", FAKE_SUDO), ("systemctl", FAKE_SYSTEMCTL),
                       ("journalctl", FAKE_JOURNALCTL), ("docker", FAKE_DOCKER)]:  # fmt: skip
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    folder = tmp_path / "hosts"
    for ip in (HEAD, W1, W2):
        (folder / ip).mkdir(parents=True)
        (folder / ip / "unit").write_text("active\n")
        (folder / ip / "container").write_text("running\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_HOSTS", str(folder))
    inventory = tmp_path / "inv" / "lab.py"
    inventory.parent.mkdir()
    inventory.write_text(
        textwrap.dedent(f"""\
        _data = {{"ssh_user": "rayrig", "ssh_key": "{tmp_path}/id", "ray_num_cpus": 2, "ray_num_gpus": 0,
                  "ray_cluster_name": "fake", "checks_report_dir": "{tmp_path}/reports"}}
        heads = [("{HEAD}", {{**_data, "ray_role": "head", "ray_resources": {{"lab-1": 1}}}})]
        workers = [("{W1}", _data), ("{W2}", _data)]
        """)
    )

    class Hosts:
        path = str(inventory)

        @staticmethod
        def alive(*ips: str) -> None:
            nodes = [node(ip, **({"lab-1": 1.0} if ip == HEAD else {})) for ip in ips]
            (folder / "cluster").write_text(
                "RESULT " + json.dumps({"nodes": nodes, "total": {}, "ray_version": "2.60.0"})
            )

        @staticmethod
        def stop(ip: str) -> None:
            (folder / ip / "unit").write_text("inactive\n")
            (folder / ip / "container").write_text("exited\n")
            Hosts.alive(*[i for i in (HEAD, W1, W2) if i != ip])

        @staticmethod
        def down(ip: str) -> None:
            (folder / ip / "down").touch()

        @staticmethod
        def quarantine(ip: str, marker: str) -> None:
            """The host quarantined: its node stopped and the marker there (``operate.QUARANTINE_MARKER``,
            relative in these tests: the fake ssh runs in the host's folder)."""
            Hosts.stop(ip)
            (folder / ip / "marker").write_text(marker)

        @staticmethod
        def ssh_options() -> list[str]:
            return (folder / "ssh-options").read_text().splitlines()

    Hosts.alive(HEAD, W1, W2)
    return Hosts


def test_status_json_of_a_healthy_cluster_exits_0(hosts, capsys):
    assert main(["status", hosts.path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(h["name"], h["alive"], h["unit"], h["container"], h["ray_version"]) for h in report["hosts"]] == [
        (ip, True, "active", "running", "2.60.0") for ip in (HEAD, W1, W2)
    ]
    assert report["hosts"][0]["registered"]["lab-1"] == 1.0
    assert report["cluster"]["ray_status"] == "Active: 3 nodes"
    assert report["checks"]["verdict"] is None
    assert "BatchMode=yes" in hosts.ssh_options()  # never a prompt that would hang status


def test_status_names_a_stopped_worker_and_exits_1(hosts, capsys):
    hosts.stop(W1)
    assert main(["status", hosts.path]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"NOT OK: not alive Ray nodes: {W1} (unit inactive, container exited)"
    assert 'Cluster "fake"' in out and "2 of 3 hosts are alive Ray nodes" in out


def test_status_names_an_unreachable_host_in_one_line(hosts, capsys):
    hosts.down(W2)
    hosts.alive(HEAD, W1)
    assert main(["status", hosts.path]) == 1
    out = capsys.readouterr().out
    assert f"{W2}: unreachable over SSH as rayrig@{W2} (ssh: connect to host {W2} port 22: Connection refused)" in out
    assert out.splitlines()[-1] == f"NOT OK: not alive Ray nodes: {W2} (unreachable over SSH)"


def test_status_reads_the_quarantine_marker_as_root_and_exits_1_while_a_node_is_out(hosts, capsys, monkeypatch, utc):
    monkeypatch.setattr(operate, "QUARANTINE_MARKER", "marker")
    hosts.quarantine(W2, json.dumps({"since": SINCE, "by": "operator", "reason": "fans\nfailing", "findings": []},
                                    indent=2))  # fmt: skip
    assert main(["status", hosts.path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["quarantined"] == [W2] and report["ok"] is False
    assert [h["health"]["status"] for h in report["hosts"]] == ["ok", "ok", "quarantined"]
    assert report["hosts"][2]["health"] == {"status": "quarantined", "since": SINCE, "by": "operator",
                                            "reason": "fans\nfailing"}  # fmt: skip
    assert main(["status", hosts.path]) == 1
    out = capsys.readouterr().out.splitlines()
    assert next(line for line in out if line.startswith(W2)).endswith(
        "quarantined since 2026-12-01 09:40:00 by operator: fans failing"
    )
    assert out[-1] == f"NOT OK: not alive Ray nodes: {W2} (quarantined by an operator)"


def test_exec_all_prints_one_block_per_host_each_line_prefixed_by_its_name(hosts, capsys):
    assert main(["exec", hosts.path, "--all", "--", "ray", "--version"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{ip}: ray, version 2.60.0" for ip in (HEAD, W1, W2)]


def test_exec_prefixes_every_host_it_runs_on_with_all_even_one_and_a_host_named_twice_runs_once(hosts, capsys):
    assert main(["exec", hosts.path, "--host", W1, "--host", W1, "--host", HEAD, "--", "ray", "--version"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{ip}: ray, version 2.60.0" for ip in (W1, HEAD)]


def test_exec_all_exits_with_the_worst_status_and_255_for_an_unreachable_host(hosts, capsys):
    assert main(["exec", hosts.path, "--all", "--on-host", "--", "sh", "-c", 'exit "${FAKE_HOST##*.}"']) == 12
    assert f"{W2}: exit status 12" in capsys.readouterr().err
    hosts.down(W1)
    assert main(["exec", hosts.path, "--all", "--", "true"]) == 255
    err = capsys.readouterr().err
    assert f"{W1}: unreachable over SSH as rayrig@{W1}" in err and f"{HEAD}:" not in err


def test_exec_runs_in_the_heads_ray_node_by_default_and_takes_options_either_side_of_the_inventory(hosts, capfd):
    assert main(["exec", hosts.path, "--", "ray", "status"]) == 0
    assert capfd.readouterr().out == "Active: 3 nodes\n"
    assert main(["exec", "--host", W2, hosts.path, "--on-host", "--", "sh", "-c", "echo $FAKE_HOST"]) == 0
    assert capfd.readouterr().out == f"{W2}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "INV", "--", "python", "job.py", "--", "x"],
        ["exec", "INV", "--all", "--", "python", "job.py", "--", "x"],
        ["exec", "--all", "INV", "--", "python", "job.py", "--", "x"],
        ["exec", "INV", "python", "job.py", "--", "x"],
    ],
)
def test_the_commands_own_double_dash_and_options_reach_it(argv):
    args, command = exec_arguments(build_parser().parse_args(argv))
    assert command == ["python", "job.py", "--", "x"]
    assert args.all == ("--all" in argv)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--host", "nope", "--", "true"], "no host 'nope'; its hosts are"),
        (["--all", "ray", "--version"], "put the command after --"),
        (["--all", "--"], "no command to run"),
    ],
)
def test_exec_usage_errors_exit_2(hosts, capsys, argv, words):
    assert main(["exec", hosts.path, *argv]) == 2
    assert words in capsys.readouterr().err


def test_logs_show_the_heads_journal_by_default_or_the_named_hosts(hosts, capfd):
    assert main(["logs", hosts.path]) == 0
    assert capfd.readouterr().out == f"{HEAD} journal: --no-pager -u ray-node.service -n 100\n"
    assert main(["logs", hosts.path, W1, "-n", "5"]) == 0
    assert capfd.readouterr().out == f"{W1} journal: --no-pager -u ray-node.service -n 5\n"


def test_logs_of_an_unreachable_host_say_what_to_check(hosts, capfd):
    hosts.down(W1)
    assert main(["logs", hosts.path, W1]) == 255
    err = capfd.readouterr().err
    assert f"rayrig logs: {W1}: unreachable over SSH as rayrig@{W1}" in err
    assert "Traceback" not in err


def test_ssh_execs_the_ssh_client_with_the_hosts_settings(hosts, monkeypatch):
    called = []
    monkeypatch.setattr(os, "execvp", lambda file, argv: called.append(argv))
    main(["ssh", hosts.path, W2])
    assert called[0][0] == "ssh" and called[0][-2:] == ["--", W2]
    assert called[0][called[0].index("-l") : called[0].index("-l") + 2] == ["-l", "rayrig"]
    assert "BatchMode=yes" not in called[0]  # an interactive session may ask for a passphrase


def test_the_probe_script_reports_an_absent_container_and_dockers_own_error(tmp_path, hosts):
    inventory = inventory_of("inv.py", [{"name": HEAD, "data": {"ray_role": "head"}}])
    (Path(os.environ["FAKE_HOSTS"]) / HEAD / "container").unlink()
    answer = operate.run(inventory.head, operate.probe_command(inventory.head), timeout=30)
    assert operate.parse_probe(answer) == {"unit": "active", "container": "absent"}
