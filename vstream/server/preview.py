"""The live preview: JPEGs of each stream's latest annotated frame, only while someone watches.

The pipeline's delivery thread offers every annotated frame
(:meth:`PreviewHub.offer`); with nobody watching that returns at once, and
:meth:`PreviewHub.watched` lets the pipeline skip annotating altogether. While
a viewer watches, at most ``max_fps`` frames a second are taken (one pending
frame per stream, a newer one replaces it), scaled down on their own device to
at most ``max_width`` pixels and encoded to JPEG on the hub's thread; every
viewer of a stream shares the same JPEGs.

Viewers are asyncio tasks of the HTTP server: :meth:`PreviewHub.mjpeg` is the
body of ``GET /streams/{id}/preview.mjpg`` (``multipart/x-mixed-replace``) and
:meth:`PreviewHub.snapshot` the body of ``GET /streams/{id}/snapshot.jpg``.
Viewers are capped (``max_viewers``); a client that leaves stops counting at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from vstream.clips.jpeg import encode_jpeg
from vstream.config.pipelines import PreviewConfig

log = logging.getLogger(__name__)

BOUNDARY = "frame"
MEDIA_TYPE = f"multipart/x-mixed-replace; boundary={BOUNDARY}"


class TooManyViewers(Exception):
    """The cap on concurrent preview viewers is reached."""


class _Watcher:
    """One waiting viewer, woken from the hub's thread on its own event loop."""

    __slots__ = ("event", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:
        with suppress(RuntimeError):  # its loop is closed: the viewer is gone
            self.loop.call_soon_threadsafe(self.event.set)


_DEFAULTS = PreviewConfig()
"""The defaults of ``server.preview``, which a hub made in Python gets too."""


@dataclass(eq=False)
class _Stream:
    viewers: int = 0
    next_due: float = 0.0
    pending: Any = None
    pending_ready: Any = None
    """A CUDA event recorded after the pending frame was produced (None on the CPU)."""
    jpeg: bytes | None = None
    jpeg_time: float = 0.0
    seq: int = 0
    encodes: int = 0
    offers: int = 0
    failures: int = 0
    closed: bool = False
    watchers: set[_Watcher] = field(default_factory=set)


class PreviewHub:
    """Per-stream JPEG previews, produced only while watched.

    ``max_fps``: frames taken per second and stream while watched.
    ``max_width``: JPEG width limit in pixels (scaled down on the frame's device).
    ``max_viewers``: concurrent viewers (MJPEG and waiting snapshots) over all streams.
    ``snapshot_wait``: seconds a snapshot waits for a fresh frame when nobody watches.
    """

    def __init__(
        self,
        *,
        max_fps: float = _DEFAULTS.max_fps,
        max_width: int = _DEFAULTS.max_width,
        quality: int = _DEFAULTS.quality,
        max_viewers: int = _DEFAULTS.max_viewers,
        snapshot_wait: float = 2.0,
    ) -> None:
        # The bounds are PreviewConfig's (server.preview), checked there: one rule for the
        # file and for Python, one message (a ValueError) for a value out of them.
        options = PreviewConfig(
            max_fps=max_fps, max_width=max_width, quality=quality, max_viewers=max_viewers
        )
        self.max_fps = float(options.max_fps)
        self.max_width = options.max_width
        self.quality = options.quality
        self.max_viewers = options.max_viewers
        self.snapshot_wait = float(snapshot_wait)
        self._period = 1.0 / self.max_fps
        self._streams: dict[str, _Stream] = {}
        self._cond = threading.Condition()
        self._viewers = 0
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- the pipeline's side (any thread) -------------------------------------------------------

    def watched(self, stream_id: str) -> bool:
        """Whether anyone watches ``stream_id`` now: if not, there is no need to annotate."""
        state = self._streams.get(stream_id)
        return state is not None and state.viewers > 0

    def offer(self, stream_id: str, frame: Any | Callable[[], Any]) -> bool:
        """The latest annotated frame of ``stream_id``: an RGB ``uint8`` ``(H, W, 3)`` tensor.

        ``frame`` may be a callable returning it, called here only when the
        frame is taken. Returns at once (False) when nobody watches or a frame
        was taken less than ``1 / max_fps`` ago. A taken frame is read later on
        the hub's thread: the caller must not write into it again (an
        annotated copy is fine; the decoder's own buffer is not).
        """
        state = self._streams.get(stream_id)
        if state is None or state.viewers <= 0:
            return False
        now = time.monotonic()
        if now < state.next_due:
            return False
        behind = now - state.next_due
        state.next_due = (
            now + self._period if behind > self._period else state.next_due + self._period
        )
        try:
            tensor = frame() if callable(frame) else frame
        except Exception as exc:  # a broken annotation must not break delivery
            state.failures += 1
            log.warning("preview of %s: no frame (%s: %s)", stream_id, type(exc).__name__, exc)
            return False
        if tensor is None:
            return False
        ready = None
        if getattr(tensor, "is_cuda", False):
            import torch

            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(tensor.device))
        with self._cond:
            state.pending, state.pending_ready = tensor, ready
            state.offers += 1
            self._cond.notify()
        return True

    def remove(self, stream_id: str) -> None:
        """The stream is gone: its viewers' responses end."""
        with self._cond:
            state = self._streams.pop(stream_id, None)
            if state is None:
                return
            state.closed = True
            state.pending = None
            watchers = list(state.watchers)
        for watcher in watchers:
            watcher.wake()

    def close(self) -> None:
        """Stop the encoding thread and end every viewer's response.

        Call it before stopping the HTTP server: open MJPEG responses then end
        at once instead of holding up the server's graceful shutdown.
        """
        for stream_id in list(self._streams):
            self.remove(stream_id)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    # -- inspection ------------------------------------------------------------------------------

    def viewers(self, stream_id: str | None = None) -> int:
        """Viewers of ``stream_id`` (of every stream when None)."""
        if stream_id is None:
            return self._viewers
        state = self._streams.get(stream_id)
        return state.viewers if state is not None else 0

    def stats(self) -> dict[str, dict[str, int]]:
        """Per stream: viewers, frames taken, JPEGs encoded, failures."""
        with self._cond:
            return {
                sid: {
                    "viewers": s.viewers,
                    "offers": s.offers,
                    "encodes": s.encodes,
                    "failures": s.failures,
                }
                for sid, s in self._streams.items()
            }

    def latest(self, stream_id: str) -> bytes | None:
        """The last JPEG of ``stream_id``, however old (None if there never was one)."""
        state = self._streams.get(stream_id)
        return state.jpeg if state is not None else None

    # -- the viewers' side (asyncio) -------------------------------------------------------------

    async def jpegs(
        self,
        stream_id: str,
        *,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        check_every: float = 1.0,
    ) -> AsyncIterator[bytes]:
        """Each new JPEG of ``stream_id`` while the caller iterates (one viewer).

        Starts with the last JPEG when it is recent. Between frames,
        ``disconnected()`` is asked every ``check_every`` seconds; the
        iteration ends when it says so or the stream is removed. Raises
        :class:`TooManyViewers` at the cap.
        """
        state, watcher = self._join(stream_id)
        try:
            async for jpeg in self._frames(state, watcher, disconnected, check_every):
                yield jpeg
        finally:
            self._leave(state, watcher)

    async def mjpeg(
        self,
        stream_id: str,
        *,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        check_every: float = 1.0,
    ) -> AsyncIterator[bytes]:
        """The body of an MJPEG response (:data:`MEDIA_TYPE`), one part per JPEG.

        The viewer joins on the first step, which yields the opening boundary
        at once (or raises :class:`TooManyViewers`). Each part is followed at
        once by the next boundary, so that a browser shows it without waiting
        for the next frame.
        """
        state, watcher = self._join(stream_id)
        try:
            yield f"--{BOUNDARY}\r\n".encode()
            async for jpeg in self._frames(state, watcher, disconnected, check_every):
                yield b"".join(
                    (
                        b"Content-Type: image/jpeg\r\nContent-Length: ",
                        str(len(jpeg)).encode(),
                        b"\r\n\r\n",
                        jpeg,
                        f"\r\n--{BOUNDARY}\r\n".encode(),
                    )
                )
        finally:
            self._leave(state, watcher)

    async def _frames(
        self,
        state: _Stream,
        watcher: _Watcher,
        disconnected: Callable[[], Awaitable[bool]] | None,
        check_every: float,
    ) -> AsyncIterator[bytes]:
        seq = 0
        if state.jpeg is not None and time.monotonic() - state.jpeg_time < 2.0:
            seq = state.seq
            yield state.jpeg
        while not state.closed:
            got = await self._next(state, watcher, seq, check_every)
            if got is not None:
                jpeg, seq = got
                yield jpeg
            elif disconnected is not None and await disconnected():
                return

    async def snapshot(self, stream_id: str, wait: float | None = None) -> bytes | None:
        """The current annotated frame of ``stream_id`` as a JPEG.

        Fresh while the stream is watched; otherwise this asks the pipeline for
        one frame and waits up to ``wait`` seconds (``snapshot_wait``), then
        falls back to the last JPEG there was. None when there is none at all;
        :class:`TooManyViewers` when every viewer's place is taken (a snapshot
        takes one while it waits), where a JPEG however old, or "no frame yet",
        hid why.
        """
        wait = self.snapshot_wait if wait is None else wait
        state = self._streams.get(stream_id)
        if (
            state is not None
            and state.jpeg is not None
            and state.viewers > 0
            and time.monotonic() - state.jpeg_time < 2 * self._period + 0.5
        ):
            return state.jpeg
        state, watcher = self._join(stream_id)
        try:
            state.next_due = 0.0  # take the very next frame
            got = await self._next(state, watcher, state.seq, wait)
            return got[0] if got is not None else state.jpeg
        finally:
            self._leave(state, watcher)

    # -- internals ---------------------------------------------------------------------------------

    def _join(self, stream_id: str) -> tuple[_Stream, _Watcher]:
        watcher = _Watcher()
        with self._cond:
            if self._stopped:
                raise TooManyViewers("the preview is shut down")
            if self._viewers >= self.max_viewers:
                raise TooManyViewers(
                    f"{self._viewers} preview viewers already (max_viewers {self.max_viewers})"
                )
            state = self._streams.get(stream_id)
            if state is None:
                state = self._streams[stream_id] = _Stream()
            state.viewers += 1
            state.watchers.add(watcher)
            self._viewers += 1
            self._start()
        return state, watcher

    def _leave(self, state: _Stream, watcher: _Watcher) -> None:
        with self._cond:
            if watcher in state.watchers:
                state.watchers.discard(watcher)
                state.viewers -= 1
                self._viewers -= 1
            if state.viewers == 0:
                state.pending = state.pending_ready = None

    async def _next(
        self, state: _Stream, watcher: _Watcher, after: int, timeout: float
    ) -> tuple[bytes, int] | None:
        """The first JPEG newer than ``after``, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            watcher.event.clear()
            if state.seq > after and state.jpeg is not None:
                return state.jpeg, state.seq
            remaining = deadline - time.monotonic()
            if remaining <= 0 or state.closed:
                return None
            try:
                await asyncio.wait_for(watcher.event.wait(), remaining)
            except asyncio.TimeoutError:
                return None

    def _start(self) -> None:
        if self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._work, name="preview", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not any(
                    s.pending is not None for s in self._streams.values()
                ):
                    self._cond.wait(1.0)
                if self._stopped:
                    return
                jobs = []
                for state in self._streams.values():
                    if state.pending is not None:
                        jobs.append((state, state.pending, state.pending_ready))
                        state.pending = state.pending_ready = None
            for state, frame, ready in jobs:
                self._encode(state, frame, ready)

    def _encode(self, state: _Stream, frame: Any, ready: Any) -> None:
        try:
            if ready is not None:
                import torch

                torch.cuda.current_stream(frame.device).wait_event(ready)
            jpeg = encode_jpeg(frame, self.quality, self.max_width)
        except Exception as exc:
            state.failures += 1
            log.warning("preview: cannot encode a frame (%s: %s)", type(exc).__name__, exc)
            return
        with self._cond:
            state.jpeg, state.jpeg_time = jpeg, time.monotonic()
            state.seq += 1
            state.encodes += 1
            watchers = list(state.watchers)
        for watcher in watchers:
            watcher.wake()
