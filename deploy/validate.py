"""Run the inventory validation once per pyinfra run, before any operation."""

from __future__ import annotations

from typing import Any

from deploy.schema import check_inventory

_VALIDATED: set[int] = set()


def validate_once(state: Any, inventory: Any) -> None:
    """Validate the whole inventory the first time a deploy file runs in ``state``."""
    if id(state) in _VALIDATED:
        return
    check_inventory(inventory)
    _VALIDATED.add(id(state))
