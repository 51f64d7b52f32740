"""An inventory's hosts as the day-to-day commands operate them: role, addresses, SSH settings, data.

    inventory = load_inventory("inventories/lab.py")
    head = inventory.pick(None)                       # the head; inventory.pick("10.0.0.2") for another
    subprocess.run(ssh_argv(head, "uptime", batch=True))

pyinfra loads the inventory, exactly as a deploy does (its group data, the inventory's
own code: ``inventories/lab.py`` reads the lab's state, ``inventories/ec2.py`` asks AWS),
with ``pyinfra INVENTORY debug-inventory --json`` in a child process run from the
repository root: pyinfra's command-line package patches the standard library for gevent
as soon as it is imported, which this process must not inherit. rayrig's defaults
(``inventories/group_data/all.py``) are merged on top, as in a deploy
(:mod:`deploy.contract.settings`).

The hosts are reached with the system's OpenSSH client, given the same SSH settings
pyinfra's connector reads from each host's data (:func:`ssh_argv`): the user's own SSH
configuration, agent and known hosts work as in a terminal, ``rayrig ssh`` is a real
interactive session, and ``-f`` follows logs until Ctrl-C. Host keys are always checked.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.contract.paths import repo_root
from deploy.contract.schema import validate_cluster
from deploy.contract.settings import merge

#: Seconds ssh waits for a host's SSH server before it gives up (non-interactive commands).
CONNECT_TIMEOUT_S = 10
#: How long pyinfra may take to load an inventory (an EC2 inventory asks AWS).
LOAD_TIMEOUT_S = 120
#: pyinfra's ``ssh_strict_host_key_checking`` values that keep host-key checking on, as ssh takes them.
CHECKING_VALUES = ("yes", "accept-new", "ask")
#: pyinfra's values that would turn it off: rayrig's commands check keys anyway, trusting a first one.
UNCHECKED_VALUES = ("no", "off")

#: The ``ssh_*`` keys whose text reaches ssh, and what each must be.
SSH_TEXT_KEYS = {
    "ssh_user": "a user name",
    "ssh_hostname": "a host name or address",
    "ssh_key": "the path of a file on this machine",
    "ssh_known_hosts_file": "the path of a file on this machine",
    "ssh_config_file": "the path of a file on this machine",
}

EXIT_FAILURE = 1
EXIT_USAGE = 2
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class OperateError(Exception):
    """A day-to-day command cannot go on; ``status`` is the exit status (1 failure, 2 bad usage)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SshSettings:
    """How pyinfra's SSH connector reaches a host, read from the host's data (``ssh_*`` keys)."""

    hostname: str
    user: str | None = None
    port: int | None = None
    key: str | None = None
    known_hosts_file: str | None = None
    strict_host_key_checking: str | None = None
    config_file: str | None = None
    forward_agent: bool = False
    allow_agent: bool = True
    look_for_keys: bool = True

    @classmethod
    def from_data(cls, name: str, data: Mapping[str, Any]) -> SshSettings:
        """The settings of host ``name``; ``OperateError`` (2) names a key whose value ssh cannot take."""
        port = data.get("ssh_port")
        if port is not None and (isinstance(port, bool) or not str(port).isdigit() or not 1 <= int(port) <= 65535):
            raise OperateError(f"host {name}: ssh_port = {port!r}: expected a port number 1-65535", EXIT_USAGE)
        strict = data.get("ssh_strict_host_key_checking")
        if strict is not None and strict not in CHECKING_VALUES + UNCHECKED_VALUES:
            raise OperateError(
                f"host {name}: ssh_strict_host_key_checking = {strict!r}: expected one of "
                + ", ".join(CHECKING_VALUES + UNCHECKED_VALUES),
                EXIT_USAGE,
            )
        for key, expected in SSH_TEXT_KEYS.items():
            value = data.get(key)
            if value is None:
                continue
            text = value if isinstance(value, str) else ""
            bad_path = key not in ("ssh_user", "ssh_hostname") and ('"' in text or "\n" in text)  # an -o value
            blank = key in ("ssh_user", "ssh_hostname") and any(c.isspace() for c in text)  # one word for ssh
            if not text.strip() or bad_path or blank:
                raise OperateError(f"host {name}: {key} = {value!r}: expected {expected}", EXIT_USAGE)
        if any(c.isspace() for c in name) and not data.get("ssh_hostname"):
            raise OperateError(
                f"host {name!r}: the host's name = {name!r}: expected a host name or address", EXIT_USAGE
            )
        return cls(
            hostname=data.get("ssh_hostname") or name,
            user=data.get("ssh_user"),
            port=int(port) if port is not None else None,
            key=local_path(data.get("ssh_key")),
            known_hosts_file=local_path(data.get("ssh_known_hosts_file")),
            # pyinfra's own default is accept-new; "no" is accept-new too: host keys are always checked
            strict_host_key_checking="accept-new" if strict in (None, *UNCHECKED_VALUES) else strict,
            config_file=local_path(data.get("ssh_config_file")),
            forward_agent=bool(data.get("ssh_forward_agent")),
            allow_agent=data.get("ssh_allow_agent") is not False,
            look_for_keys=data.get("ssh_look_for_keys") is not False,
        )

    @property
    def where(self) -> str:
        """``user@hostname:port`` as far as the inventory says (for messages)."""
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.hostname}{port}"


def local_path(value: str | None) -> str | None:
    """A path of this machine as pyinfra reads it: ``~`` expanded, relative to the repository root
    (where rayrig runs pyinfra)."""
    if not value:
        return None
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else repo_root() / path)


@dataclass(frozen=True)
class Host:
    """One inventory host: its pyinfra data, its rayrig settings (defaults merged), how to reach it."""

    name: str
    data: Mapping[str, Any] = field(repr=False)
    settings: Mapping[str, Any] = field(repr=False)
    ssh: SshSettings

    @property
    def role(self) -> str:
        """``head`` or ``worker`` (``ray_role``)."""
        return str(self.settings["ray_role"])

    @property
    def address(self) -> str:
        """Where SSH connects: ``ssh_hostname``, else the inventory name."""
        return self.ssh.hostname

    @property
    def node_ip(self) -> str:
        """The address Ray knows the node by: ``ray_node_ip``, else ``ssh_hostname``, else the name."""
        return str(self.data.get("ray_node_ip") or self.data.get("ssh_hostname") or self.name)

    @property
    def present(self) -> bool:
        """Whether the host is meant to be a node (``ray_state`` is not ``"absent"``)."""
        return self.settings["ray_state"] != "absent"

    @property
    def container(self) -> str:
        """The ray-node container's name, also its systemd unit's (``ray_container_name``)."""
        return str(self.settings["ray_container_name"])

    @property
    def as_root(self) -> list[str]:
        """The prefix that runs a command as root there (``sudo -n``: never a password prompt)."""
        return [] if self.ssh.user == "root" else ["sudo", "-n"]


@dataclass(frozen=True)
class Inventory:
    """The hosts of one inventory file, in its order, and its head."""

    path: str
    hosts: tuple[Host, ...]

    @property
    def head(self) -> Host:
        return next(h for h in self.hosts if h.present and h.role == "head")

    @property
    def members(self) -> list[Host]:
        """The hosts meant to be Ray nodes (not ``ray_state = "absent"``)."""
        return [h for h in self.hosts if h.present]

    def pick(self, name: str | None) -> Host:
        """The host named ``name`` (its inventory name, SSH address or Ray address); the head for None."""
        if name is None:
            return self.head
        for host in self.hosts:
            if name in (host.name, host.address, host.node_ip):
                return host
        listed = ", ".join(f"{h.name} ({h.role})" for h in self.hosts)
        raise OperateError(f"{self.path}: no host {name!r}; its hosts are {listed}", EXIT_USAGE)


def _pyinfra_hosts(path: str) -> list[dict[str, Any]]:
    """``[{name, groups, data}]`` as pyinfra loads the inventory, group data included."""
    command = [sys.executable, "-m", "pyinfra", str(Path(path).resolve()), "debug-inventory", "--json"]
    try:
        result = subprocess.run(
            command, cwd=repo_root(), capture_output=True, text=True, timeout=LOAD_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise OperateError(f"{path}: pyinfra did not load the inventory within {LOAD_TIMEOUT_S} s") from None
    lines = [_ANSI.sub("", line).strip() for line in (result.stdout + "\n" + result.stderr).splitlines()]
    if result.returncode != 0:
        said = [line for line in lines if line and not line.startswith("--> Loading")]
        raise OperateError(f"{path}: the inventory does not load: {said[-1] if said else '(pyinfra said nothing)'}")
    listing = [line for line in result.stdout.splitlines() if line.startswith("[")]
    try:
        hosts = json.loads(listing[-1]) if listing else None
    except ValueError:
        hosts = None
    if not isinstance(hosts, list):
        raise OperateError(
            f"{path}: pyinfra printed no inventory that rayrig can read (pyinfra debug-inventory --json)"
        )
    return hosts


def inventory_file(path: str) -> Path:
    """``path``, once it is known to be a file; else ``OperateError`` (2) naming it."""
    if not Path(path).is_file():
        raise OperateError(
            f"{path}: no such inventory file (expected a pyinfra inventory such as inventories/prod.py)", EXIT_USAGE
        )
    return Path(path)


def load_inventory(path: str) -> Inventory:
    """The hosts of the inventory file ``path``, checked as a deploy checks them.

    ``OperateError``: 2 when the file does not exist or its data is not a valid cluster
    (each problem named: host, key, value, what is expected); 1 when pyinfra cannot load it
    (the lab is not up, AWS does not answer: pyinfra's last words say why).
    """
    inventory_file(path)
    loaded = _pyinfra_hosts(path)
    if not loaded:
        raise OperateError(f"{path}: the inventory yields no host (expected at least a head)", EXIT_USAGE)
    return inventory_of(path, loaded)


def inventory_of(path: str, loaded: Sequence[Mapping[str, Any]]) -> Inventory:
    """The :class:`Inventory` of pyinfra's ``debug-inventory`` listing of ``path``."""
    problems = validate_cluster(
        (h["name"], h["data"], str(h["data"].get("ray_node_ip") or h["data"].get("ssh_hostname") or h["name"]))
        for h in loaded
    )
    if problems:
        raise OperateError(f"{path}: invalid inventory data:\n" + "\n".join(f"  - {p}" for p in problems), EXIT_USAGE)
    hosts = tuple(
        Host(name=h["name"], data=h["data"], settings=merge(h["data"]), ssh=SshSettings.from_data(h["name"], h["data"]))
        for h in loaded
    )
    return Inventory(path=path, hosts=hosts)


def _option_value(path: str) -> str:
    """A path as the value of ``ssh -o KEY=VALUE`` (which splits on blanks unless quoted)."""
    return f'"{path}"' if any(c.isspace() for c in path) else path


def ssh_argv(
    host: Host | SshSettings, remote: str | None = None, *, batch: bool = False, tty: bool = False, stdin: bool = True
) -> list[str]:
    """The ``ssh`` command line that reaches ``host`` with its inventory settings, running ``remote``
    (one shell command line, already quoted) or, without it, a login shell.

    + batch: never prompt (``BatchMode``) and give up on a silent host after ``CONNECT_TIMEOUT_S``
    + tty: ask for a terminal (``-t``): interactive programs, and Ctrl-C reaching the remote command
    + stdin: False reads nothing from this process's standard input (``-n``)

    Each host data key and what ssh gets (as pyinfra's connector reads them):
    ``ssh_config_file`` ``-F`` (instead of ~/.ssh/config, as in pyinfra; a bastion's ProxyJump
    there applies, and ssh hands ``-F`` on to the jump), ``ssh_key`` ``-i`` with
    ``IdentitiesOnly``, ``ssh_known_hosts_file`` ``UserKnownHostsFile``,
    ``ssh_strict_host_key_checking`` ``StrictHostKeyChecking`` (``no``/``off`` become
    ``accept-new``: host keys are always checked), ``ssh_port`` ``-p``, ``ssh_user`` ``-l``,
    ``ssh_forward_agent`` ``-A``, ``ssh_allow_agent = False`` ``IdentityAgent=none``,
    ``ssh_look_for_keys = False`` ``IdentitiesOnly``, ``ssh_hostname`` the host to connect to
    (else the name). Host key checking is pyinfra's ``accept-new`` when the data does not say;
    other settings the data leaves unset are left to the user's SSH configuration.
    """
    ssh = host.ssh if isinstance(host, Host) else host
    args = ["ssh"]
    if batch:
        args += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
    if tty:
        args.append("-t")
    if not stdin:
        args.append("-n")
    if ssh.config_file:
        args += ["-F", ssh.config_file]
    if ssh.key:
        args += ["-i", ssh.key, "-o", "IdentitiesOnly=yes"]
    if ssh.known_hosts_file:
        args += ["-o", f"UserKnownHostsFile={_option_value(ssh.known_hosts_file)}"]
    if ssh.strict_host_key_checking:
        args += ["-o", f"StrictHostKeyChecking={ssh.strict_host_key_checking}"]
    if ssh.port:
        args += ["-p", str(ssh.port)]
    if ssh.user:
        args += ["-l", ssh.user]
    if ssh.forward_agent:
        args.append("-A")
    if not ssh.allow_agent:
        args += ["-o", "IdentityAgent=none"]
    if not ssh.look_for_keys and not ssh.key:  # with a key, IdentitiesOnly is already set
        args += ["-o", "IdentitiesOnly=yes"]
    args += ["--", ssh.hostname]
    return [*args, remote] if remote else args


def unreachable(host: Host, inventory: str, detail: str) -> str:
    """What to say of a host that did not answer over SSH: as whom, ssh's own words, what to check."""
    said = f" ({detail})" if detail else ""
    return (
        f"unreachable over SSH as {host.ssh.where}{said}: "
        f"check that the host is up and its ssh_* settings in {inventory}"
    )
