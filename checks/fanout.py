"""One piece of work per node, every node at once, and no waiting past a deadline.

The preflight reads every node; one after another, a slow node's seconds add up with everyone
else's. :func:`each_at_once` starts them together (threads; under pyinfra, whose ``gevent``
patches threads into greenlets, each one's connection serves them concurrently), waits until all
have answered or ``limit_s`` has passed, and hands back the answers in the order of the items,
whatever order they came in. A piece of work that has not answered by then is left behind, not
waited for: its slot says so (:data:`LATE`).

Example::

    answers = each_at_once(nodes, lambda node: node.run(command), limit_s=60)
    for node, answer in zip(nodes, answers):
        if answer.late: ...            # did not answer in 60 s
        else: answer.value             # answer.seconds: how long it took
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

MAX_WORKERS = 64  # nodes read at once; more wait for a free worker

Item = TypeVar("Item")
Value = TypeVar("Value")


@dataclass(frozen=True)
class Answer(Generic[Value]):
    """One item's outcome: its ``value``, or ``late`` (no answer in time), and the seconds it took."""

    value: Value | None = None
    late: bool = False
    seconds: float = 0.0


def each_at_once(
    items: Sequence[Item],
    work: Callable[[Item], Value],
    limit_s: float,
    max_workers: int = MAX_WORKERS,
) -> list[Answer[Value]]:
    """``work(item)`` for every item at once; the answers in the items' order, late ones marked.

    + limit_s: seconds from now after which an item still working is left behind (:data:`Answer.late`)

    The first error a piece of work raised (in the items' order) is raised here, once every other
    piece has answered or been left behind.
    """
    if not items:
        return []
    started = time.monotonic()
    seconds: dict[int, float] = {}

    def timed(index: int, item: Item) -> Value:
        try:
            return work(item)
        finally:
            seconds[index] = time.monotonic() - started

    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items))), thread_name_prefix="checks")
    try:
        futures: list[Future[Value]] = [pool.submit(timed, i, item) for i, item in enumerate(items)]
        pending = set(futures)
        while pending:
            left = limit_s - (time.monotonic() - started)
            if left <= 0:
                break
            _done, pending = wait(pending, timeout=left)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # the late ones are left behind, not joined
    answers: list[Answer[Value]] = []
    for index, future in enumerate(futures):
        if future.cancelled() or not future.done():
            answers.append(Answer(late=True, seconds=round(time.monotonic() - started, 1)))
        else:
            value = future.result()  # raises what the work raised
            answers.append(Answer(value=value, seconds=round(seconds.get(index, 0.0), 1)))
    return answers
