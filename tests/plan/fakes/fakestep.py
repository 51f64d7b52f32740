"""What one step of the deploy finds on a fake host (see ``fake_firewall`` and ``fake_storage``),
and the matchers that answer a fact class.

A fake host answers a fact with the output of the first ``fake_responses`` key that is a
substring of the fact's command. ``fact_key(HostInfo, "cat /etc/os-release")`` returns that
key after checking it against the command ``HostInfo`` sends, so a fact whose command
changes fails the plan tests loudly instead of leaving the fake answering nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from shlex import quote
from typing import Any

from pyinfra.api import FactBase, StringCommand
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from deploy.host.secret_files import digest_key_path, read_digest_key, store_digest_key
from deploy.run.facts import CONTAINER_STATE_FORMAT, ContainerState
from deploy.run.units import NeedDaemonReload


@dataclass
class FakeState:
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (content, mode)
    dirs: dict[str, int] = field(default_factory=dict)  # path -> mode
    packages: tuple[str, ...] = ()  # installed package names
    responses: dict[str, Any] = field(default_factory=dict)  # fact command substring -> output lines


def fact_key(fact: type[FactBase], key: str, *args: Any, **kwargs: Any) -> str:
    """``key``, the ``fake_responses`` matcher of ``fact`` read with ``args``/``kwargs``,
    checked to be part of the command that fact sends.

    Unchecked: arguments the command cannot take (not strings), and arguments the command
    shell-quotes (hostile values in the data), whose plain keys the fake keeps as it always had
    them (matching nothing, where the command quotes)."""
    try:
        text = _command_text(fact, args, tuple(kwargs.items()))
    except TypeError:  # not a string, or unhashable
        return key
    quoted = any(isinstance(a, str) and quote(a) != a for a in (*args, *kwargs.values()))
    if key not in text and not quoted:
        raise AssertionError(f"the fake answers {fact.__name__} on {key!r}, which its command lacks: {text!r}")
    return key


@cache
def _command_text(fact: type[FactBase], args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...]) -> str:
    command = fact().command(*args, **dict(kwargs))
    return command.get_raw_value() if isinstance(command, StringCommand) else str(command)


def systemd_answer(unit: str, key: str, value: str) -> list[str]:
    """What ``systemctl show --property Id --property KEY UNIT`` prints (pyinfra's systemd facts)."""
    return [f"Id={unit}", f"{key}={value}", ""]


def systemd_unit(unit: str, sub_state: str, unit_file_state: str) -> dict[str, list[str]]:
    """The answers of pyinfra's ``SystemdStatus`` and ``SystemdEnabled`` facts about ``unit``
    (what ``systemd.service`` reads): ``sub_state`` "running", "exited" or "dead",
    ``unit_file_state`` "enabled" or "" (not installed)."""
    return {
        fact_key(SystemdStatus, f"--property SubState {unit}", services=unit): systemd_answer(
            unit, "SubState", sub_state
        ),
        fact_key(SystemdEnabled, f"--property UnitFileState {unit}", services=unit): systemd_answer(
            unit, "UnitFileState", unit_file_state
        ),
    }


def need_reload(unit: str, stale: bool, *, quoted: bool = False) -> dict[str, list[str]]:
    """The answer of ``deploy.run.units.NeedDaemonReload`` about ``unit`` (``stale``: its files
    changed since systemd's last daemon-reload; ``quoted``: the key has the unit as the command
    quotes it, for names with a backslash)."""
    key = f"--property NeedDaemonReload -- {quote(unit) if quoted else unit}"
    return {fact_key(NeedDaemonReload, key, unit): [f"NeedDaemonReload={'yes' if stale else 'no'}"]}


def container_state_key(container: str) -> str:
    """The ``fake_responses`` key of ``ContainerState`` read for ``container``: Docker asked for its fields."""
    return fact_key(
        ContainerState, f"docker container inspect --format {quote(CONTAINER_STATE_FORMAT)} {container}", container
    )


def local_digest_key(s: Mapping[str, Any]) -> str:
    """The cluster's digest key on the operator's machine, for settings ``s`` (made as the deploy
    makes it when absent): what a converged host holds and its secret files' digests are keyed by."""
    path = digest_key_path(dict(s))
    if not path.exists():
        store_digest_key(path, secrets.token_hex(32))
    return read_digest_key(path)
