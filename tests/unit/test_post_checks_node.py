"""The checks' transfers to and from a host through sudo (deploy/post_checks.py's PyinfraNode):
through a fresh private directory of the SSH user's, never through pyinfra's /tmp/pyinfra-*."""

from __future__ import annotations

from io import BytesIO
from types import SimpleNamespace
from typing import Any

from deploy.post_checks import PyinfraNode


class FakeHost:
    """What PyinfraNode uses of a pyinfra host, recording each call."""

    def __init__(self, data: dict[str, Any], made: str = "/tmp/rayrig-transfer.Qw3rTy7uI9"):
        self.name = "gpu-01"
        self.data = SimpleNamespace(dict=lambda: data)
        self.made = made
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []

    def run_shell_command(self, command: Any, **kwargs: Any) -> tuple[bool, Any]:
        text = command.get_raw_value()
        self.calls.append(("run", text, kwargs))
        lines = [self.made] if text.startswith("mktemp") else []
        return True, SimpleNamespace(stdout_lines=lines)

    def put_file(self, source: Any, remote: str, **kwargs: Any) -> bool:
        self.calls.append(("put", remote, kwargs))
        return True

    def get_file(self, remote: str, local: str, **kwargs: Any) -> bool:
        self.calls.append(("get", remote, kwargs))
        return True


def test_a_transfer_through_sudo_uses_a_fresh_directory_of_the_ssh_users_and_removes_it():
    host = FakeHost({"_sudo": True})
    node = PyinfraNode(host)
    assert node.put_file(BytesIO(b"tgz"), "/tmp/rayrig-checks.X/checks.tgz")
    assert node.get_file("/tmp/rayrig-checks.X/report.json", "/tmp/local.json")
    made = ("run", "mktemp -d -t rayrig-transfer.XXXXXXXXXX", {"_sudo": False, "_doas": False, "_dzdo": False})
    removed = ("run", f"rm -rf -- {host.made}", {"_sudo": False, "_doas": False, "_dzdo": False})
    assert host.calls == [
        made,
        ("put", "/tmp/rayrig-checks.X/checks.tgz", {"remote_temp_filename": f"{host.made}/upload", "_sudo": True}),
        removed,
        made,
        ("get", "/tmp/rayrig-checks.X/report.json", {"remote_temp_filename": f"{host.made}/download", "_sudo": True}),
        removed,
    ]


def test_without_a_private_directory_nothing_is_transferred():
    host = FakeHost({"_sudo": True}, made="")
    assert not PyinfraNode(host).put_file(BytesIO(b"tgz"), "/tmp/rayrig-checks.X/checks.tgz")
    assert [kind for kind, _, _ in host.calls] == ["run"]


def test_a_host_reached_as_root_transfers_directly():
    host = FakeHost({})
    node = PyinfraNode(host)
    assert node.put_file(BytesIO(b"tgz"), "/root/x.tgz")
    assert node.run("true") == (True, [])
    assert host.calls == [("put", "/root/x.tgz", {}), ("run", "true", {"print_output": False})]
