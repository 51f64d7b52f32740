"""Rolling replacement of ray-node: the head first, then the workers in batches.

A change that replaces ray-node on many hosts (a new ``ray_image``, Ray version,
shared-memory size, token...) never takes the whole cluster down at once. The
head is replaced first; then the workers whose container must be replaced go in
batches of ``ray_rolling_batch`` (a number of workers, or a percentage of the
inventory's workers such as ``"25%"``, rounded down, at least 1), in inventory
order. Workers that have no ray-node container yet (new hosts) lose nothing
while they start, so they all go in the first batch. Hosts whose container is
already current are in no batch; a converged run plans none.

Each batch is one pyinfra operation: pyinfra runs an operation on every host
before it starts the next, and each host's replacement command returns only once
its new node has joined the cluster (or its previous container is back), so a
batch has rejoined before the next starts. If any host fails in the head's steps
or in a batch, ``RollingGate`` stops the deploy right after that operation: no
later batch is touched, and the error says which hosts run which configuration
(image and configuration hash).

This relies on pyinfra's default execution, operation by operation; ``--serial``
and ``--no-wait`` run each host's operations on their own and lose the batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.state import BaseStateCallback

from deploy.run.memo import run_memo

#: How many host names an operation's name lists before it says "and N more".
NAMES_SHOWN = 5


class RollingStopped(PyinfraError):
    """A step of the rolling replacement failed; the later batches were not started."""


@dataclass(frozen=True)
class Node:
    """A host's ray-node as this run finds and wants it."""

    name: str
    role: str  # "head" or "worker"
    running: str | None  # the running container's configuration ("IMAGE, config HASH"), None without one
    wanted: str  # the configuration this run gives it
    replace: bool  # whether this run creates or replaces its container
    if_new_image: bool = False  # replaced only if this run's pull brings another image (ray_image_pull)

    @property
    def new(self) -> bool:
        """Whether the host has no ray-node container yet (nothing to lose while it starts)."""
        return self.running is None


def version(image: str, config_hash: str | None) -> str:
    """How the summary names a container's configuration.

    >>> version("rayproject/ray:2.60.0", "0123abcd0123abcd")
    'rayproject/ray:2.60.0, config 0123abcd0123abcd'
    """
    return f"{image}, config {config_hash or 'unknown'}"


def batch_size(setting: int | str, workers: int) -> int:
    """How many workers ``ray_rolling_batch`` replaces at once: the number, or the
    percentage of ``workers`` rounded down, and at least 1.

    >>> batch_size(2, 10), batch_size("25%", 10), batch_size("25%", 3), batch_size("100%", 7)
    (2, 2, 1, 7)
    """
    if isinstance(setting, str):
        percent = int(setting.rstrip("%"))
        return max(1, workers * percent // 100)
    return max(1, int(setting))


def worker_batches(nodes: Sequence[Node], size: int) -> list[list[str]]:
    """The workers to create or replace, in batches, in the order of ``nodes`` (the
    inventory's): the new hosts together first, then the others ``size`` at a time.

    >>> w = [Node(n, "worker", r, "b", True) for n, r in (("a", None), ("b", "x"), ("c", "x"), ("d", None))]
    >>> worker_batches(w, 1)
    [['a', 'd'], ['b'], ['c']]
    """
    workers = [n for n in nodes if n.role == "worker" and n.replace]
    new = [n.name for n in workers if n.new]
    old = [n.name for n in workers if not n.new]
    batches = [new] if new else []
    return batches + [old[i : i + size] for i in range(0, len(old), size)]


def names(hosts: Sequence[str]) -> str:
    """Host names for an operation's name: the first few, then how many more.

    >>> names(["a", "b"]), names([str(i) for i in range(7)])
    ('a, b', '0, 1, 2, 3, 4 and 2 more')
    """
    shown = ", ".join(hosts[:NAMES_SHOWN])
    return shown if len(hosts) <= NAMES_SHOWN else f"{shown} and {len(hosts) - NAMES_SHOWN} more"


def batch_step_name(index: int, batches: Sequence[Sequence[str]]) -> str:
    """The name of batch ``index``'s operation.

    >>> batch_step_name(1, [["a"], ["b", "c"]])
    'Start the Ray worker container, batch 2 of 2: b, c'
    """
    return f"Start the Ray worker container, batch {index + 1} of {len(batches)}: {names(batches[index])}"


def summary(nodes: Sequence[Node], done: set[str], failed: Sequence[str], stopped_at: str) -> str:
    """Which hosts run which configuration when the rolling replacement stops at ``stopped_at``."""
    lines = [f"The rolling replacement of ray-node stopped at {stopped_at}: {', '.join(failed)} failed; "
             "no later batch was started."]  # fmt: skip
    groups: dict[str, list[str]] = {}
    for node in nodes:
        if node.name in failed:
            what = (
                f"failed; its error above says whether its previous container is back ({node.running})"
                if node.running
                else "failed; it had no previous container"
            )
        elif node.name in done or not node.replace:
            what = f"on the new configuration ({node.wanted})"
        else:
            what = f"not replaced yet ({node.running or 'no container yet'})"
        groups.setdefault(what, []).append(node.name)
    lines += [f"  {what}: {', '.join(hosts)}" for what, hosts in groups.items()]
    return "\n".join(lines)


@contextlib.contextmanager
def own_slot(current_host: Any, index: int) -> Iterator[None]:
    """Operations called inside get an operation of their own for ``index`` (a batch):
    hosts of the same batch share it, other batches come after it, in index order.

    pyinfra's ``host.loop`` does the same for loops; a host here calls only its own batch.
    """
    current_host.loop_position.append(index)
    try:
        yield
    finally:
        current_host.loop_position.pop()


class RollingGate(BaseStateCallback):
    """Stops the deploy after an operation in which a rolling step failed on some host.

    pyinfra drops a failed host and goes on with the others, which would start the
    next batch; raising here, once the operation has ended on every host, stops the run.
    """

    def __init__(self, nodes: Sequence[Node]):
        self.nodes = list(nodes)
        self.steps: dict[str, list[tuple[Any, str]]] = {}  # host name -> (operation meta, step name)

    def watch(self, host_name: str, meta: Any, step: str) -> None:
        """Make a failure of ``meta`` (an operation of ``host_name``) stop the deploy."""
        self.steps.setdefault(host_name, []).append((meta, step))

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        failed, stopped_at = [], ""
        for current in state.inventory:
            data = state.ops.get(current, {}).get(op_hash)
            for meta, step in self.steps.get(current.name, []):
                if data is not None and data.operation_meta is meta and meta.is_complete() and not meta.did_succeed():
                    failed.append(current.name)
                    stopped_at = step
        if failed:
            done = {name for name, steps in self.steps.items() if all(m.is_complete() for m, _s in steps)}
            raise RollingStopped(summary(self.nodes, done - set(failed), failed, stopped_at))


def gate(state: Any, nodes: Sequence[Node]) -> RollingGate:
    """The run's ``RollingGate``, registered with pyinfra the first time it is asked for."""
    memo = run_memo(state, "rolling")
    if "gate" not in memo:
        memo["gate"] = RollingGate(nodes)
        state.add_callback_handler(memo["gate"])
    return memo["gate"]
