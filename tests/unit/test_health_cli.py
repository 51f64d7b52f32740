"""``rayrig health``, ``health quarantine`` and ``health admit`` with fake answers (no SSH).

The inventory is built in the test (no pyinfra) and every remote command goes to a fake
:func:`rayrig.operate.run` that records it and answers as the monitoring host or the node would:
the files of the gate (docs/design/health-gate.md), ``rayrig-health-node``'s JSON answer, or a failure.
"""

from __future__ import annotations

import calendar
import json
import shlex
import time

import pytest

from checks import health_judge as judge
from rayrig import operate
from rayrig.cli import build_parser, main
from rayrig.commands import health
from rayrig.inventory import inventory_of
from rayrig.operate import Answer

HEAD, W1, W2 = "192.0.2.10", "192.0.2.11", "192.0.2.12"
#: 2026-12-01 09:40:00 UTC and the moments around it.
T = calendar.timegm((2026, 12, 1, 9, 40, 0))

STATE = {
    "updated": T + 600,
    "round": 812,
    "hosts": {
        HEAD: {"status": "ok", "fails": 0, "passes": 0, "since": None, "by": None, "reason": None, "findings": []},
        W1: {
            "status": "quarantined", "fails": 2, "passes": 1, "since": T, "by": "gate",
            "reason": "GPU 0: Xid 79 (fallen off the bus)",
            "findings": [
                {"level": "FAIL", "message": "Xid 79 (fallen off the bus)", "host": W1, "device": "gpu 0"},
                {"level": "WARN", "message": "HW slowdown 2% of the window", "host": W1},
            ],
        },
        W2: {"status": "failing", "fails": 1, "passes": 0, "since": None, "by": None, "reason": None,
             "findings": [{"level": "FAIL", "message": "free space on /tmp/ray 1% (below 5%)", "host": W2}]},
    },
}  # fmt: skip
EVENTS = [
    {"time": T - 86400, "host": W2, "action": "quarantined", "by": "operator", "reason": "fans failing"},
    {"time": T, "host": W1, "action": "quarantined", "by": "gate", "reason": "GPU 0: Xid 79 (fallen off the bus)"},
    {"time": T - 3600, "host": W2, "action": "admitted", "by": "operator", "reason": "fans replaced"},
]


def lab_inventory(path: str, **cluster_data):
    data = {"ssh_user": "rayrig", "health_gate": True, **cluster_data}
    return inventory_of(
        path,
        [
            {"name": HEAD, "data": {**data, "ray_role": "head"}},
            {"name": W1, "data": data},
            {"name": W2, "data": data},
        ],
    )


class Fake:
    """The hosts, as :func:`rayrig.operate.run` reaches them: each call recorded, answered by ``answer``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.files = {operate.HEALTH_STATE: json.dumps(STATE), operate.HEALTH_EVENTS: _lines(EVENTS)}
        self.node = Answer(0, "")

    def run(self, host, remote: str, timeout):
        self.calls.append((host.name, remote))
        words = shlex.split(remote)
        if words[-1] in self.files:  # read_file_command
            text = self.files[words[-1]]
            return Answer(operate.ABSENT, "", "") if text is None else Answer(0, text)
        return self.node


def _lines(events) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """An inventory file whose load gives the lab inventory (``cluster.data`` changes its data), and the fake hosts."""
    path = tmp_path / "lab.py"
    path.write_text("# loaded by the test\n")
    fake = Fake()
    fake.path = str(path)
    fake.data = {}
    fake.loaded = 0

    def load(given: str):
        fake.loaded += 1
        return lab_inventory(given, **fake.data)

    monkeypatch.setattr(health, "load_inventory", load)
    monkeypatch.setattr(operate, "run", fake.run)
    return fake


# --- the arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "before"),
    [("30m", 1800), ("2h", 7200), ("1d", 86400), ("45s", 45), ("1.5h", 5400), (" 2H ", 7200), ("1w", 604800)],
)
def test_since_takes_a_duration_before_now(text, before):
    assert health.parse_since(text, now=T) == T - before


def test_since_takes_an_iso_date_or_time_in_local_time_unless_it_has_an_offset(utc):
    assert health.parse_since("2026-12-01", now=0) == calendar.timegm((2026, 12, 1, 0, 0, 0))
    assert health.parse_since("2026-12-01T09:40", now=0) == T
    assert health.parse_since("2026-12-01 09:40:00", now=0) == T
    assert health.parse_since("2026-12-01T09:40:00Z", now=0) == T
    assert health.parse_since("2026-12-01T10:40:00+01:00", now=0) == T


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "-2h", "h", "2026-13-01", ""])
def test_since_refuses_anything_else_saying_what_it_takes(text):
    with pytest.raises(ValueError, match=r"neither a duration \(30m, 2h, 1d\) nor an ISO date or time"):
        health.parse_since(text, now=T)


def test_a_bad_since_is_argparses_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["health", "inv.py", "--since", "yesterday"])
    assert exited.value.code == 2
    assert "argument --since: 'yesterday' is neither a duration" in capsys.readouterr().err


def test_health_inventory_is_short_for_health_show_and_the_subcommands_take_their_arguments():
    parser = build_parser()
    short, full = parser.parse_args(["health", "inv.py", "--json"]), parser.parse_args(["health", "show", "inv.py"])
    assert short.func is full.func and (short.inventory, short.json, short.since) == ("inv.py", True, None)
    before = time.time()
    assert before - 7200 <= parser.parse_args(["health", "inv.py", "--since", "2h"]).since <= time.time() - 7200
    quarantine = parser.parse_args(["health", "quarantine", "inv.py", W1, "--reason", "fans failing"])
    assert (quarantine.inventory, quarantine.host, quarantine.reason) == ("inv.py", W1, "fans failing")
    admit = parser.parse_args(["health", "admit", "inv.py", W1])
    assert (admit.inventory, admit.host) == ("inv.py", W1)


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (None, "--reason is required"),
        ("", "--reason is blank"),
        ("   ", "--reason is blank"),
        ("x" * 201, "--reason has 201 characters"),
        ("fans\nfailing", "--reason holds a newline (character 5)"),
        ("fans\tfailing", r"--reason holds the character '\t' (character 5)"),
        ("fans\x1b[31m", r"--reason holds the character '\x1b' (character 5)"),
    ],
)
def test_a_bad_reason_is_refused_before_anything_runs(cluster, capsys, reason, words):
    argv = ["health", "quarantine", cluster.path, W1] + ([] if reason is None else ["--reason", reason])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rayrig health quarantine: {words}") and "expected 1-200 printable characters" in err
    assert cluster.calls == [] and cluster.loaded == 0


def test_a_reason_of_200_printable_characters_quotes_and_all_is_taken_as_it_is():
    reason = 'fan\'s "speed" $(reboot); `id` é' + "x" * 169
    assert len(reason) == 200 and health.check_reason(reason) == reason


# --- rayrig health (show) ----------------------------------------------------------------------


def test_show_reads_the_gates_files_as_root_on_the_monitoring_host(cluster, capsys, utc):
    cluster.data = {"monitoring_host": W2}
    assert main(["health", cluster.path, "--json"]) == 0
    assert sorted(cluster.calls) == [
        (W2, f'sudo -n sh -c \'[ -e "$1" ] || exit 3; exec cat -- "$1"\' _ {operate.HEALTH_EVENTS}'),
        (W2, f'sudo -n sh -c \'[ -e "$1" ] || exit 3; exec cat -- "$1"\' _ {operate.HEALTH_STATE}'),
    ]
    said = json.loads(capsys.readouterr().out)
    assert said["state"] == STATE
    assert [e["time"] for e in said["events"]] == [T - 86400, T - 3600, T]  # newest last


def test_show_json_keeps_the_events_since_when_it_is_asked(cluster, capsys, utc):
    assert main(["health", cluster.path, "--json", "--since", "2026-12-01T08:00"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert [(e["host"], e["action"]) for e in said["events"]] == [(W2, "admitted"), (W1, "quarantined")]


def test_show_prints_each_hosts_state_the_rounds_fail_findings_and_the_timeline(cluster, capsys, utc, monkeypatch):
    monkeypatch.setattr(time, "time", lambda: T + 640)
    assert main(["health", cluster.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Health gate on {HEAD} ({cluster.path}): round 812 at 2026-12-01 09:50:00 (40 s ago)"
    rows = {line.split()[0]: line.split(None, 6) for line in lines[3:6]}
    assert lines[1].split() == ["HOST", "STATUS", "SINCE", "BY", "FAILS", "PASSES", "REASON"]
    assert rows[HEAD] == [HEAD, "ok", "-", "-", "0", "0", "-"]
    assert rows[W1] == [
        W1,
        "quarantined",
        "2026-12-01",
        "09:40:00",
        "gate",
        "2",
        "1  GPU 0: Xid 79 (fallen off the bus)",
    ]
    assert rows[W2] == [W2, "failing", "-", "-", "1", "0", "-"]
    assert lines[6:9] == [
        "FAIL findings of the last round:",
        f"  - {W1}: Xid 79 (fallen off the bus) (gpu 0)",  # the WARN is not one
        f"  - {W2}: free space on /tmp/ray 1% (below 5%)",
    ]
    assert lines[9] == "Timeline, newest last (3 events):"
    timeline = lines[12:]
    assert [line.split()[:5] for line in timeline] == [
        ["2026-11-30", "09:40:00", W2, "quarantined", "operator"],
        ["2026-12-01", "08:40:00", W2, "admitted", "operator"],
        ["2026-12-01", "09:40:00", W1, "quarantined", "gate"],
    ]
    assert timeline[-1].endswith("gate      GPU 0: Xid 79 (fallen off the bus)")


def test_show_reads_the_state_as_the_gate_writes_it(cluster, capsys, utc, monkeypatch):
    out = judge.HostState(judge.QUARANTINED, fails=0, passes=2, since=T, by=judge.OPERATOR, reason="fans failing")
    hosts = {HEAD: judge.HostState().as_dict(), W1: out.as_dict(), W2: judge.HostState(judge.FAILING, 1).as_dict()}
    state = {"updated": T, "probe": {"at": None, "median_s": None, "times": {}}, "round": 3,
             "errors": ["Prometheus did not answer (connection refused)"],
             "hosts": {name: {**entry, "notes": []} for name, entry in hosts.items()}}  # fmt: skip
    cluster.files[operate.HEALTH_STATE] = json.dumps(state, indent=1)
    cluster.files[operate.HEALTH_EVENTS] = _lines(
        [judge.Action(judge.QUARANTINE, W1, "fans failing", by=judge.OPERATOR, observed=True).event(T)]
    )
    monkeypatch.setattr(time, "time", lambda: T + 5)
    assert main(["health", cluster.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Health gate on {HEAD} ({cluster.path}): round 3 at 2026-12-01 09:40:00 (5 s ago)"
    assert lines[4].split() == [W1, "quarantined", "2026-12-01", "09:40:00", "operator", "0", "2", "fans", "failing"]
    assert lines[6:8] == ["What the last round could not ask:", "  - Prometheus did not answer (connection refused)"]
    assert lines[-1].split() == ["2026-12-01", "09:40:00", W1, "quarantined", "operator", "fans", "failing"]


def test_show_since_says_how_many_events_it_kept_and_none_when_none(cluster, capsys, utc):
    assert main(["health", cluster.path, "--since", "2026-12-01T09:00Z"]) == 0
    out = capsys.readouterr().out
    assert "Timeline since 2026-12-01 09:00:00, newest last (1 of 3 events):" in out
    assert main(["health", cluster.path, "--since", "2026-12-02"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "Timeline: no event since 2026-12-02 00:00:00"


def test_show_skips_an_event_line_being_written_and_says_so_and_an_absent_timeline_is_empty(cluster, capsys):
    cluster.files[operate.HEALTH_EVENTS] = _lines(EVENTS[:1]) + '{"time": 17965'
    assert main(["health", cluster.path]) == 0
    assert "(1 event; 1 line(s) of /var/lib/rayrig/health/events.jsonl are not events, skipped):" in (
        capsys.readouterr().out
    )
    cluster.files[operate.HEALTH_EVENTS] = None
    assert main(["health", cluster.path]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("Timeline: no event yet")


def test_show_names_a_stale_state_and_the_hosts_the_gate_does_not_judge(cluster, capsys, monkeypatch):
    state = {**STATE, "hosts": {k: v for k, v in STATE["hosts"].items() if k != W2}}
    cluster.files[operate.HEALTH_STATE] = json.dumps(state)
    monkeypatch.setattr(time, "time", lambda: T + 600 + 3600)
    assert main(["health", cluster.path]) == 0
    out = capsys.readouterr().out
    assert "WARNING: the state is 60 min old, the gate's rounds are every 60 s: is rayrig-health.service running" in out
    assert f"Not judged by the gate: {W2} (it judges the hosts of the last deploy)" in out


def test_show_before_the_gates_first_round_says_so(cluster, capsys):
    cluster.files = {operate.HEALTH_STATE: None, operate.HEALTH_EVENTS: None}
    assert main(["health", cluster.path]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"==> Reading the health gate's state on {HEAD}"
    assert err[1].startswith(f"rayrig health show: the health gate on {HEAD} has not finished a round yet")
    assert "health_interval_s = 60 s" in err[1] and len(err) == 2


def test_show_with_the_gate_off_names_the_setting_and_asks_nothing(cluster, capsys):
    cluster.data = {"health_gate": False}
    assert main(["health", cluster.path]) == 1
    assert "the health gate is off (health_gate = False)" in capsys.readouterr().err
    assert cluster.calls == []


def test_show_says_when_the_monitoring_host_does_not_answer_or_its_state_is_not_the_gates(cluster, capsys):
    cluster.node = Answer(255, "", "ssh: connect to host 192.0.2.10 port 22: Connection refused")
    cluster.files = {}  # every command gets cluster.node
    assert main(["health", cluster.path]) == 1
    assert f"the monitoring host {HEAD}: unreachable over SSH as rayrig@{HEAD}" in capsys.readouterr().err
    cluster.node = Answer(1, "", "sudo: a password is required\n")
    assert main(["health", cluster.path]) == 1
    assert "cannot read /var/lib/rayrig/health/state.json as root (exit status 1: sudo: a password is required)" in (
        capsys.readouterr().err
    )
    cluster.files = {operate.HEALTH_STATE: "[]", operate.HEALTH_EVENTS: ""}
    assert main(["health", cluster.path]) == 1
    assert 'expected the gate\'s state (a JSON object with "hosts")' in capsys.readouterr().err


# --- rayrig health quarantine / admit ----------------------------------------------------------


def test_quarantine_runs_the_gates_command_on_the_host_with_the_reason_quoted(cluster, capsys):
    cluster.node = Answer(0, json.dumps({"host": W1, "action": "quarantined", "drained": True,
                                         "message": "draining; stopped at the latest in 300 s"}) + "\n")  # fmt: skip
    reason = "-fan's speed $(reboot)"
    assert main(["health", "quarantine", cluster.path, W1, f"--reason={reason}"]) == 0
    [(host, remote)] = cluster.calls
    assert host == W1
    assert shlex.split(remote) == [
        "sudo", "-n", "/usr/local/libexec/rayrig-health-node", "quarantine", "--container", "ray-node",
        "--by", "operator", f"--reason={reason}", "--drain-s", "300",
    ]  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        f"{W1}: quarantined (drained): draining; stopped at the latest in 300 s",
        f"It stays out until: rayrig health admit {cluster.path} {W1}",
    ]


def test_quarantine_as_root_needs_no_sudo_and_takes_the_inventorys_names(cluster, capsys):
    cluster.data = {"ssh_user": "root", "ray_container_name": "gpu-node", "health_drain_timeout_s": 30}
    cluster.node = Answer(0, 'a warning first\n{"action": "quarantined", "drained": false, "message": "not alive"}\n')
    assert main(["health", "quarantine", cluster.path, W2, "--reason", "fans"]) == 0
    assert shlex.split(cluster.calls[0][1]) == [
        "/usr/local/libexec/rayrig-health-node", "quarantine", "--container", "gpu-node",
        "--by", "operator", "--reason=fans", "--drain-s", "30",
    ]  # fmt: skip
    assert capsys.readouterr().out.splitlines()[0] == f"{W2}: quarantined (not drained): not alive"


def test_quarantine_refuses_the_head(cluster, capsys):
    assert main(["health", "quarantine", cluster.path, HEAD, "--reason", "fans"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"rayrig health quarantine: {HEAD} is the head of {cluster.path}: the head is never quarantined"
    )
    assert cluster.calls == []


def test_quarantine_and_admit_refuse_with_the_gate_off(cluster, capsys):
    cluster.data = {"health_gate": False}
    assert main(["health", "quarantine", cluster.path, W1, "--reason", "fans"]) == 1
    assert "the health gate is off (health_gate = False)" in capsys.readouterr().err
    assert main(["health", "admit", cluster.path, W1]) == 1
    assert "the health gate is off (health_gate = False)" in capsys.readouterr().err
    assert cluster.calls == []


@pytest.mark.parametrize("verb", [["quarantine", "--reason", "fans"], ["admit"]])
def test_a_host_not_in_the_inventory_is_refused_naming_its_hosts(cluster, capsys, verb):
    assert main(["health", verb[0], cluster.path, "gpu-9", *verb[1:]]) == 2
    err = capsys.readouterr().err
    assert f"no host 'gpu-9'; its hosts are {HEAD} (head), {W1} (worker), {W2} (worker)" in err
    assert cluster.calls == []


def test_admit_runs_the_gates_command_and_prints_its_answer(cluster, capsys):
    cluster.node = Answer(0, json.dumps({"host": W1, "action": "admitted", "message": "marker removed, unit started"}))
    assert main(["health", "admit", cluster.path, W1]) == 0
    assert cluster.calls == [(W1, "sudo -n /usr/local/libexec/rayrig-health-node admit --container ray-node")]
    assert capsys.readouterr().out.splitlines() == [
        f"{W1}: admitted: marker removed, unit started",
        f"rayrig status {cluster.path} shows when it is an alive Ray node again",
    ]


def test_quarantine_of_a_host_already_out_says_so_and_admit_exits_1_when_the_node_does_not_start(cluster, capsys):
    cluster.node = Answer(0, json.dumps({"action": "quarantined", "drained": False, "already": True,
                                         "message": "already quarantined by gate: Xid 79"}))  # fmt: skip
    assert main(["health", "quarantine", cluster.path, W1, "--reason", "fans"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{W1}: already quarantined by gate: Xid 79"
    cluster.node = Answer(
        0,
        json.dumps(
            {
                "action": "admitted",
                "started": False,
                "message": "its ray-node did not start: Unit ray-node.service not found.",
            }
        ),
    )
    assert main(["health", "admit", cluster.path, W1]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{W1}: admitted: its ray-node did not start: Unit ray-node.service not found.",
        f"Its ray-node did not start: see rayrig logs {cluster.path} {W1}",
    ]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (Answer(1, "", "Traceback (most recent call last):\nRuntimeError: docker: not running\n"),
         f"{W1}: /usr/local/libexec/rayrig-health-node admit failed with exit status 1: "
         "RuntimeError: docker: not running"),
        (Answer(127, "", "sudo: /usr/local/libexec/rayrig-health-node: command not found\n"),
         "command not found; is the health gate deployed there? (health_gate = True, then rayrig deploy"),
        (Answer(0, "done\n"), "admit answered no JSON object (it printed: done)"),
        (Answer(255, "", "ssh: connect to host 192.0.2.11 port 22: Connection refused\n"),
         f"{W1}: unreachable over SSH as rayrig@{W1} (ssh: connect to host 192.0.2.11 port 22: Connection refused)"),
        (Answer(None, "", "no answer within 300 s"), "(no answer within 300 s)"),
    ],
)  # fmt: skip
def test_a_failed_command_exits_1_with_its_last_words(cluster, capsys, answer, words):
    cluster.node = answer
    assert main(["health", "admit", cluster.path, W1]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("rayrig health admit: ") and err.count("\n") == 1 and words in err
