"""Print the Ray cluster's state once the expected nodes are alive (or time is up).

Runs in the head's ray-node container: from the checks package copied there (the full
checks), or as the source of one ``python -c`` (the quick checks copy nothing), so it
imports nothing but the standard library and Ray::

    python -m checks.cluster_state --expect 10.0.0.1,10.0.0.2 --wait 180

Prints one line, ``RESULT {"nodes": [{"ip", "resources", "ray_version"}, ...], "total": {...},
"ray_version": "2.60.0"}``: the alive nodes, each with its total resources, and the cluster's
totals, judged on the operator's side by :func:`checks.preflight.cluster_reasons` or
:func:`checks.quick.quick_reasons`. Ray's own warnings share the output, so the result line
is marked.

A node's Ray version is the cluster's: Ray admits a node (``ray start --address``) and a
driver (this program's ``ray.init``) only when its Ray and Python versions equal the ones the
head recorded when it started, so every alive node runs this program's ``ray.__version__``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def wait_for_state(expected: list[str], wait_s: float) -> dict[str, Any]:
    """The alive nodes and the totals, as soon as the alive addresses are exactly ``expected``."""
    import ray  # present only in the ray-node container, not where the checks are driven from

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    wanted, deadline = sorted(expected), time.time() + wait_s
    while True:
        nodes = [n for n in ray.nodes() if n["Alive"]]
        if sorted(n["NodeManagerAddress"] for n in nodes) == wanted or time.time() > deadline:
            break
        time.sleep(2)
    version = ray.__version__  # every alive node's: see the module's docstring
    alive = [{"ip": n["NodeManagerAddress"], "resources": n["Resources"], "ray_version": version} for n in nodes]
    return {"nodes": alive, "total": ray.cluster_resources(), "ray_version": version}


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, wait for the nodes, print the ``RESULT`` line."""
    parser = argparse.ArgumentParser(prog="python -m checks.cluster_state", description=__doc__.splitlines()[0])
    parser.add_argument("--expect", default="", metavar="IP,IP,...", help="the addresses of the expected nodes")
    parser.add_argument("--wait", type=int, default=180, help="seconds to wait for them (default 180)")
    args = parser.parse_args(argv)
    expected = [ip for ip in args.expect.split(",") if ip]
    print("RESULT", json.dumps(wait_for_state(expected, args.wait)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
