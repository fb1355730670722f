"""SIGTERM and SIGINT: the first asks for a graceful shutdown, the second forces exit."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

log = logging.getLogger("vstream.engine")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ShutdownSignals:
    """Sets :attr:`requested` on the first signal; exits the process at once on the second.

    The second signal's exit status is 128 + the signal number, as a shell
    reports a process killed by it, so a forced exit is never mistaken for a
    clean one.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.received: int | None = None
        """The first signal's number, once one arrived."""
        self._previous: dict[int, object] = {}

    def install(self) -> ShutdownSignals:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            log.error("%s again: exiting now, without waiting for the flush", name)
            logging.shutdown()
            os._exit(128 + signum)
        log.info("%s: stopping (send it again to exit at once)", name)
        self.received = signum
        self.requested.set()

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
