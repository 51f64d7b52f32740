"""A deploy stopped with Ctrl-C exits with status 130, not 0.

pyinfra's command line answers SIGINT with "Exiting upon user request!" and exit status 0
(``pyinfra_cli/main.py``), so a script, a Makefile or a CI job that runs the deploy would take
one cut short for one that finished, and checks cut short for a PASS. The deploy files
(``deploy/cluster.py``, ``deploy/check.py``) call :func:`exit_130_on_interrupt` first: pyinfra's
handler still prints its line and ends the run, and the status it exits with becomes
``128 + SIGINT`` (the shell's own convention for a command stopped by Ctrl-C). The next plain run
picks up where this one stopped (docs/guides/rolling.md, "A deploy cut short").
"""

from __future__ import annotations

import contextlib
import signal
from types import FrameType

#: The exit status of a deploy stopped by SIGINT.
INTERRUPTED = 128 + signal.SIGINT


def exit_130_on_interrupt() -> None:
    """Make a SIGINT end this process with status 130, around whatever handler is installed now (pyinfra's).

    Once per process; a no-op where SIGINT is ignored, and outside the main thread (where no signal handler
    can be set)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN or getattr(previous, "rayrig_interrupt", False):
        return

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            try:
                previous(signum, frame)
            except SystemExit:
                raise SystemExit(INTERRUPTED) from None
        raise KeyboardInterrupt

    on_interrupt.rayrig_interrupt = True  # type: ignore[attr-defined]
    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGINT, on_interrupt)
