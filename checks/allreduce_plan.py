"""The all-reduce's bookkeeping, without Ray or torch: which GPUs each rank sees, how long each
step may take, and which ranks held a collective up.

- :func:`visible_devices`: what Ray Train does for its GPU workers, so NCCL can use P2P/NVLink
  between the GPUs of one node;
- :func:`setup_deadline` and :func:`size_deadline`: the deadline rules of :mod:`checks.allreduce`;
- :func:`stuck_ranks`: from each rank's progress answer (or none), the ranks a hung collective
  waits for;
- :func:`hung_summary`: the words the verdict uses for them.

Example::

    visible_devices([("node-a", 2), ("node-a", 5), ("node-b", 0)])
    # [("2,5", 0), ("2,5", 1), ("0", 0)]
"""

from __future__ import annotations

from typing import Any

from .deadlines import BUDGET_SOURCE

FLOOR_S = 30.0  # the shortest deadline of one size: setup (actor start, torch import) dwarfs a 1 MiB all-reduce
PROGRESS_TIMEOUT_S = 5.0  # how long a rank may take to say how far it got, once a deadline has passed
SETUP_SOURCE = "checks_node_timeout_s: starting the ranks and their process group"
CAP_SOURCE = "checks_node_timeout_s, the longest one size may take"
FIRST_SOURCE = "checks_peer_timeout_factor x the process group's setup time (at least {floor:g} s)"
NEXT_SOURCE = "checks_peer_timeout_factor x twice the previous size's time (at least {floor:g} s)"
NO_ANSWER, WAITING = "no answer", "waiting for peers"


def visible_devices(placement: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """For each rank, given as (node id, the GPU id Ray gave it): the CUDA_VISIBLE_DEVICES it must
    use (every GPU id the ranks of its node hold, sorted) and the index of its own GPU in that list.

    Ray gives each GPU actor only its own GPU; Ray Train widens that to the node's union before
    CUDA starts, so that NCCL sees its peers on the node and uses P2P/NVLink rather than host
    memory (ray/train/v2/_internal/callbacks/accelerators.py: ``_share_cuda_visible_devices`` and
    ``_get_visible_accelerator_ids_per_worker``; ray/train/_internal/backend_executor.py on v1).

    >>> visible_devices([("a", 3), ("a", 1), ("b", 0)])
    [('1,3', 1), ('1,3', 0), ('0', 0)]
    """
    per_node: dict[str, set[int]] = {}
    for node, gpu in placement:
        per_node.setdefault(node, set()).add(gpu)
    shared = {node: sorted(gpus) for node, gpus in per_node.items()}
    return [(",".join(str(g) for g in shared[node]), shared[node].index(gpu)) for node, gpu in placement]


def setup_deadline(cap_s: float, budget_left_s: float | None) -> tuple[float, str]:
    """Seconds the ranks may take to start and join their process group, and where that comes from."""
    if budget_left_s is not None and budget_left_s < cap_s:
        return budget_left_s, BUDGET_SOURCE
    return float(cap_s), SETUP_SOURCE


def size_deadline(
    basis_s: float, first: bool, factor: float, cap_s: float, budget_left_s: float | None, floor_s: float = FLOOR_S
) -> tuple[float, str]:
    """Seconds one size may take, and where that comes from.

    The first size: ``factor`` x the setup's seconds (``basis_s``); a later one: ``factor`` x twice
    the previous size's seconds (the message doubles); never under ``floor_s``, never over the
    cap, nor over what is left of the run's budget.

    >>> size_deadline(4.0, True, 3, 600, None)
    (30.0, "checks_peer_timeout_factor x the process group's setup time (at least 30 s)")
    >>> size_deadline(20.0, False, 3, 600, 100.0)[0]
    100.0
    """
    by_peers = max(floor_s, factor * basis_s * (1 if first else 2))
    source = (FIRST_SOURCE if first else NEXT_SOURCE).format(floor=floor_s)
    deadline, source = (by_peers, source) if by_peers <= cap_s else (float(cap_s), CAP_SOURCE)
    if budget_left_s is not None and budget_left_s < deadline:
        return budget_left_s, BUDGET_SOURCE
    return deadline, source


def stuck_ranks(ranks: list[dict[str, Any]], answers: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Each rank (``{"rank", "host", "ip", "node_id"}``) with its state in a hung collective.

    ``answers[i]`` is rank i's progress (``{"bytes", "entered", "completed", "calls", "total"}``:
    the all-reduce calls entered and completed at the current size, how many that size makes,
    and the calls entered since the start), or None when it did not answer. A hung collective
    blocks every rank, the healthy ones waiting for the stuck ones; the stuck ones are those that
    did not answer (a frozen node: its processes and raylet stop) or, when all answered, those
    furthest behind. When every rank stands at the same call, none is behind: they all are named.

    >>> ranks = [{"rank": 0}, {"rank": 1}]
    >>> [r["state"] for r in stuck_ranks(ranks, [{"total": 9}, None])]
    ['waiting for peers', 'no answer']
    """
    out = [dict(rank) for rank in ranks]
    if any(answer is None for answer in answers):
        for entry, answer in zip(out, answers, strict=True):
            entry["state"] = NO_ANSWER if answer is None else WAITING
        return out
    least = min(answer["total"] for answer in answers if answer)
    everyone_level = all(answer and answer["total"] == least for answer in answers)
    for entry, answer in zip(out, answers, strict=True):
        assert answer is not None
        behind = f"behind: entered {answer['entered']} of {answer['calls']} calls"
        if everyone_level:
            entry["state"] = f"stuck: entered {answer['entered']} of {answer['calls']} calls, as did every rank"
        else:
            entry["state"] = behind if answer["total"] == least else WAITING
    return out


def host_words(entry: dict[str, Any]) -> str:
    """A rank's host, with " (ip)" when the IP is known and differs from it."""
    host, ip = entry.get("host") or "?", entry.get("ip")
    return f"{host} ({ip})" if ip and ip != host else host


def _size_words(nbytes: int | None) -> str:
    if nbytes is None:
        return "setup (starting the ranks and their process group)"
    if nbytes >= 2**20:
        return f"at {nbytes / 2**20:g} MiB"
    return f"at {nbytes / 2**10:g} KiB" if nbytes >= 2**10 else f"at {nbytes} bytes"


def _rank_words(entry: dict[str, Any]) -> str:
    state = entry.get("state", "")
    if state == NO_ANSWER:
        return f"rank {entry['rank']} did not answer"
    if state.startswith("behind: "):
        return f"rank {entry['rank']} was behind ({state.removeprefix('behind: ')})"
    return f"rank {entry['rank']} ({state})"


def hung_summary(hung: dict[str, Any]) -> list[tuple[str, str]]:
    """(host, message) per host whose ranks held the collective up, for the verdict.

    >>> hung = {"bytes": 4 * 2**20, "waited_s": 31.2, "ranks": [
    ...     {"rank": 0, "host": "lab-1", "ip": "10.0.0.1", "state": "waiting for peers"},
    ...     {"rank": 2, "host": "lab-3", "ip": "10.0.0.3", "state": "no answer"}]}
    >>> hung_summary(hung)
    [('lab-3', 'all-reduce at 4 MiB did not finish in 31 s: lab-3 (10.0.0.3) rank 2 did not answer; the other ranks waited for it')]
    """  # noqa: E501
    ranks = hung.get("ranks") or []
    stuck = [r for r in ranks if r.get("state") != WAITING] or ranks
    waiting = len(stuck) < len(ranks)
    hosts: dict[str, list[dict[str, Any]]] = {}
    for entry in stuck:
        hosts.setdefault(entry.get("host") or "?", []).append(entry)
    head = f"all-reduce {_size_words(hung.get('bytes'))} did not finish in {hung.get('waited_s', 0):.0f} s"
    out = []
    for host, entries in hosts.items():
        label = host_words(entries[0])
        said = ", ".join(_rank_words(e) for e in entries)
        tail = f"; the other ranks waited for {'it' if len(stuck) == 1 else 'them'}" if waiting else ""
        out.append((host, f"{head}: {label} {said}{tail}"))
    return out
