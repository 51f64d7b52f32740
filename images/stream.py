"""Run a long command (``docker build``, ``pip download``, ``debootstrap``) and show its progress compactly."""

from __future__ import annotations

import collections
import contextlib
import io
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

#: Receives one progress line at a time (``print``, a logger, a test's list.append).
Progress = Callable[[str], None]


def silent(line: str) -> None:
    """Drop a progress line (the default where the caller passes no ``progress``)."""


class CommandError(RuntimeError):
    """A command failed; the message ends with the last lines it printed."""


def stream_command(
    cmd: Sequence[str],
    progress: Progress,
    prefix: str,
    *,
    every_s: float = 5.0,
    heartbeat_s: float = 30.0,
    always: Callable[[str], bool] | None = None,
    stdin_writer: Callable[[io.BufferedWriter], None] | None = None,
) -> list[str]:
    """Run ``cmd``, showing its output compactly, and return all its output lines.

    Lines for which ``always(line)`` is true are shown; other lines are shown at
    most once every ``every_s`` seconds (with a count of the lines skipped), so
    a user sees the command moving without a flood; after ``heartbeat_s``
    seconds without output a "still working" line is shown. ``stdin_writer``, when
    given, is called in a thread with the process's stdin (e.g. to stream a
    build context). Raises :class:`CommandError` with the last lines of output
    when the command fails.
    """
    proc = subprocess.Popen(
        list(cmd),
        stdin=subprocess.PIPE if stdin_writer else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    writer_error: list[BaseException] = []
    writer = _start_writer(proc, stdin_writer, writer_error) if stdin_writer is not None else None

    lines: list[str] = []
    tail: collections.deque[str] = collections.deque(maxlen=40)
    last_shown = float("-inf")  # the first line is always shown
    last_line = time.monotonic()
    skipped = 0
    done = threading.Event()

    def _heartbeat() -> None:
        # Long silent steps (pip installing, a layer being pushed) still show life.
        last_beat = 0.0
        while not done.wait(min(heartbeat_s, 5.0)):
            now = time.monotonic()
            quiet = now - last_line
            if quiet >= heartbeat_s and now - last_beat >= heartbeat_s:
                progress(f"{prefix}... still working ({quiet:.0f}s since the last output)")
                last_beat = now

    beat = threading.Thread(target=_heartbeat, daemon=True)
    beat.start()
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if not line.strip():
                continue
            lines.append(line)
            tail.append(line)
            now = last_line = time.monotonic()
            if (always is not None and always(line)) or now - last_shown >= every_s:
                more = f" (+{skipped} lines)" if skipped else ""
                progress(f"{prefix}{line[:160]}{more}")
                last_shown = now
                skipped = 0
            else:
                skipped += 1
        rc = proc.wait()
    finally:
        done.set()
    if writer is not None:
        writer.join()
    if rc != 0 or writer_error:
        why = f"exit status {rc}" if rc else f"stdin writer failed: {writer_error[0]!r}"
        raise CommandError(f"command failed ({why}): {' '.join(cmd)}\n  last output:\n    " + "\n    ".join(tail))
    return lines


def _start_writer(
    proc: subprocess.Popen, stdin_writer: Callable[[io.BufferedWriter], None], errors: list[BaseException]
) -> threading.Thread:
    """``stdin_writer`` fed the process's stdin in a thread, which closes it; what it raised goes to ``errors``."""
    assert proc.stdin is not None

    def _write() -> None:
        try:
            stdin_writer(proc.stdin)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - reported after the command ends
            errors.append(exc)
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]

    writer = threading.Thread(target=_write, daemon=True)
    writer.start()
    return writer
