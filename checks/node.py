"""The one thing the checks need from a cluster member: a way to run commands and move files.

The checks never connect to anything themselves. Whoever drives them (the deploy,
over the connections pyinfra holds; a test, with a fake) hands them one
:class:`Node` per inventory host.

Example::

    ok, lines = node.run("docker inspect --format '{{.State.Running}}' ray-node")
    node.put_file(io.BytesIO(b"..."), f"{private_dir}/checks.tgz")   # a directory made with mktemp -d
    if node.get_file(f"{private_dir}/report.json", local_path): ...
"""

from __future__ import annotations

from typing import IO, Protocol


class Node(Protocol):
    """A cluster member the checks can reach.

    + name: the inventory's name for the host (what every message says)
    + address: the address Ray knows the node by (its ``NodeManagerAddress``)
    """

    name: str
    address: str

    def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        """Run a shell command (with the privileges the deploy uses); its success and its stdout lines.

        ``print_output`` streams the output to the operator as it comes (the benchmark's progress).
        """
        ...

    def put_file(self, source: IO[bytes], remote_path: str) -> bool:
        """Write ``source``'s bytes to ``remote_path``; True when it worked."""
        ...

    def get_file(self, remote_path: str, local_path: str) -> bool:
        """Copy ``remote_path`` to ``local_path`` on this machine; True when it worked."""
        ...
