"""Values kept for one pyinfra run: a dict per State, dropped with the State.

A deploy file is loaded once per host, and pyinfra 3 caches no fact, so what every
host's load shares (facts read, the cluster's resolved addresses, whether the
inventory was validated) lives here, keyed by the run's State. The State is held
weakly: a finished run's values go with it, and a later run (the plan tests make
many in one process) never sees them.
"""

from __future__ import annotations

import weakref
from typing import Any

_RUNS: weakref.WeakKeyDictionary[Any, dict[str, dict[Any, Any]]] = weakref.WeakKeyDictionary()


def run_memo(state: Any, name: str) -> dict[Any, Any]:
    """The dict named ``name`` that belongs to the pyinfra run ``state`` (empty at first):
    ``run_memo(host.state, "facts")`` holds every fact ``deploy.facts.fact`` read in that run."""
    return _RUNS.setdefault(state, {}).setdefault(name, {})
