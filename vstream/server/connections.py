"""Bounds on the API's connections: how many, how long idle, how long a request may take.

uvicorn, left to itself, accepts every connection and keeps it while the
client keeps it open: a connection that never sends a byte is held for ever
(its keep-alive timeout starts only after a first response), and so is one
sending its headers a byte at a time, or announcing a body it never sends.
Each holds a file descriptor, and the pipelines share the same process limit:
1,100 idle sockets under the common limit of 1,024 stopped the API, and a
looping file that could not reopen failed for good. So here:

- **A cap** (``server.connections.max_open``), checked as each connection is
  accepted: past it the connection idle the longest (no request under way) is
  closed to make room, so idle or slow sockets cannot lock a real client out;
  when every connection is busy the new one is closed. uvicorn's
  ``limit_concurrency`` is not used: it still accepts and holds every socket,
  and answers 503 to the new client rather than dropping an idle one.
- **Timeouts**: a connection with no request under way is closed after
  ``idle_timeout_seconds`` (uvicorn's keep-alive timeout, armed here at
  accept too); a request's head must be in within ``header_timeout_seconds``
  of its first byte and its body within ``body_timeout_seconds`` of its head,
  else the client gets 408 and the connection is closed.
- **Descriptors**: :func:`raise_open_files` lifts the soft ``RLIMIT_NOFILE``
  toward the hard one at start, and :func:`connection_limits` lets the API
  take at most half the descriptors then free, the rest being the pipelines'.
- **Quiet failures**: errors of the event loop (``accept()`` out of
  descriptors repeats thousands of times a second) and uvicorn's per-request
  warnings pass a :class:`~vstream.logs.RepeatFilter`: a line per kind per
  interval with the count, never a traceback each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from vstream.config.pipelines import ConnectionsConfig
from vstream.errors import describe
from vstream.logs import RepeatFilter

log = logging.getLogger("vstream.server")

REPEATS = RepeatFilter()
"""Rate-limits the lines of :data:`log` and of uvicorn's error logger (:func:`quiet_repeats`)."""

OPEN_FILES_CEILING = 1 << 20
"""Highest soft limit asked for: some libraries walk every possible descriptor when they fork."""

MAX_BACKLOG = 64
"""Most connections asyncio accepts in one go (its ``backlog``)."""

LISTEN_QUEUE = 2048
"""Connections the kernel holds until they are accepted (no descriptor of ours each)."""

MAX_HEAD_BYTES = 16 * 1024
"""Largest request line and headers (h11's limit, made explicit): past it, 400."""


_TIMED_OUT = {
    "head": "API connection from %s closed: its request's headers took over %g s",
    "body": "API connection from %s closed: its request's body took over %g s",
}
"""A log line per phase: each a kind of its own for :data:`REPEATS`."""


def quiet_repeats() -> None:
    """Put :data:`REPEATS` on the loggers a client can make write; once per process.

    Added last, after the dashboard's own filter on uvicorn's logger, which
    must see each of the records it expects.
    """
    for name in ("uvicorn.error", log.name):
        logger = logging.getLogger(name)
        if REPEATS not in logger.filters:
            logger.addFilter(REPEATS)


def loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler: one line per kind and interval, no traceback.

    With no descriptor left, asyncio's ``accept()`` fails and reports it up
    to ``backlog`` times (once per try of its batch) every time it retries.
    """
    message = str(context.get("message") or "error in the event loop")
    exc = context.get("exception")
    why = describe(exc) if isinstance(exc, BaseException) else "no exception"
    log.error("API server: %s (%s)", message, why, extra={"repeat_key": message})


@dataclass(frozen=True)
class OpenFiles:
    """The soft ``RLIMIT_NOFILE`` before and after :func:`raise_open_files`, and the hard one."""

    before: int
    soft: int
    hard: int

    def __str__(self) -> str:
        hard = "unlimited" if self.hard == resource.RLIM_INFINITY else str(self.hard)
        if self.soft > self.before:
            return f"open files: soft limit raised from {self.before} to {self.soft} (hard {hard})"
        return f"open files: soft limit {self.soft} (hard {hard})"


def raise_open_files() -> OpenFiles:
    """Raise the soft limit on open files toward the hard one (at most :data:`OPEN_FILES_CEILING`).

    Many systems start services with a soft limit of 1,024 and a far higher
    hard limit that any process may raise itself to; streams, sinks, clips
    and API connections all draw on it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_CEILING if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_CEILING)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # a ceiling below ours (macOS: kern.maxfilesperproc)
            target = soft
        return OpenFiles(soft, target, hard)
    return OpenFiles(soft, soft, hard)


def open_descriptors() -> int:
    """Descriptors this process has open now (0 where the system does not list them)."""
    try:
        return len(os.listdir("/dev/fd"))
    except OSError:
        return 0


def connection_limits(wanted: int) -> tuple[int, int]:
    """(connections held at once, accepted in one go): within half the descriptors free now.

    The other half is the pipelines'. asyncio accepts up to ``backlog``
    connections in one turn of its loop before any of them is seen (and,
    past the cap, closed), so a burst holds the cap plus a backlog or two.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted, MAX_BACKLOG
    budget = (soft - open_descriptors()) // 2
    backlog = max(1, min(MAX_BACKLOG, budget // 4))
    return max(1, min(wanted, budget - 2 * backlog)), backlog


class Connections:
    """What the connections of one server share: the bounds and who is idle, longest first."""

    def __init__(self, config: ConnectionsConfig, max_open: int) -> None:
        self.config = config
        self.max_open = max_open
        self.idle: dict[BoundedH11Protocol, None] = {}
        """Connections with no request under way, in the order they became idle."""


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol under :class:`Connections`' cap and timeouts.

    ``uvicorn.Config(http=partial(BoundedH11Protocol, shared=...))``.
    """

    def __init__(self, *args: Any, shared: Connections, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shared = shared
        self._phase: str | None = None
        """``head`` or ``body`` while part of a request is in, None otherwise."""
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        shared = self.shared
        if len(self.connections) > shared.max_open and not self._make_room():
            log.warning(
                "API connection from %s closed: all %d connections are busy",
                self.client[0] if self.client else "?",
                shared.max_open,
            )
            transport.close()
            return
        shared.idle[self] = None
        # uvicorn arms this only after a response: a connection that never sent a request
        # would be held for as long as the client liked.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def _make_room(self) -> bool:
        """Close the connection idle the longest; False if none is idle."""
        idle = self.shared.idle
        while idle:
            oldest = next(iter(idle))
            del idle[oldest]
            if not oldest.transport.is_closing():  # else already on its way out
                break
        else:
            return False
        oldest.transport.close()
        log.warning(
            "API connections: %d open, the most allowed; the one idle the longest was closed",
            self.shared.max_open,
        )
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.shared.idle.pop(self, None)
        self._arm(None)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        """Keep the idle list and the deadline in step with where the request stands."""
        if self.transport.is_closing():
            return
        busy = self.cycle is not None and not self.cycle.response_complete
        if busy:
            self.shared.idle.pop(self, None)
        elif self not in self.shared.idle:
            self.shared.idle[self] = None
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._arm("body")
        elif state is h11.IDLE and self.conn.trailing_data[0]:
            self._arm("head")  # part of a request line or of the headers is in
        else:
            self._arm(None)

    def _arm(self, phase: str | None) -> None:
        """Start the deadline of ``phase`` unless it is already running; None stops it."""
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            config = self.shared.config
            seconds = (
                config.header_timeout_seconds if phase == "head" else config.body_timeout_seconds
            )
            self._deadline = self.loop.call_later(seconds, self._expired, phase, seconds)

    def _expired(self, phase: str, seconds: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        what = "headers" if phase == "head" else "body"
        client = self.client[0] if self.client else "?"
        log.warning(_TIMED_OUT[phase], client, seconds)
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet
            self._send_408(f"the request's {what} did not arrive within {seconds:g} s")
        self.transport.close()

    def _send_408(self, message: str) -> None:
        """Answer 408 with the API's JSON error; the route still reading the body sees a close."""
        body = json.dumps({"error": message}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        response = h11.Response(status_code=408, headers=headers, reason=b"Request Timeout")
        for event in (response, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the route's own answer, if any, goes nowhere
            self.cycle.message_event.set()
