"""The hosts of the local lab, read from the lab's state (``rayrig lab up`` writes it).

    rayrig lab up
    pyinfra inventories/lab.py deploy/cluster.py

The lab is ``$RAYRIG_LAB`` (default ``rayrig-lab``). Hosts are named by their
lab address (pyinfra connects to it) and carry their SSH settings (the lab's
key, its pinned host keys) and their Ray declaration: the first host is the
head, every host declares 2 CPUs, no GPUs and a custom resource named after
its hostname. Monitoring runs the lab's own Prometheus image (Debian's package, from
the lab's registry), without Grafana or a GPU exporter, which the lab cannot fetch.
See ``cloud.lab.inventory_groups``.
"""

import os
import sys
from pathlib import Path

# pyinfra runs this file as a script: when it is started from outside the repository root,
# ``cloud`` is not importable until the root is on sys.path, so the import is tried first.
try:
    from cloud.lab import DEFAULT_NAME, inventory_groups, load_state, state_path
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cloud.lab import DEFAULT_NAME, inventory_groups, load_state, state_path

_lab = os.environ.get("RAYRIG_LAB") or DEFAULT_NAME
_state = load_state(_lab)
if _state is None:
    raise RuntimeError(
        f"the local lab {_lab!r} is not up (no {state_path(_lab)}): run `rayrig lab up"
        + ("" if _lab == DEFAULT_NAME else f" --name {_lab}")
        + "` first"
    )
_groups = inventory_groups(_state)

heads = _groups["heads"]
workers = _groups["workers"]
