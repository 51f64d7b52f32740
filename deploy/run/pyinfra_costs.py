"""Two of pyinfra's costs per operation, paid once per frame or once per run instead.

pyinfra 3.10 orders the operations of a CLI run by the line numbers of the calls that led to
each (``pyinfra.api.util.get_operation_order_from_stack``). It walks ``inspect.stack()`` and
calls ``inspect.getframeinfo`` on every frame again; each of those reads the frame's source
line and searches ``sys.modules`` for its module, so an operation costs more with every module
imported (boto3, jsonschema and Ray's client bring thousands). The line numbers are on the
frames: :func:`operation_order` reads them there and returns the same list. pyinfra also
evaluates the type hints of its ~30 global arguments for every operation
(``all_global_arguments``); they do not change while a process lives.

:func:`install` puts both in place only over the functions they were written against (the
digests of their source in :data:`WRITTEN_FOR`, the locked pyinfra's); any other pyinfra keeps
its own, slower and the same. ``tests/plan/test_plan_operation_order.py`` compares the two
orders for every operation of whole deploys. Measured: ``docs/design/pyinfra-costs.md``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import sys
from typing import Any

import pyinfra

# the modules, not what pyinfra.api exports under their names (``operation`` is the decorator)
arguments, facts, operation, util = (
    importlib.import_module(f"pyinfra.api.{name}") for name in ("arguments", "facts", "operation", "util")
)

#: sha256 of the source of each function replaced, as pyinfra 3.10.0 has it.
WRITTEN_FOR = {
    "get_operation_order_from_stack": "f4807f61585570e091fd453c7552d9e2b49329555f07f395a8e8f1d2a398a0b2",
    "all_global_arguments": "f7afbc472d78c5d2f0bb282994175647651e888543da001968d903cc4a26a5a1",
}


def operation_order(state: Any) -> list[int]:
    """pyinfra's order key for the operation being called: the line numbers of the calls, from the
    deploy file that is running down to the operation, leaving out pyinfra's own frames."""
    frames = []
    frame = sys._getframe(1)  # the caller: pyinfra's, left out like the frame pyinfra's own starts at
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    start = 0
    if state.current_deploy_filename:
        for start, frame in enumerate(frames):  # noqa: B007 (the last one when none matches, as pyinfra's)
            if frame.f_code.co_filename == state.current_deploy_filename:
                break
    lines = [state.current_op_file_number] if pyinfra.is_cli else []
    lines += [f.f_lineno for f in frames[start:] if not f.f_code.co_filename.startswith(util.PYINFRA_INSTALL_DIR)]
    return lines


@functools.cache
def _global_arguments() -> tuple[tuple[str, type], ...]:
    return tuple(ORIGINALS["all_global_arguments"]())


def all_global_arguments() -> list[tuple[str, type]]:
    """pyinfra's global arguments and their types, evaluated once."""
    return list(_global_arguments())


ORIGINALS = {
    "get_operation_order_from_stack": util.get_operation_order_from_stack,
    "all_global_arguments": arguments.all_global_arguments,
}


def source_digest(function: Any) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


@functools.cache
def matches(name: str) -> bool:
    """Whether the installed pyinfra's ``name`` is the one this module was written against."""
    return source_digest(ORIGINALS[name]) == WRITTEN_FOR[name]


def install() -> list[str]:
    """Put the faster functions in place of pyinfra's where those are the ones they were written
    against, and return the names of those now in place. Idempotent; a function someone else put
    in pyinfra's place (a test's) is left alone."""
    slots = {
        "get_operation_order_from_stack": ((util, operation), operation_order),
        "all_global_arguments": ((arguments, facts), all_global_arguments),
    }
    in_place = []
    for name, (modules, ours) in slots.items():
        current = getattr(modules[-1], name)
        if current is ORIGINALS[name] and matches(name):
            for module in modules:
                setattr(module, name, ours)
            current = ours
        if current is ours:
            in_place.append(name)
    return in_place
