"""Run the inventory validation once per pyinfra run, before any operation."""

from __future__ import annotations

from typing import Any

from deploy.memo import run_memo
from deploy.schema import check_inventory


def validate_once(state: Any, inventory: Any) -> None:
    """Validate the whole inventory the first time a deploy file runs in ``state``."""
    done = run_memo(state, "validate")
    if done:
        return
    check_inventory(inventory)
    done["inventory"] = True
