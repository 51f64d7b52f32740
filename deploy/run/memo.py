"""Values kept for one pyinfra run: a dict per State, dropped with the State.

A deploy file is loaded once per host, and pyinfra 3 caches no fact, so what every
host's load shares (facts read, the cluster's resolved addresses, whether the
inventory was validated) lives here, keyed by the run's State. The State is held
weakly: a finished run's values go with it, and a later run (the plan tests make
many in one process) never sees them.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any

from gevent.lock import BoundedSemaphore

_RUNS: weakref.WeakKeyDictionary[Any, dict[str, dict[Any, Any]]] = weakref.WeakKeyDictionary()


def run_memo(state: Any, name: str) -> dict[Any, Any]:
    """The dict named ``name`` that belongs to the pyinfra run ``state`` (empty at first):
    ``run_memo(host.state, "facts")`` holds every fact ``deploy.run.facts.fact`` read in that run."""
    return _RUNS.setdefault(state, {}).setdefault(name, {})


def run_lock(state: Any, name: Hashable) -> BoundedSemaphore:
    """The lock named ``name`` of the run ``state``: what is read once per run and needs a host
    (a fact, the head's token) is read by one host's load while the others wait for its answer.

    pyinfra 3 loads the deploy file for every host at once, in greenlets that take turns at each
    command they wait for: without it, each of N hosts would read the same thing at the same
    time, N commands over one SSH connection, and sshd refuses more than ``MaxSessions`` (10).
    """
    locks = run_memo(state, "locks")
    if name not in locks:
        locks[name] = BoundedSemaphore()
    return locks[name]
