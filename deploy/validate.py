"""Run the inventory validation once per pyinfra run, before any operation."""

from __future__ import annotations

import weakref
from typing import Any

from deploy.schema import check_inventory

_VALIDATED: weakref.WeakSet[Any] = weakref.WeakSet()  # the pyinfra States already validated


def validate_once(state: Any, inventory: Any) -> None:
    """Validate the whole inventory the first time a deploy file runs in ``state``."""
    if state in _VALIDATED:
        return
    check_inventory(inventory)
    _VALIDATED.add(state)
