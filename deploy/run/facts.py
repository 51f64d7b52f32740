"""Facts rayrig reads from each host, and a per-run memo for them.

pyinfra 3 does not cache ``host.get_fact``: every call is a round trip. The
deploy reads each fact once per host and run through ``fact()``. Every fact's command
succeeds on a fresh host (a missing tool gives an empty answer, never an
error), so planning works before anything is installed.
"""

from __future__ import annotations

import json
from shlex import quote
from typing import Any

from pyinfra.api import FactBase
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments

from deploy.run.memo import run_lock, run_memo


def fact(host: Any, cls: type[FactBase], *args: Any) -> Any:
    """``host.get_fact(cls, *args)``, read once per host and deploy run."""
    memo = run_memo(host.state, "facts")
    key = (host.name, cls, args)
    if key not in memo:
        with run_lock(host.state, ("fact", key)):  # one read; the other hosts' loads wait for it
            if key not in memo:
                memo[key] = host.get_fact(cls, *args)
    return memo[key]


def read_unprinted(host: Any, command: str, reason: str) -> tuple[bool, list[str], list[str]]:
    """Run ``command`` on ``host`` as the deploy's operations run (through sudo when they do) and
    return (whether it succeeded, its stdout lines, its stderr lines), its output never printed nor
    logged: for what holds a secret, which a fact would show with ``-vvv``. The command (which must
    hold no secret) is shown as a fact's is, with ``-vv``. ``reason``: why, should it have to connect.
    """
    if not host.connected:
        host.connect(reason=reason, raise_exceptions=True)
    arguments, _ = pop_global_arguments(host.state, host, {})
    connector_arguments = {key: value for key, value in arguments.items() if key in CONNECTOR_ARGUMENT_KEYS}
    ok, output = host.run_shell_command(
        command, print_output=False, print_input=host.state.print_fact_input, **connector_arguments
    )
    return ok, [line.strip() for line in output.stdout_lines], list(output.stderr_lines)


def unprinted_file_command(folder: str, path: str, follows: str, missing: str) -> str:
    """A command that prints ``follows`` then the file at ``path``, or ``missing`` when there is none; a
    ``folder`` it may not look into (no sudo) is an error, not "missing". For :func:`read_unprinted_file`."""
    return (
        f"if [ -e {folder} ] && ! [ -x {folder} ]; "
        f"then echo 'cannot look into {folder}: not root and no sudo' >&2; exit 1; fi; "
        f"if [ -f {path} ]; then echo {follows} && cat {path}; else echo {missing}; fi"
    )


def read_unprinted_file(
    host: Any, command: str, markers: tuple[str, str], what: str, path: str, error: type[Exception]
) -> str | None:
    """The file an :func:`unprinted_file_command` (``markers``: its follows and missing lines) read on
    ``host``, None when there is none; ``error`` naming ``what`` and ``path`` when it could not be read."""
    follows, missing = markers
    ok, lines, stderr = read_unprinted(host, command, f"to read {what}")
    if not ok or not (follows in lines or missing in lines):
        detail = " ".join(stderr)[-300:] or f"exit status not 0, no {follows!r} or {missing!r} line"
        raise error(
            f"host {host.name}: could not read {what} ({path}) through sudo: {detail}. Nothing was changed on any host."
        )
    return None if missing in lines else "".join(lines[lines.index(follows) + 1 :])


def _parse_os_release(lines: list[str]) -> dict[str, str]:
    values = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values


class HostInfo(FactBase):
    """OS identity, CPU architecture, memory and the open-files hard limit.

    Returns ``{"id": "ubuntu", "id_like": "debian", "version_id": "22.04",
    "codename": "jammy", "arch": "x86_64", "mem_bytes": ..., "nofile_hard": ...}``.
    """

    @staticmethod
    def default() -> dict[str, Any]:
        return {"id": "", "id_like": "", "version_id": "", "codename": "", "arch": "",
                "mem_bytes": None, "nofile_hard": None}  # fmt: skip

    def command(self) -> str:
        return (
            "cat /etc/os-release 2>/dev/null; "
            'echo "RAYRIG_ARCH=$(uname -m)"; '
            "echo \"RAYRIG_MEM_KB=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)\"; "
            'echo "RAYRIG_NOFILE_HARD=$(ulimit -Hn)"'
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        values = _parse_os_release(output)
        nofile = values.get("RAYRIG_NOFILE_HARD", "")
        mem_kb = values.get("RAYRIG_MEM_KB", "")
        return {
            "id": values.get("ID", "").lower(),
            "id_like": values.get("ID_LIKE", "").lower(),
            "version_id": values.get("VERSION_ID", ""),
            "codename": values.get("VERSION_CODENAME", "") or values.get("UBUNTU_CODENAME", ""),
            "arch": values.get("RAYRIG_ARCH", ""),
            "mem_bytes": int(mem_kb) * 1024 if mem_kb.isdigit() else None,
            "nofile_hard": int(nofile) if nofile.isdigit() else None,  # "unlimited" -> None
        }


class CloudInitRunning(FactBase):
    """Whether cloud-init is installed and still running its first boot."""

    @staticmethod
    def default() -> bool:
        return False

    def command(self) -> str:
        return "command -v cloud-init >/dev/null 2>&1 && cloud-init status 2>/dev/null || true"

    def process(self, output: list[str]) -> bool:
        text = " ".join(output)
        return "status: running" in text or "status: not started" in text


class FileText(FactBase):
    """The text of a file, or None when it does not exist."""

    def command(self, path: str) -> str:
        return f"if [ -f {quote(path)} ]; then echo EXISTS; cat {quote(path)}; else echo ABSENT; fi"

    def process(self, output: list[str]) -> str | None:
        if not output or output[0] != "EXISTS":
            return None
        return "\n".join(output[1:])


class SecretFileDigest(FactBase):
    """What the deploy compares of a file that holds a secret, and nothing a reader of ``-vvv`` could
    test a guess against: the sha256 of ``key_path``'s content followed by the file's (a key of the
    cluster's, root-only on the host), and the file's mode.

    Returns ``{"folder": True, "mode": 600, "digest": "<64 hex>"}``: ``mode`` None when the file is
    absent, ``digest`` None as well or when the host has no key, ``folder`` False when the file's
    folder is absent. The key and the secret are read by ``cat`` on the host: neither is on a command
    line nor in the output. (pyinfra's ``Sha1File``, which ``files.put`` reads, prints the file's plain
    sha1: enough to test guesses of a weak password offline.)
    """

    def command(self, path: str, key_path: str) -> str:
        return (
            f"f={quote(path)}; k={quote(key_path)}; "
            'if [ ! -d "$(dirname "$f")" ]; then echo NO_FOLDER; '
            'elif [ ! -f "$f" ]; then echo ABSENT; '
            'else echo "MODE=$(stat -c %a "$f")"; '
            '[ -f "$k" ] && echo "DIGEST=$(cat "$k" "$f" | sha256sum | cut -c1-64)"; true; fi'
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"folder": True, "mode": None, "digest": None}

    def process(self, output: list[str]) -> dict[str, Any]:
        values = dict(line.partition("=")[::2] for line in output if "=" in line)
        mode = values.get("MODE", "").strip()
        return {
            "folder": "NO_FOLDER" not in output,
            "mode": int(mode) if mode.isdigit() else None,
            "digest": values.get("DIGEST", "").strip() or None,
        }


class DockerImageId(FactBase):
    """The local id of an image reference, or None when absent (or no Docker)."""

    def command(self, ref: str) -> str:
        return (
            "command -v docker >/dev/null 2>&1 && "
            f"docker image inspect --format '{{{{.Id}}}}' {quote(ref)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        ids = [line.strip() for line in output if line.strip().startswith("sha256:")]
        return ids[0] if ids else None


#: The fields of ``docker container inspect`` that :class:`ContainerState` reads, and no other: the whole
#: document holds the container's environment (``ray_env_secret``'s values), which pyinfra prints with
#: ``-vvv`` as a fact's output.
CONTAINER_STATE_FORMAT = (
    '{"Id":{{json .Id}},"Image":{{json .Image}},'
    '"State":{"Running":{{json .State.Running}},"Restarting":{{json .State.Restarting}}},'
    '"Config":{"Image":{{json .Config.Image}},"Labels":{{json .Config.Labels}}}}'
)


class ContainerState(FactBase):
    """A container's id, image (as named, and the id it was created from), running state and labels,
    or None when absent. It asks Docker for those fields alone (:data:`CONTAINER_STATE_FORMAT`)."""

    def command(self, container: str) -> str:
        return (
            "command -v docker >/dev/null 2>&1 && "
            f"docker container inspect --format {quote(CONTAINER_STATE_FORMAT)} {quote(container)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> dict[str, Any] | None:
        text = "\n".join(output).strip()
        if not text.startswith("{"):
            return None
        data = json.loads(text)
        state = data.get("State") or {}
        config = data.get("Config") or {}
        return {
            "id": data.get("Id", ""),
            "running": bool(state.get("Running")),
            "restarting": bool(state.get("Restarting")),
            "image": config.get("Image", ""),
            "image_id": data.get("Image", ""),
            "labels": config.get("Labels") or {},
        }


class NvidiaDevices(FactBase):
    """NVIDIA devices on the PCI bus, and what the driver reports about the GPUs.

    Returns ``{"pci_count": 8, "nvswitches": 4, "driver": {"count": 8, "models": [...],
    "driver_version": "550.54.15", "memory_mib": [...]} or None}``. ``pci_count``: the
    GPUs (PCI class 0x0300 VGA or 0x0302 3D controller, vendor 0x10de); ``nvswitches``:
    the NVSwitch chips of HGX/DGX boards (class 0x0680 bridge), which need
    nvidia-fabricmanager; ``driver``: None when nvidia-smi is missing or fails (no
    working driver).
    """

    @staticmethod
    def default() -> dict[str, Any]:
        return {"pci_count": 0, "nvswitches": 0, "driver": None}

    def command(self) -> str:
        return (
            "n=0; s=0; for d in /sys/bus/pci/devices/*; do "
            '[ -r "$d/vendor" ] || continue; '
            '[ "$(cat "$d/vendor")" = 0x10de ] || continue; '
            'case "$(cat "$d/class")" in 0x0300*|0x0302*) n=$((n+1));; 0x0680*) s=$((s+1));; esac; done; '
            'echo "PCI_GPUS=$n"; echo "NVSWITCHES=$s"; '
            "if command -v nvidia-smi >/dev/null 2>&1; then "
            "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits "
            "2>/dev/null | sed 's/^/GPU=/' || echo SMI_FAILED; fi"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        counts = {"PCI_GPUS": 0, "NVSWITCHES": 0}
        gpus = []
        failed = False
        for line in output:
            key, sep, value = line.partition("=")
            if sep and key in counts:
                counts[key] = int(value.strip()) if value.strip().isdigit() else 0
            elif line.startswith("GPU="):
                parts = [p.strip() for p in line[4:].split(",")]
                if len(parts) >= 3:
                    gpus.append(parts)
            elif line.strip() == "SMI_FAILED":
                failed = True
        driver = None
        if gpus and not failed:
            driver = {
                "count": len(gpus),
                "models": [g[0] for g in gpus],
                "driver_version": gpus[0][1],
                "memory_mib": [int(g[2]) if g[2].isdigit() else None for g in gpus],
            }
        return {"pci_count": counts["PCI_GPUS"], "nvswitches": counts["NVSWITCHES"], "driver": driver}
