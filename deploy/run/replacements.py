"""Which hosts this run creates or replaces a ray-node container on.

The deploy notes each replacement where it plans one (:func:`note_replacement`, in
``deploy/ray/ray_node.py``); the post-deploy checks read the list once every host has
finished (:func:`replaced_hosts`) and run the benchmark only when it is not empty
(``checks_mode = "auto"``). Kept per run in :mod:`deploy.run.memo`, so a later run starts empty.

Example::

    note_replacement(host.state, host.name)
    replaced_hosts(state)   # ["10.0.0.2"]: the hosts, in the order their replacements were planned
"""

from __future__ import annotations

from typing import Any

from deploy.run.memo import run_memo


def note_replacement(state: Any, host_name: str) -> None:
    """Record that this run creates or replaces ``host_name``'s ray-node container."""
    run_memo(state, "replacements")[host_name] = True


def replaced_hosts(state: Any) -> list[str]:
    """The hosts whose ray-node container this run creates or replaces, in the order they were noted."""
    return list(run_memo(state, "replacements"))
