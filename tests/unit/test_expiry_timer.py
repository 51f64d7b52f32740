"""The self-expiry timer's script, run for real against a local IMDSv2, and its systemd units.

The script is the one the user data carries (taken from the rendered cloud-config). It runs
with ``sh`` as the timer runs it; only the IMDS address, the power-off command and the state
file are pointed at this test (environment variables whose defaults are the real ones).
What is asserted is what the instance does (powers off or not) and what its journal says.
"""

from __future__ import annotations

import datetime as dt
import http.server
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cloud.ec2.aws import TAG_EXPIRES, iso, utc_now
from cloud.ec2.expiry import CHECK_PATH, render_units, user_data

NOW = utc_now()
PAST = iso(NOW - dt.timedelta(hours=1))
FUTURE = iso(NOW + dt.timedelta(hours=1))
LATER = iso(NOW + dt.timedelta(hours=5))
TAG_PATH = f"/latest/meta-data/tags/instance/{TAG_EXPIRES}"


class Imds(http.server.ThreadingHTTPServer):
    """IMDSv2 as EC2 answers the script's two requests: PUT a token (with its TTL header), then
    GET the tag with that token (401 without it, 404 when the instance has no such tag)."""

    token = "AQAEAtest-token=="

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ImdsHandler)
        self.tag: str | None = None
        self.failing: int | None = None  # an HTTP status every GET gets instead
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ImdsHandler(http.server.BaseHTTPRequestHandler):
    server: Imds

    def _answer(self, code: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        self.server.requests.append(f"PUT {self.path}")
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._answer(400)
        else:
            self._answer(200, self.server.token)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.requests.append(f"GET {self.path}")
        if self.server.failing:
            self._answer(self.server.failing)
        elif self.headers.get("X-aws-ec2-metadata-token") != self.server.token:
            self._answer(401)
        elif self.path == TAG_PATH and self.server.tag is not None:
            self._answer(200, self.server.tag)
        else:
            self._answer(404, "Not Found")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def imds() -> Iterator[Imds]:
    server = Imds()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


#: /bin/sh is dash on Debian and Ubuntu, bash on Amazon Linux 2023 and the RHEL family.
SHELLS = [shell for shell in ("dash", "bash") if shutil.which(shell)] or ["sh"]


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> str:
    return request.param


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def shipped(launch: str) -> dict[str, str]:
    """The files the user data writes, by path, as cloud-init reads them."""
    return {f["path"]: f["content"] for f in yaml.safe_load(user_data(launch))["write_files"]}


class Instance:
    """One instance's timer: its script from the user data, its state file, and a power-off that only records."""

    def __init__(self, tmp_path: Path, imds_url: str, launch: str, shell: str):
        self.dir = tmp_path
        self.shell = shell
        self.script = tmp_path / "rayrig-expiry-check"
        self.script.write_text(shipped(launch)[CHECK_PATH], encoding="utf-8")
        self.script.chmod(0o755)
        self.state = tmp_path / "state" / "last-known"
        self.powered_off = tmp_path / "powered-off"
        poweroff = tmp_path / "poweroff"
        poweroff.write_text(f"#!/bin/sh\necho off >> {self.powered_off}\n", encoding="utf-8")
        poweroff.chmod(0o755)
        self.env = {
            "PATH": os.environ["PATH"],
            "RAYRIG_IMDS_URL": imds_url,
            "RAYRIG_POWEROFF": str(poweroff),
            "RAYRIG_EXPIRY_STATE": str(self.state),
            # What the service's Environment= line gives it.
            "RAYRIG_EXPIRY_AT_LAUNCH": _launch_of(render_units(launch)["rayrig-expiry.service"]),
        }

    def tick(self) -> str:
        """One run of the timer's service; its journal lines."""
        done = subprocess.run(
            [self.shell, str(self.script)], env=self.env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    @property
    def off(self) -> bool:
        return self.powered_off.exists()


def _launch_of(service: str) -> str:
    match = re.search(r"^Environment=RAYRIG_EXPIRY_AT_LAUNCH=(\S+)$", service, re.MULTILINE)
    assert match, service
    return match.group(1)


def test_before_the_expiry_the_instance_runs_on_and_remembers_the_tag(tmp_path: Path, shell: str, imds: Imds) -> None:
    imds.tag = FUTURE
    node = Instance(tmp_path, imds.url, FUTURE, shell)
    journal = node.tick()
    assert not node.off, journal
    assert node.state.read_text().strip() == FUTURE
    assert imds.requests == ["PUT /latest/api/token", f"GET {TAG_PATH}"]
    assert node.tick() == ""  # nothing new: no line every minute


@pytest.mark.parametrize("when", ["past", "now"])
def test_at_or_after_the_expiry_it_powers_off_and_says_so(tmp_path: Path, shell: str, imds: Imds, when: str) -> None:
    imds.tag = PAST if when == "past" else iso(utc_now())
    node = Instance(tmp_path, imds.url, imds.tag, shell)
    journal = node.tick()
    assert node.off
    assert f"this instance expired at {imds.tag}; powering off" in journal


def test_a_tag_moved_later_keeps_it_running_past_the_launch_value(tmp_path: Path, shell: str, imds: Imds) -> None:
    """``rayrig cloud extend`` moves the tag only: the launch value is past, the tag later."""
    imds.tag = LATER
    node = Instance(tmp_path, imds.url, PAST, shell)
    journal = node.tick()
    assert not node.off, journal
    assert f"expiry is {LATER}" in journal


def test_a_tag_moved_earlier_is_not_followed(tmp_path: Path, shell: str, imds: Imds) -> None:
    """``extend`` only moves the tag later: whoever moves it earlier (anyone allowed to tag the instance) must
    not power the cluster off, neither below the value at launch nor below the last value read."""
    imds.tag = PAST
    node = Instance(tmp_path, imds.url, FUTURE, shell)
    journal = node.tick()
    assert not node.off, journal
    assert f"the tag {TAG_EXPIRES} moved earlier, to {PAST}; keeping {FUTURE} (the value at launch)" in journal
    imds.tag = LATER
    node.tick()
    imds.tag = FUTURE  # earlier than the last value read, still ahead of the launch value
    journal = node.tick()
    assert not node.off and f"keeping {LATER} (the last value read from the tag)" in journal
    assert node.state.read_text().strip() == LATER


def test_with_imds_down_the_launch_value_holds(tmp_path: Path, shell: str) -> None:
    node = Instance(tmp_path, closed_port_url(), PAST, shell)
    journal = node.tick()
    assert node.off
    assert f"cannot read the tag {TAG_EXPIRES} through IMDS (no IMDSv2 token" in journal
    assert f"keeping {PAST} (the value at launch)" in journal


def test_with_imds_down_the_last_value_read_holds_over_the_launch_value(tmp_path: Path, shell: str, imds: Imds) -> None:
    imds.tag = LATER
    node = Instance(tmp_path, imds.url, PAST, shell)
    node.tick()
    node.env["RAYRIG_IMDS_URL"] = closed_port_url()
    journal = node.tick()
    assert not node.off, journal
    assert f"keeping {LATER} (the last value read from the tag)" in journal


def test_an_imds_error_keeps_the_last_value_read(tmp_path: Path, shell: str, imds: Imds) -> None:
    imds.tag = LATER
    node = Instance(tmp_path, imds.url, PAST, shell)
    node.tick()
    imds.failing = 503
    journal = node.tick()
    assert not node.off, journal
    assert "IMDS answered HTTP 503" in journal and f"keeping {LATER} (the last value read from the tag)" in journal


@pytest.mark.parametrize("tag", [None, "next tuesday", "2026-13-45T99:00:00Z", "$(touch /tmp/x)"])
def test_a_removed_or_unreadable_tag_keeps_the_last_known_expiry(
    tmp_path: Path, shell: str, imds: Imds, tag: str | None
) -> None:
    """Never an early power-off by mistake (the last value read is later), and never none (it is past)."""
    imds.tag = LATER
    node = Instance(tmp_path, imds.url, PAST, shell)
    node.tick()
    imds.tag = tag
    journal = node.tick()
    assert not node.off, journal
    said = "is gone" if tag is None else f"holds '{tag}', not a time"
    assert said in journal and f"keeping {LATER}" in journal

    node.state.write_text(PAST + "\n")  # the last value read has passed since
    journal = node.tick()
    assert node.off, journal


def test_with_no_usable_expiry_at_all_it_says_so_and_stays_up(tmp_path: Path, shell: str) -> None:
    node = Instance(tmp_path, closed_port_url(), FUTURE, shell)
    node.env["RAYRIG_EXPIRY_AT_LAUNCH"] = "garbage"
    journal = node.tick()
    assert not node.off
    assert "no expiry known" in journal


def test_the_script_defaults_to_the_real_imds_and_poweroff() -> None:
    script = shipped(FUTURE)[CHECK_PATH]
    assert "IMDS=${RAYRIG_IMDS_URL:-http://169.254.169.254}" in script
    assert "POWEROFF=${RAYRIG_POWEROFF:-systemctl poweroff}" in script


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """The units as the user data installs them; ``verify`` checks that ExecStart's program exists
    and is executable, so it points at the script's copy here (the only change)."""
    files = shipped(FUTURE)
    script = tmp_path / "rayrig-expiry-check"
    script.write_text(files[CHECK_PATH])
    script.chmod(0o755)
    units = []
    for name in ("rayrig-expiry.service", "rayrig-expiry.timer"):
        text = files[f"/etc/systemd/system/{name}"]
        assert text == render_units(FUTURE)[name]
        unit = tmp_path / name
        unit.write_text(text.replace(f"ExecStart={CHECK_PATH}", f"ExecStart={script}"))
        units.append(str(unit))
    analyze = shutil.which("systemd-analyze")
    if analyze:
        done = subprocess.run(
            [analyze, "verify", "--man=no", *units], capture_output=True, text=True, timeout=60, check=False
        )
        assert (done.returncode, done.stdout + done.stderr) == (0, "")
    else:  # no systemd here: the keys each section may hold, checked by hand
        for unit in units:
            assert unit_problems(Path(unit).read_text()) == [], unit


#: The keys the units use, by section (systemd.unit, systemd.service, systemd.exec, systemd.timer).
KNOWN_KEYS = {
    "Unit": {"Description", "After", "Wants", "Before", "Requires"},
    "Service": {"Type", "Environment", "StateDirectory", "ExecStart"},
    "Timer": {"OnBootSec", "OnUnitActiveSec", "AccuracySec"},
    "Install": {"WantedBy"},
}


def unit_problems(text: str) -> list[str]:
    """Lines of a unit file that are neither a comment, a known section nor a known key of it."""
    problems, section = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if re.fullmatch(r"\[(\w+)\]", line):
            section = line[1:-1]
            if section not in KNOWN_KEYS:
                problems.append(f"{number}: unknown section {line}")
        elif "=" not in line or line.split("=", 1)[0] not in KNOWN_KEYS.get(section or "", set()):
            problems.append(f"{number}: {line!r} is no known key of [{section}]")
    return problems


def test_the_pure_unit_check_finds_an_unknown_key() -> None:
    """The fallback above can fail: a misspelt key is found."""
    assert unit_problems("[Timer]\nOnBootSecs=1min\n") == ["2: 'OnBootSecs=1min' is no known key of [Timer]"]
