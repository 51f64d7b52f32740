"""``rayrig notebook INVENTORY``: JupyterLab in the head's ray-node container, through an SSH tunnel.

    $ rayrig notebook inventories/prod.py
    JupyterLab on cluster "cluster": http://127.0.0.1:41023/lab
    It runs in ray-node on ubuntu@192.0.2.10, in /mnt/shared/results ($RAYRIG_SHARED_DIR, on shared storage).
    It asks for this session's token: it is in /home/me/rayrig/.rayrig/clusters/cluster/notebook_token ...
    To log in directly, open /home/me/rayrig/.rayrig/clusters/cluster/notebook.html in your browser ...
    A kernel there is connected to the cluster: `import ray; ray.init()` works with no setup.
    Ctrl-C stops the server and the tunnel.

Each session has a token of its own, on no command line and in no output (:mod:`rayrig.notebook`).

Exit codes: 0 stopped with Ctrl-C (or a ``kill``: SIGTERM, SIGHUP; the server, its ssh and the tunnel
end too), 1 the notebook did not start (no ray-node running, an image without JupyterLab, the port taken
on the head, ssh failed: the line says which) or the server or the tunnel ended on its own, 2 bad usage
(no such inventory file, a bad port or folder), 130 interrupted while it was starting.
"""

from __future__ import annotations

import argparse
import sys

from rayrig import dashboard, notebook
from rayrig.commands.dashboard import port_number
from rayrig.inventory import load_inventory


def _cmd_notebook(args: argparse.Namespace) -> int:
    """0 after Ctrl-C or a kill; 1 when the notebook cannot start or ends on its own; 2 bad usage."""
    inventory = load_inventory(args.inventory)
    local_port = args.local_port or dashboard.free_port()
    with dashboard.stopped_by_signals():  # a kill stops the server and closes the tunnel too
        found = notebook.probe(inventory, args.remote_port, args.root_dir)
        print(f"==> Starting JupyterLab in {inventory.head.container} on the head, {inventory.head.name}",
              file=sys.stderr, flush=True)  # fmt: skip
        with notebook.session(inventory, found, local_port, args.remote_port) as running:
            try:  # once it answers, Ctrl-C or a kill is how it ends
                print(notebook.banner(running, args.root_dir), flush=True)
                failure = running.wait()
            except KeyboardInterrupt:
                print("==> Stopping JupyterLab and the tunnel", file=sys.stderr, flush=True)
                return 0
            raise failure


def _container_dir(text: str) -> str:
    if not text.startswith("/") or "\n" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not an absolute path (a folder in the ray-node container)")
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig notebook``."""
    parser = subparsers.add_parser(
        "notebook",
        help="run JupyterLab in the head's ray-node container and open an SSH tunnel to it",
        description="Its kernels run beside the Ray head, connected to the cluster (`import ray; ray.init()` needs "
        "no setup); the browser reaches it through the tunnel with a token of this session's alone, in a file "
        "readable by you alone. Exit 0 after Ctrl-C, 1 when it cannot start or ends on its own, 2 bad usage.",
    )
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    parser.add_argument(
        "--local-port", type=port_number, default=None, help="port on this machine (default: a free one)"
    )
    parser.add_argument(
        "--remote-port", type=port_number, default=notebook.DEFAULT_REMOTE_PORT,
        help="JupyterLab's port on the head's loopback (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--root-dir", type=_container_dir, default=None, metavar="DIR",
        help="the notebook's folder in the ray-node container (default: its $RAYRIG_SHARED_DIR, else its home)",
    )  # fmt: skip
    parser.set_defaults(func=_cmd_notebook)
