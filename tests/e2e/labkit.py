"""What every end-to-end scenario on the local lab shares: the lab, the deploy, Ray inside the head.

Real sshd hosts with systemd, pyinfra over SSH, Docker installed inside each
host, the Ray image pulled from the lab's registry, a real Ray cluster.

One helper per job: :func:`deploy` (pyinfra), :func:`rayrig` (the command, as a user runs it),
:func:`wait_for_alive` (N alive Ray nodes, or the test fails), :func:`inventory_variant` (the lab's
inventory with changes), :func:`ray_status` (Ray's own CLI against the head from a worker), and
:func:`baseline_signature` (what the baseline fixture compares to decide whether to deploy).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

import pytest

from cloud import lab as local
from cloud import ssh as remote
from cloud.lab.engine import docker, labelled
from deploy.contract import settings
from deploy.contract.paths import repo_root
from deploy.firewall import nftables
from deploy.ray import auth, ray_node


def lab_name(worker: str = "") -> str:
    """The lab of a pytest-xdist worker (``gw0``, ``gw1``: one lab each), or of a run without workers."""
    base = os.environ.get("RAYRIG_E2E_LAB", "rayrig-e2e")
    return f"{base}-{worker}" if worker else base


#: This process's lab: the e2e tier on N workers runs N labs side by side, one per worker.
LAB = lab_name(os.environ.get("PYTEST_XDIST_WORKER", ""))
HOSTS = 3
LAB_INVENTORY = "inventories/lab.py"


def deploy_command(inventory: str | Path, *extra: str) -> list[str]:
    """The deploy's command line, as a user types it (run in the repository, ``RAYRIG_LAB`` set)."""
    return [sys.executable, "-m", "pyinfra", str(inventory), "deploy/cluster.py", "-y", *extra]


def deploy(inventory: str | Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the deploy with pyinfra, as a user would, and return its output."""
    started = time.monotonic()
    result = subprocess.run(
        deploy_command(inventory, *extra),
        cwd=repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(f"deploy of {inventory} took {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        print(result.stdout[-6000:], result.stderr[-4000:])
    return result


def rayrig(*args: str | Path, timeout: float = 600, cwd: Path | None = None, env: dict | None = None):
    """``rayrig ARGS...`` on the lab as a user runs it (no standard input); its result."""
    return subprocess.run(
        [sys.executable, "-m", "rayrig", *map(str, args)],
        cwd=cwd or repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def rayrig_background(*args: str | Path) -> subprocess.Popen:
    """``rayrig ARGS...`` left running (a tunnel, a check to interrupt), its output one text stream."""
    return subprocess.Popen(
        [sys.executable, "-m", "rayrig", *map(str, args)],
        cwd=repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def changed_operations(output: str) -> dict[str, int]:
    """pyinfra's own report: per host, how many operations changed something.

    pyinfra prints ``[host] Success`` for an operation that ran commands and
    ``[host] No changes`` for one that did not; its results table ends with a
    "Grand total" row whose Success column must agree.
    """
    changed: dict[str, int] = {}
    total_success = None
    for line in ANSI.sub("", output).splitlines():
        match = re.search(r"\[(?P<host>[^\]]+)\]\s+(?P<status>Success|No changes)\b", line)
        if match:
            changed.setdefault(match["host"], 0)
            changed[match["host"]] += match["status"] == "Success"
        if line.strip().startswith("Grand total"):
            total_success = line.split()[3]
    assert total_success is not None, "pyinfra printed no results table"
    assert (total_success == "-") == (sum(changed.values()) == 0), (total_success, changed)
    return changed


class Lab:
    """The lab under test: its state, and commands on its hosts."""

    def __init__(self, state: dict):
        self.state = state
        self.hosts = state["hosts"]
        self.head = next(h for h in self.hosts if h["role"] == "head")
        self.workers = [h for h in self.hosts if h["role"] != "head"]

    def target(self, h: dict) -> remote.SshTarget:
        return remote.SshTarget(
            h["address"], self.state["ssh_user"], Path(self.state["ssh_key"]), Path(self.state["known_hosts"])
        )

    def sh(self, h: dict, command: str, timeout: float = 300) -> str:
        status, output = remote.run(self.target(h), command, timeout=timeout)
        assert status == 0, f"{command!r} on {h['address']} failed ({status}): {output[-3000:]}"
        return output

    def container_id(self, h: dict) -> str:
        return self.sh(h, "sudo docker inspect --format '{{.Id}}' ray-node").strip()

    def ray_python(self, code: str, timeout: float = 300) -> dict:
        """Run Python inside the head's ray-node container; it prints one line ``RESULT <json>``.

        Ray's own warnings share the output stream, so the result line is marked.
        """
        script = textwrap.dedent(code)
        command = "sudo docker exec -i ray-node python -"
        status, output = remote.run_with_input(self.target(self.head), command, script, timeout=timeout)
        assert status == 0, f"python in the head container failed ({status}): {output[-3000:]}"
        results = [line[len("RESULT ") :] for line in output.splitlines() if line.startswith("RESULT ")]
        assert results, f"no RESULT line in: {output[-3000:]}"
        return json.loads(results[-1])


CLUSTER_STATE = """
import json, time, ray
ray.init(address="auto", logging_level="ERROR")
deadline = time.time() + {wait}
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= {expect} or time.time() > deadline:
        break
    time.sleep(2)
print("RESULT", json.dumps({{"nodes": [{{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": n["Resources"]}}
                            for n in nodes],
                  "total": ray.cluster_resources()}}))
"""


def cluster_state(lab: Lab, expect: int = HOSTS, wait: int = 90, timeout: float = 300) -> dict:
    """The alive nodes and the cluster's resources, as the head's GCS has them (waits up to ``wait`` s
    for ``expect`` alive nodes, then answers whatever it sees)."""
    return lab.ray_python(CLUSTER_STATE.format(expect=expect, wait=wait), timeout=timeout)


def alive_nodes(lab: Lab, poll_s: float = 30) -> list[dict] | str:
    """The alive nodes the head's GCS lists now, or why it could not tell (the head restarting, its
    host rebooting: SSH, ``docker exec`` or ``ray.init`` fail or hang, which one poll bounds)."""
    try:
        return cluster_state(lab, wait=0, timeout=poll_s)["nodes"]
    except Exception as exc:  # any failure of one poll is "not yet"; the caller bounds the wait
        return f"{type(exc).__name__}: {str(exc)[-300:]}"


def wait_for_alive(
    lab: Lab,
    count: int = HOSTS,
    seconds: float = 240,
    *,
    since: float | None = None,
    addresses: Iterable[str] | None = None,
    new_ids_of: Iterable[str] = (),
    cpus: float | None = None,
) -> list[dict]:
    """The alive nodes once there are ``count`` of them, or the test fails after ``seconds``.

    ``addresses``: exactly those hosts' nodes; ``new_ids_of``: none of these node IDs among them
    (a restarted node is a new node); ``cpus``: the cluster's CPU total (a replaced node rejoined
    with its new declaration). ``since`` is when the wait began (default: now).
    """
    started = time.monotonic() if since is None else since
    wanted = sorted(addresses) if addresses is not None else None
    old = set(new_ids_of)
    seen: list[dict] | str = "nothing yet"
    while True:
        seen = alive_nodes(lab)
        if (
            not isinstance(seen, str)
            and len(seen) == count
            and (wanted is None or sorted(n["ip"] for n in seen) == wanted)
            and not {n["id"] for n in seen} & old
            and (cpus is None or sum(n["resources"].get("CPU", 0) for n in seen) == cpus)
        ):
            print(f"{count} nodes alive after {time.monotonic() - started:.1f} s")
            return seen
        if time.monotonic() > started + seconds:
            pytest.fail(f"not {count} alive nodes as expected within {seconds} s; last seen: {seen}")
        time.sleep(3)


def report_paths(output: str) -> tuple[Path, Path]:
    """The JSON report and the plot the checks say they saved."""
    json_path = re.search(r"--> JSON report: (\S+)", output)
    plot_path = re.search(r"--> bus bandwidth plot: (\S+)", output)
    assert json_path and plot_path, output[-3000:]
    return Path(json_path[1]), Path(plot_path[1])


def outsider_probe(lab: Lab, targets: list[tuple[str, int]]) -> dict[str, bool]:
    """Which ``address:port`` a container on the lab network, not in the inventory, can connect to."""
    probes = " ".join(
        f"(timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null && echo OPEN {a}:{p} || echo SHUT {a}:{p}) &"
        for a, p in targets
    )
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", lab.state["network"], local.BASE_IMAGE, "bash", "-c", probes + " wait"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = dict(reversed(line.split()) for line in result.stdout.splitlines() if line.strip())
    return {target: status == "OPEN" for target, status in found.items()}


def member_can_connect(lab: Lab, member: dict, address: str, port: int) -> bool:
    command = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}' && echo OPEN || echo SHUT"
    return lab.sh(member, command).strip().endswith("OPEN")


def ray_ports() -> dict[str, int]:
    return settings.defaults()["ray_ports"]


def cluster_token() -> str:
    return auth.read_token(auth.token_path(settings.merge({"ray_cluster_name": LAB})))


BUCKET = "rayrig-e2e"  # the bucket moto's server holds for the shared-storage scenarios
S3_SECRET = "e2e-Secret-Key-do-not-print"


def inventory_variant(
    path: Path, changes: dict, only: str | None = None, per_host: dict[str, dict] | None = None
) -> Path:
    """The lab's inventory with ``changes`` in every host's data, or in host ``only``'s alone, and
    ``per_host[name]`` on top in that host's, written to ``path`` (outside inventories/: the defaults still
    apply)."""
    path.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / LAB_INVENTORY)!r})
            changes, only, per_host = {changes!r}, {only!r}, {per_host or {}!r}
            def changed(name, data):
                data = {{**data, **changes}} if only is None or name == only else data
                return {{**data, **per_host.get(name, {{}})}}
            heads = [(name, changed(name, data)) for name, data in lab["heads"]]
            workers = [(name, changed(name, data)) for name, data in lab["workers"]]
            """
        )
    )
    return path


#: ``ray status`` against the head's GCS from a throwaway container of the Ray image on the first worker
#: (an address the firewall admits); ``env`` is what the client presents (a token, TLS files).
RAY_STATUS = "sudo docker run --rm --network=host {env} {image} timeout {seconds} ray status --address {head}:{port}"
#: The cluster's token as a client presents it: the worker's own copy, mounted read-only.
WITH_TOKEN = "-e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN_PATH=/token --mount type=bind,src={path},dst=/token,readonly"


def ray_status(lab: Lab, env: str = "", seconds: int = 60) -> tuple[int, str]:
    """``ray status`` from the first worker with ``env``; its exit status and output (``seconds`` bounds Ray's
    own retries: a client that should be refused needs less than one that should get in)."""
    command = RAY_STATUS.format(
        env=env, image=lab.state["image"], head=lab.head["address"], port=ray_ports()["gcs"], seconds=seconds
    )
    return remote.run(lab.target(lab.workers[0]), command, timeout=seconds + 120)


def with_token(path: str = auth.NODE_TOKEN_PATH) -> str:
    return WITH_TOKEN.format(path=path)


#: One line per host of what the baseline deployment decides: ray-node's configuration hash and image,
#: the digest rayrig's loaded nftables table carries (its members, ports and admin networks), and
#: whether the node exporter runs.
SIGNATURE = (
    "sudo docker inspect --format "
    f"'{{{{index .Config.Labels \"{ray_node.HASH_LABEL}\"}}}} {{{{.Config.Image}}}} {{{{.State.Running}}}}' "
    "ray-node 2>/dev/null || echo no-ray-node; "
    f"sudo nft list table {nftables.TABLE} 2>/dev/null | grep -m1 -F 'comment \"' || echo no-table; "
    "systemctl is-active prometheus-node-exporter || true"
)


def baseline_signature(lab: Lab) -> dict[str, str] | None:
    """Each host's signature (:data:`SIGNATURE`), or None when a host cannot be asked."""
    found = {}
    for h in lab.hosts:
        status, output = remote.run(lab.target(h), SIGNATURE, timeout=60)
        if status != 0:
            return None
        found[h["address"]] = output.strip()
    return found


#: What a deploy leaves on a host that a fresh lab host lacks: rayrig's directory, the Docker engine.
DEPLOY_TRACE = "if test -e /etc/rayrig || test -e /usr/bin/docker; then echo deployed; else echo fresh; fi"


def deployed_hosts(name: str) -> list[str]:
    """Lab ``name``'s host containers that a deploy has touched, or that are not running (so their state is
    unknown): a lab left over from an earlier run (its hosts restart with the Docker engine)."""
    found = []
    for container in labelled("container", name):
        if not container.startswith(f"{name}-host-"):
            continue
        trace = docker("exec", container, "sh", "-c", DEPLOY_TRACE, check=False)
        if trace.stdout.strip() != "fresh":  # deployed, or not running (no answer)
            found.append(container)
    return found


def fresh_lab(name: str) -> dict:
    """Lab ``name`` up with fresh hosts: a lab left over from an earlier run (an interrupted tier, a host
    someone deployed by hand) is taken down first, so that the tier's first deploy is a first deploy."""
    leftover = deployed_hosts(name)
    if leftover:
        print(f"lab {name}: {', '.join(sorted(leftover))} left over from an earlier run; taking the lab down first")
        local.down(name)
    return local.up(hosts=HOSTS, name=name)


def labs_for(workers: int) -> list[str]:
    """The labs an e2e tier on ``workers`` pytest-xdist workers uses (0: no workers, one lab)."""
    return [lab_name(f"gw{n}") for n in range(workers)] if workers else [lab_name()]


#: The image family's development image (examples/images/dev: JupyterLab, Serve, Train, Tune) on the lab's
#: Ray image, as ``rayrig image build --requirements`` builds it: the workloads' scenarios run on it.
DEV_IMAGE = "rayrig-e2e/dev:1"
DEV_REQUIREMENTS = "examples/images/dev/requirements.txt"


def build_dev_image() -> str:
    """Build ``DEV_IMAGE`` (or find it up to date) with rayrig's own commands, offline from a wheelhouse: the
    lab's Ray wheels (so the lab's Ray image is the one it builds on, up to date) and the project's, which
    ``rayrig image wheelhouse --requirements`` downloads. Returns its tag."""
    from cloud.lab.build import ensure_rootfs  # noqa: PLC0415 (the lab's builder, for the few that need it)
    from cloud.lab.engine import image_lock  # noqa: PLC0415
    from cloud.lab.state import lab_image_tag  # noqa: PLC0415
    from deploy.contract.paths import state_dir  # noqa: PLC0415
    from images import RAY_VERSION  # noqa: PLC0415

    started = time.monotonic()
    ray_wheels = state_dir() / f"wheelhouse-{RAY_VERSION}"
    folder = state_dir() / f"wheelhouse-{RAY_VERSION}-dev"
    with image_lock():  # the lab's own builds fill the Ray wheelhouse and build the Ray image first
        rootfs = ensure_rootfs(print)
        folder.mkdir(parents=True, exist_ok=True)
        for wheel in ray_wheels.iterdir():  # the Ray wheels as the lab built its image with them
            if wheel.is_file() and not (folder / wheel.name).exists():
                os.link(wheel, folder / wheel.name)
    for args in (
        ("image", "wheelhouse", folder, "--requirements", DEV_REQUIREMENTS),
        ("image", "build", "--requirements", DEV_REQUIREMENTS, "--wheelhouse", folder, "--base", rootfs,
         "--ray-tag", lab_image_tag(), "--tag", DEV_IMAGE),
    ):  # fmt: skip
        result = rayrig(*args, timeout=900)
        assert result.returncode == 0, (
            f"rayrig {' '.join(map(str, args))}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    print(f"{DEV_IMAGE}: ready in {time.monotonic() - started:.1f} s")
    return DEV_IMAGE


if __name__ == "__main__":
    # python -m tests.e2e.labkit [up|down] [WORKERS]: the e2e tier's labs up ahead of it, or down after it
    # (a worker that got no lab scenario never takes its lab down itself): scripts/run_tests.py. With the
    # labs up, the workloads' image is built too, so that its minute is spent while the other tiers run.
    action = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in ("up", "down") else "up"
    count = next((int(a) for a in sys.argv[1:] if a.isdigit()), 0)
    for name in labs_for(count):
        if action == "up":
            fresh_lab(name)
        else:
            local.down(name)
    if action == "up":
        build_dev_image()


#: A member that tries to write into the head's image mirror while the deploy runs: every second it lists
#: the mirror's repositories and tags and PUTs each manifest back with one byte more (same layers, another
#: digest: a writable registry takes it, 201), and starts a blob upload (POST). One JSON line per try.
MIRROR_POISONER = r"""
import json, sys, time, urllib.error, urllib.request
base, log = f"http://{sys.argv[1]}", open(sys.argv[2], "a", buffering=1)
ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
def call(method, path, data=None, headers=None):
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read(), answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        return error.code, b"", ""
    except Exception as error:
        return type(error).__name__, b"", ""
while True:
    status, body, _ = call("GET", "/v2/_catalog")
    repos = json.loads(body).get("repositories") or [] if status == 200 else []
    for repo in repos:
        outcome, _, _ = call("POST", f"/v2/{repo}/blobs/uploads/")
        log.write(json.dumps({"op": "POST", "repo": repo, "tag": "", "outcome": outcome}) + "\n")
        status, body, _ = call("GET", f"/v2/{repo}/tags/list")
        for tag in (json.loads(body).get("tags") or [] if status == 200 else []):
            status, manifest, kind = call("GET", f"/v2/{repo}/manifests/{tag}", headers={"Accept": ACCEPT})
            if status != 200:
                continue
            outcome, _, _ = call("PUT", f"/v2/{repo}/manifests/{tag}", manifest + b"\n", {"Content-Type": kind})
            log.write(json.dumps({"op": "PUT", "repo": repo, "tag": tag, "outcome": outcome}) + "\n")
    if not repos:
        log.write(json.dumps({"op": "GET", "repo": "", "tag": "", "outcome": status}) + "\n")
    time.sleep(1)
"""
POISONER_LOG = "/tmp/rayrig-e2e-mirror-poisoner.log"


def start_mirror_poisoner(lab: Lab, member: dict, mirror: str) -> None:
    """``member`` tries to write into the mirror at ``mirror`` (host:port) until :func:`mirror_poisoner_tries`."""
    script = "/tmp/rayrig-e2e-mirror-poisoner.py"
    lab.sh(member, f"cat > {script} <<'POISON'\n{MIRROR_POISONER}\nPOISON\nrm -f {POISONER_LOG}")
    lab.sh(member, f"nohup timeout 1800 python3 {script} {mirror} {POISONER_LOG} >/dev/null 2>&1 &")


def mirror_poisoner_tries(lab: Lab, member: dict) -> list[dict]:
    """Stop the member's writes into the mirror; what each try got (an HTTP status, or the error's name)."""
    lab.sh(member, "pkill -f '[r]ayrig-e2e-mirror-poisoner' || true")  # [r]: not this command itself
    return [json.loads(line) for line in lab.sh(member, f"cat {POISONER_LOG} 2>/dev/null || true").splitlines() if line]


def upstream_digest(lab: Lab, repository_tag: str | None = None) -> str:
    """The digest of the manifest of the lab's Ray image (or of ``repository_tag``, path:tag in the lab's
    registry), as the lab's registry, the upstream, serves it."""
    path, tag = (repository_tag or lab.state["image"].split("/", 1)[1]).rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{lab.state['registry_local']}/v2/{path}/manifests/{tag}", method="HEAD",
        headers={"Accept": ", ".join(MANIFEST_TYPES)},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers["Docker-Content-Digest"]


MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json",
)  # fmt: skip
