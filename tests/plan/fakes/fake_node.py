"""A host's ``docker``, ``systemctl`` and ``chown``, faked in a folder, to run a ray-node replacement on.

``FakeNode(folder)`` writes two small scripts first on ``PATH``. They keep each container as
a file (its ``docker create`` arguments), which container the unit runs, and a log of every
call; nothing touches Docker or systemd. A container's node joins the cluster (the
replacement's ``docker exec NAME python ...`` succeeds) while the unit runs it, unless its
arguments contain ``refuse``: then Ray refuses it, and its log is ``refused_log``. The host
has one image (``docker image inspect`` answers its id, ``IMAGE_ID`` until ``pull`` changes it),
and each container remembers the image id it was created from.

    node = FakeNode(tmp_path, refuse="--num-cpus=1.5")
    node.add("ray-node", "docker create --name=ray-node old", running=True)
    result = node.run(command)
    node.containers()  # {"ray-node": "docker create --name=ray-node old"}
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.plan.fakes.fake_ray_container import IMAGE_ID

RAY_ERROR = "ValueError: The requested object store memory size is greater than the total available memory."
REFUSED_LOG = f"""Usage stats collection is disabled.
Traceback (most recent call last):
  File "ray/scripts/scripts.py", line 1, in start
{RAY_ERROR}
"""

DOCKER = r"""#!/bin/bash
state=__STATE__
echo "docker $*" >>"$state/calls"
c=$state/containers
i=$state/image-of
case $1 in
  image) cat "$state/image-id" 2>/dev/null ;;
  run) echo 0 ;;  # docker run --rm ... --entrypoint id IMAGE -u: the image's user is root
  container)
    [ -f "$c/${!#}" ] || exit 1
    if [ "$3" = --format ]; then cat "$i/${!#}"; fi ;;
  rename) [ -f "$c/$2" ] && [ ! -f "$c/$3" ] && mv "$c/$2" "$c/$3" && mv "$i/$2" "$i/$3" ;;
  stop) [ -f "$c/${!#}" ] ;;
  rm) rm -f "$c/${!#}" "$i/${!#}" ;;
  create)
    for a in "$@"; do case $a in --name=*) name=${a#--name=} ;; esac; done
    if [ -f "$c/$name" ]; then echo "docker: Error response from daemon: Conflict. $name is in use" >&2; exit 125; fi
    if [ -n "__BAD_CREATE__" ] && [[ "$*" == *"__BAD_CREATE__"* ]]; then
      echo "docker: Error response from daemon: invalid argument" >&2; exit 125
    fi
    echo "docker $*" >"$c/$name"
    cp "$state/image-id" "$i/$name" ;;
  exec)
    [ "$(cat "$state/running" 2>/dev/null)" = "$2" ] || exit 1
    ! { [ -n "__REFUSE__" ] && grep -qF -- "__REFUSE__" "$c/$2"; } ;;
  logs)
    if [ -n "__REFUSE__" ] && grep -qF -- "__REFUSE__" "$c/${!#}"; then
      cat "$state/refused.log"
    else
      echo "Usage stats collection is disabled."
      echo "Ray runtime started."
    fi ;;
  *) echo "fake docker: unexpected $*" >&2; exit 2 ;;
esac
"""

CHOWN = r"""#!/bin/bash
echo "chown $*" >>__STATE__/calls
"""

SYSTEMCTL = r"""#!/bin/bash
state=__STATE__
echo "systemctl $*" >>"$state/calls"
case $1 in
  stop) rm -f "$state/running" ;;
  start) [ -f "$state/containers/${2%.service}" ] && echo "${2%.service}" >"$state/running" ;;
  enable|daemon-reload) ;;
  *) echo "fake systemctl: unexpected $*" >&2; exit 2 ;;
esac
"""


#: The calls of a replacement that joins, in the order they must happen.
REPLACEMENT_STEPS = (
    "systemctl stop ray-node.service",
    "docker rename ray-node ray-node-previous",
    "docker create ",
    "systemctl start ray-node.service",
    "docker exec ray-node python",
    "docker rm --force ray-node-previous",
)


def first_calls(calls: list[str], *prefixes: str) -> list[int]:
    """Where a call starting with each prefix first happens (each must happen)."""
    found = []
    for prefix in prefixes:
        at = [i for i, call in enumerate(calls) if call.startswith(prefix)]
        assert at, f"no {prefix!r} in {calls}"
        found.append(at[0])
    return found


class FakeNode:
    """A fake host's containers and ray-node unit, in ``folder``."""

    def __init__(self, folder: Path, *, refuse: str = "", bad_create: str = "", refused_log: str = REFUSED_LOG):
        self.state = folder / "state"
        (self.state / "containers").mkdir(parents=True)
        (self.state / "image-of").mkdir()
        (self.state / "calls").touch()
        self.pull(IMAGE_ID)
        self.bin = folder / "bin"
        self.bin.mkdir()
        (self.state / "refused.log").write_text(refused_log)
        values = {"__STATE__": str(self.state), "__REFUSE__": refuse, "__BAD_CREATE__": bad_create}
        for name, text in (("docker", DOCKER), ("systemctl", SYSTEMCTL), ("chown", CHOWN)):
            for key, value in values.items():
                text = text.replace(key, value)
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)

    def pull(self, image_id: str) -> None:
        """The image now has the id ``image_id`` (a pull brought a new one)."""
        (self.state / "image-id").write_text(image_id + "\n")

    def add(self, name: str, create: str, *, running: bool = False, image_id: str = IMAGE_ID) -> None:
        """A container that is already there (``running``: under the unit), created from ``image_id``."""
        (self.state / "containers" / name).write_text(create + "\n")
        (self.state / "image-of" / name).write_text(image_id + "\n")
        if running:
            (self.state / "running").write_text(name + "\n")

    def run(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a shell command line on the fake host, its docker and systemctl first on PATH."""
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}"}
        return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=timeout)

    def image_of(self, name: str) -> str:
        """The image id container ``name`` was created from."""
        return (self.state / "image-of" / name).read_text().strip()

    def containers(self) -> dict[str, str]:
        """name -> the command that created it, for every container there."""
        return {p.name: p.read_text().strip() for p in (self.state / "containers").iterdir()}

    def running(self) -> str | None:
        """The container the unit runs, if it runs."""
        path = self.state / "running"
        return path.read_text().strip() if path.exists() else None

    def calls(self) -> list[str]:
        """Every docker, systemctl and chown call, in order."""
        return (self.state / "calls").read_text().splitlines()
