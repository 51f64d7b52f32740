"""The docs site's pictures, made from a running cluster: ``make docs-pictures`` (scripts/docs-pictures.sh).

    scripts/docs-pictures.sh                       # the local lab: up, deploy with the checks, pictures, down
    scripts/docs-pictures.sh inventories/prod.py   # a running cluster: its checks, then the pictures

Writes into docs/images/:

- ``busbw.png``: the checks' bus-bandwidth plot (``reports/checks-<cluster>-<time>-busbw.png``). On the lab
  it comes from the deploy's own checks (``pyinfra inventories/lab.py deploy/cluster.py -y``, the lab's
  first deploy, so the full checks with the lab's quick benchmark); on another inventory from
  ``rayrig check INVENTORY``, which changes nothing on the hosts.
- ``ray-dashboard.png``: the Ray dashboard's cluster view, ``prometheus-targets.png``: Prometheus's
  targets, ``grafana-gpus.png``: Grafana's "rayrig: GPUs" dashboard where Grafana runs (the lab's
  inventory runs none: Grafana's image is on Docker Hub, which the lab cannot reach). All three through
  ``rayrig dashboard INVENTORY``, on free ports here, by headless Chromium driven over its DevTools pipe
  (the Ray dashboard asks for the cluster's token: it is given to the browser as Ray's cookie, never printed).

The lab is ``$RAYRIG_LAB`` (default ``rayrig-docs``, a lab of its own, so that a lab of yours is left
alone); one that is already up is used and left up, one this script brings up it takes down at the end.
The tunnel is stopped in every case. Exit status: 0 every picture made, 1 a step failed, 2 usage.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAB_INVENTORY = ROOT / "inventories" / "lab.py"
IMAGES = ROOT / "docs" / "images"
LAB_NAME = "rayrig-docs"
WINDOW = (1440, 900)
#: A picture bigger than this is reduced to a 256-colour palette (screenshots of pages stay sharp).
MAX_BYTES = 300_000
#: What each picture shows: the file, the page under the tunnel's URL (the first that is not "not found":
#: Prometheus 3 has /targets, Debian's Prometheus 2.42 in the lab its classic UI only), and how long the
#: page gets to render.
PAGES = {
    "Dashboard": ("ray-dashboard.png", ["/#/cluster"], 12),
    "Prometheus": ("prometheus-targets.png", ["/targets", "/classic/targets"], 6),
    "Grafana": ("grafana-gpus.png", ["/d/rayrig-gpus?orgId=1&from=now-30m&to=now&kiosk"], 15),
}
NOT_FOUND = re.compile(r"^(404\b|.{0,40}\bnot found\b)", re.IGNORECASE)
TOKEN_COOKIE = "ray-authentication-token"  # Ray's dashboard reads the token from this cookie


class Failed(Exception):
    """A step failed; the message says which and why."""


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def python(*args: str, env: dict[str, str], timeout: float) -> None:
    """Run ``python ARGS`` from the repository root, its output passed through; a non-zero exit fails."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, timeout=timeout)
    if result.returncode != 0:
        raise Failed(f"`{' '.join(args)}` exited with status {result.returncode}")
    say(f"{' '.join(args[:3])} ... took {time.monotonic() - started:.0f} s")


def lab_is_up(name: str) -> bool:
    sys.path.insert(0, str(ROOT))
    from cloud.lab import load_state

    return load_state(name) is not None


def newest_plot(since: float) -> Path:
    plots = [p for p in (ROOT / "reports").glob("checks-*-busbw.png") if p.stat().st_mtime >= since]
    if not plots:
        raise Failed("the checks wrote no bus-bandwidth plot into reports/ (is matplotlib installed: rayrig[plot]?)")
    return max(plots, key=lambda p: p.stat().st_mtime)


# --- The tunnel -------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def open_dashboard(inventory: Path, env: dict[str, str]) -> tuple[subprocess.Popen, dict[str, str], Path | None]:
    """``rayrig dashboard INVENTORY`` in the background on free ports; once its banner is out, the
    process, the URL of each service it forwards (Dashboard, Prometheus, Grafana) and the token's file."""
    ports = [str(free_port()) for _ in range(3)]
    command = [sys.executable, "-m", "rayrig", "dashboard", str(inventory), "--local-port", ports[0],
               "--local-prometheus-port", ports[1], "--local-grafana-port", ports[2]]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    urls: dict[str, str] = {}
    token: Path | None = None
    said = []
    for line in process.stdout:  # type: ignore[union-attr]
        said.append(line.rstrip())
        if match := re.match(r'Dashboard of cluster ".*": (http://\S+)', line):
            urls["Dashboard"] = match[1]
        elif match := re.match(r"(Prometheus|Grafana): (http://\S+)", line):
            urls[match[1]] = match[2]
        elif match := re.match(r"It asks for the cluster's Ray token: it is in (.+)$", line.rstrip()):
            token = Path(match[1])
        elif line.startswith("The tunnel runs over SSH"):
            say(f"tunnel open: {', '.join(f'{k} {v}' for k, v in urls.items())}")
            return process, urls, token
    process.wait()
    raise Failed("rayrig dashboard exited before the tunnel opened:\n" + "\n".join(said[-20:]))


def close(process: subprocess.Popen | None) -> None:
    """Stop ``rayrig dashboard`` as Ctrl-C would (it closes its ssh on SIGTERM)."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    say("tunnel stopped")


# --- Headless Chromium over its DevTools pipe ---------------------------------------------------------


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, NUL-separated JSON)."""

    def __init__(self) -> None:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chromium:
            raise Failed("no chromium on PATH (scripts/docs-pictures.sh installs Debian's package)")
        self.profile = tempfile.mkdtemp(prefix="rayrig-pictures-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above fd 4, so that placing them at 3 and 4 in the child cannot overwrite one with the other.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
        os.close(to_browser_r)
        os.close(from_browser_w)

        def pipes_at_3_and_4() -> None:
            os.dup2(ends[0], 3)
            os.dup2(ends[1], 4)

        args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank"]  # fmt: skip
        self.process = subprocess.Popen(
            args, pass_fds=(3, 4), preexec_fn=pipes_at_3_and_4, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for fd in ends:
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise Failed("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise Failed("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            request["sessionId"] = session
        os.write(self._to_browser, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise Failed(f"Chromium refused {method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def screenshot(self, url: str, target: Path, settle_s: float, cookie: tuple[str, str] | None = None) -> str:
        """Open ``url`` in a fresh tab 1440x900, let it render ``settle_s`` seconds after its load event,
        save a PNG of the viewport; return the start of the page's visible text (to tell a page from an error)."""
        tab = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=tab, flatten=True)["sessionId"]
        try:
            self.call("Page.enable", session)
            self.call("Network.enable", session)
            self.call("Emulation.setDeviceMetricsOverride", session, width=WINDOW[0], height=WINDOW[1],
                      deviceScaleFactor=1, mobile=False)  # fmt: skip
            if cookie:
                self.call("Network.setCookie", session, name=cookie[0], value=cookie[1], url=url)
            self.events.clear()
            self.call("Page.navigate", session, url=url)
            deadline = time.monotonic() + 60
            while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
                self.events.append(self._read(deadline))
            time.sleep(settle_s)
            shot = self.call("Page.captureScreenshot", session, format="png")["data"]
            target.write_bytes(base64.b64decode(shot))
            text = self.call("Runtime.evaluate", session, expression="document.body.innerText", returnByValue=True)
            return " ".join(str(text.get("result", {}).get("value", "")).split())[:160]
        finally:
            self.call("Target.closeTarget", targetId=tab)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


def shrink(path: Path) -> None:
    """A picture over MAX_BYTES as a 256-colour PNG (Pillow, which matplotlib brings)."""
    if path.stat().st_size <= MAX_BYTES:
        return
    from PIL import Image

    with Image.open(path) as image:
        reduced = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    reduced.save(path, optimize=True)


# --- The steps ----------------------------------------------------------------------------------------


def pictures(inventory: Path, env: dict[str, str], out: Path) -> list[str]:
    """Every picture; returns what could not be made, and why."""
    missing = []
    started = time.time()
    if inventory == LAB_INVENTORY:
        say(f"deploying {inventory.relative_to(ROOT)} with the checks (lab {env['RAYRIG_LAB']})")
        python("-m", "pyinfra", str(inventory), "deploy/cluster.py", "-y", "--data", "checks_enabled=True",
               env=env, timeout=3600)  # fmt: skip
    else:
        say(f"checking {inventory} (rayrig check: nothing on the hosts changes)")
        python("-m", "rayrig", "check", str(inventory), env=env, timeout=3600)
    plot = newest_plot(started)
    shutil.copyfile(plot, out / "busbw.png")
    shrink(out / "busbw.png")
    say(f"busbw.png from {plot.relative_to(ROOT)}")

    tunnel = browser = None
    try:
        tunnel, urls, token_file = open_dashboard(inventory, env)
        browser = Browser()
        for service, (name, paths, settle_s) in PAGES.items():
            if service not in urls:
                why = "Grafana does not run on this cluster (monitoring_grafana = False)"
                if service != "Grafana":
                    why = f"{service} is not forwarded by rayrig dashboard (monitoring off?)"
                missing.append(f"{name}: {why}")
                continue
            cookie = (TOKEN_COOKIE, token_file.read_text().strip()) if service == "Dashboard" and token_file else None
            shot = Path(browser.profile) / name  # into out/ only once it shows a page
            for path in paths:
                text = browser.screenshot(urls[service] + path, shot, settle_s, cookie)
                if text and not NOT_FOUND.match(text):
                    break
            else:
                raise Failed(f"{service} showed no page at {', '.join(paths)} (it read: {text[:100]!r})")
            shrink(shot)
            shutil.copyfile(shot, out / name)
            say(f"{name}: {(out / name).stat().st_size // 1024} KiB; the page reads: {text[:100]!r}")
    finally:
        if browser:
            browser.close()
        close(tunnel)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="More: scripts/docs_pictures.py.")
    parser.add_argument("inventory", nargs="?", default=str(LAB_INVENTORY), help="default: inventories/lab.py")
    parser.add_argument("--out", default=str(IMAGES), help="where the pictures go (default: docs/images)")
    args = parser.parse_args(argv)
    inventory = Path(args.inventory).resolve()
    if not inventory.is_file():
        parser.error(f"no inventory file {args.inventory}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAYRIG_LAB": os.environ.get("RAYRIG_LAB") or LAB_NAME}
    lab = inventory == LAB_INVENTORY
    brought_up = False
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the tunnel and the lab
    try:
        if lab and not lab_is_up(env["RAYRIG_LAB"]):
            say(f"bringing the lab {env['RAYRIG_LAB']} up")
            brought_up = True
            python("-m", "rayrig", "lab", "up", "--name", env["RAYRIG_LAB"], env=env, timeout=3600)
        missing = pictures(inventory, env, out)
    except (Failed, subprocess.TimeoutExpired) as error:
        print(f"docs-pictures: {error}", file=sys.stderr)
        return 1
    finally:
        if brought_up:
            say(f"taking the lab {env['RAYRIG_LAB']} down")
            subprocess.run([sys.executable, "-m", "rayrig", "lab", "down", "--name", env["RAYRIG_LAB"]],
                           cwd=ROOT, env=env, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    for line in missing:
        say(f"not made: {line}")
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    say(f"pictures in {out} ({day}, {time.monotonic() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
