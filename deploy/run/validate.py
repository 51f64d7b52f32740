"""Run the inventory validation once per pyinfra run, before any operation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyinfra.api.exceptions import PyinfraError

from deploy.contract.schema import InventoryError, check_inventory
from deploy.run.memo import run_memo

#: Set by ``rayrig deploy`` and ``rayrig check``: a file the run creates once it reaches a host.
#: pyinfra runs an inventory that yields no host without loading the deploy file and exits 0,
#: so this is how rayrig tells such a run (nothing deployed) from a successful one.
RAN_FILE_ENV = "RAYRIG_RAN_FILE"


class InvalidInventory(InventoryError, PyinfraError):
    """The inventory's data is invalid, as pyinfra reports its own errors: the message, no traceback."""


def validate_once(state: Any, inventory: Any) -> None:
    """Validate the whole inventory the first time a deploy file runs in ``state``."""
    done = run_memo(state, "validate")
    if done:
        return
    try:
        check_inventory(inventory)
    except InventoryError as error:
        raise InvalidInventory(error.problems) from None
    done["inventory"] = True
    ran = os.environ.get(RAN_FILE_ENV)
    if ran:
        Path(ran).touch()
