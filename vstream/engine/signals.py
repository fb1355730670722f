"""SIGTERM and SIGINT: the first asks for a graceful shutdown, the second cuts it short.

A second signal does not throw away what was produced: the stop stops
waiting for frames in flight, every sink gets :data:`FORCED_FLUSH_SECONDS`
for the records it holds (the rest counted as dropped, the totals logged),
and the process exits at most :data:`FORCED_EXIT_SECONDS` later, whatever is
still running. A third signal exits at once. A signal the same as one taken
less than :data:`REPEAT_SECONDS` before is that one delivered twice, and is
not taken again: GNU ``timeout`` sends its signal to the command and then to
its process group, which holds the command too, and ``timeout 60 vstream run``
cut every stop short, dropping the records in flight.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)

FORCED_FLUSH_SECONDS = 2.0
"""After a second signal: how long the sinks may still deliver the records they hold."""
REPEAT_SECONDS = 0.5
"""A signal the same as one taken less than this before is a second delivery of it."""
FORCED_EXIT_SECONDS = 10.0
"""After a second signal: the process has exited by then (a sender stuck in a network call
is not waited for)."""


class ShutdownSignals:
    """Sets :attr:`requested` on the first signal; cuts the stop short on the second.

    The exit status after a second signal is 128 + its number, as a shell
    reports a process killed by it, so a forced exit is never mistaken for a
    clean one.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.received: int | None = None
        """The first signal's number, once one arrived."""
        self.forced: int | None = None
        """The second signal's number, once one arrived: the stop was cut short."""
        self.on_force: Callable[[float], object] | None = None
        """Called on a thread of its own at the second signal, with the seconds the sinks
        still get (the engine's ``hurry``)."""
        self._previous: dict[int, object] = {}
        self._arrivals: list[tuple[int, float, object]] = []
        """Every signal that arrived: its number, when, and a token of its own. Appending is
        one step that a nested handler cannot split (where ``requested.is_set()`` then
        ``set()`` could be), so each handler finds its place among the others."""

    def install(self) -> ShutdownSignals:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    @property
    def exit_status(self) -> int | None:
        """128 + the second signal's number after a forced stop, else None."""
        return None if self.forced is None else 128 + self.forced

    def _order(self, arrival: tuple[int, float, object]) -> int | None:
        """How many signals were taken before ``arrival``; None where it is a repeat of one
        taken (:data:`REPEAT_SECONDS`)."""
        taken: list[tuple[int, float]] = []
        for signum, at, token in list(self._arrivals):
            repeat = any(signum == s and abs(at - t) < REPEAT_SECONDS for s, t in taken)
            if token is arrival[2]:
                return None if repeat else len(taken)
            if not repeat:
                taken.append((signum, at))
        raise AssertionError("a signal that never arrived")  # pragma: no cover

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Python runs a handler between bytecodes of the main thread, including those of a
        # handler already running: a second signal that arrives while the first one's log
        # line is written runs a nested handler. Which signal this is must therefore be
        # found from a list appended to in one step before anything else.
        arrival = (signum, time.monotonic(), object())
        self._arrivals.append(arrival)
        order = self._order(arrival)
        if order is None:
            return
        name = signal.Signals(signum).name
        if order >= 2:
            _exit_now(f"{name} a third time: exiting now", 128 + signum)
        if order == 1:
            self.forced = signum
            log.error(
                "%s again: the sinks get %g s for the records they hold, then exiting "
                "(send it again to exit at once)",
                name,
                FORCED_FLUSH_SECONDS,
            )
            deadline = threading.Timer(
                FORCED_EXIT_SECONDS,
                _exit_now,
                (f"still stopping {FORCED_EXIT_SECONDS:g} s after {name} again: exiting now",),
                {"status": 128 + signum},
            )
            deadline.daemon = True
            deadline.start()
            if self.on_force is not None:
                # Not here: the main thread, interrupted, may hold a lock the engine needs.
                threading.Thread(
                    target=self.on_force, args=(FORCED_FLUSH_SECONDS,), name="hurry", daemon=True
                ).start()
            # requested is not set here: nested inside the first handler's requested.set(),
            # this would wait on the lock that handler holds. The first handler sets it.
            return
        self.received = signum
        self.requested.set()
        log.info("%s: stopping (send it again to cut the stop short)", name)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _exit_now(message: str, status: int) -> None:
    """Log ``message`` and end the process with ``status`` now, without waiting for anything."""
    log.error(message)
    logging.shutdown()
    os._exit(status)
