"""A ring buffer of the compressed packets of one video stream, aligned to keyframes.

The demuxer thread feeds it one packet at a time (:meth:`PacketRing.add`,
about a microsecond plus a copy of the packet's bytes); it keeps the last
``keep_seconds`` of video, trimmed a whole group of pictures (GOP) at a time so
that it always starts with a keyframe, and never more than ``max_bytes``. An
event clip takes the packets from the keyframe before its pre-roll
(:meth:`PacketRing.capture`) and then receives every new packet until its
post-roll ends; the clip is remuxed from these packets, never re-encoded.

Times: a packet's own time is ``pts * time_base`` of its stream. The pipeline
numbers frames on its own timeline (``Frame.pts_seconds``), which differs by an
offset per connection or per pass of a looping file; :attr:`PacketRing.offset`
holds it, so that an event time from the pipeline finds its packets.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

BACKWARDS_TOLERANCE = 1.0
"""Seconds a packet's time may lie before the newest one before it counts as a new timeline."""


class StoredPacket(NamedTuple):
    """One compressed packet copied out of an ``av.Packet`` (a tuple: cheap to make)."""

    data: bytes
    pts: int | None
    dts: int | None
    keyframe: bool
    duration: int
    time_base: Fraction
    seconds: float
    """Presentation time in seconds, on the stream's own clock (from pts, else dts)."""
    decode_seconds: float
    """Decoding time in seconds (from dts, else pts): never decreases within a stream."""


class Template:
    """The codec parameters of a video stream, kept after its input is closed.

    PyAV's ``add_stream_from_template`` copies a stream's codec parameters
    (extradata included); copying them once into a stream of a never-written
    output container keeps them valid when the demuxer closes its input.
    """

    def __init__(self, stream: Any) -> None:
        import av

        self.codec = stream.codec_context.name
        self.width = stream.codec_context.width
        self.height = stream.codec_context.height
        self.time_base = stream.time_base
        rate = stream.average_rate or stream.guessed_rate
        self.fps = float(rate) if rate else None
        self._holder = av.open(io.BytesIO(), "w", format="matroska")
        try:
            self.stream = self._holder.add_stream_from_template(stream)
        except Exception:  # codecs without an encoder of that name: copy the decoder's context
            self.stream = self._holder.add_stream_from_template(stream, opaque=True)


@dataclass(eq=False)
class Capture:
    """The packets of one clip being recorded: pre-roll from the ring, then live packets.

    ``start``/``end`` are on the pipeline's timeline. The capture ends with the
    first packet decoded at or after ``end`` that is shown after every picture
    taken (that packet excluded), so that every picture in it can be decoded
    and none shown before its last one is missing: with B-frames, the pictures
    shown just before a reference picture are decoded after it, past ``end``.
    """

    start: float
    end: float
    max_seconds: float
    max_bytes: int
    on_done: Callable[[Capture], None]
    template: Template | None = None
    offset: float = 0.0
    packets: list[StoredPacket] = field(default_factory=list)
    latest: StoredPacket | None = None
    """The packet shown last of those taken (with B-frames, not the last one taken)."""
    bytes: int = 0
    done: bool = False
    reason: str = ""
    """Why the capture ended: ``post-roll``, ``size``, ``new stream``, ``closed``, ``stalled``."""
    started: float = field(default_factory=time.monotonic)
    last_packet: float = field(default_factory=time.monotonic)
    context: dict[str, Any] = field(default_factory=dict)
    """Whatever the owner (the clip recorder) keeps with the capture."""

    @property
    def first_seconds(self) -> float | None:
        """Pipeline time of the first picture (the keyframe), None before any packet."""
        return self.packets[0].seconds + self.offset if self.packets else None

    @property
    def last_seconds(self) -> float | None:
        """Pipeline time just after the last picture."""
        latest = self.latest
        if latest is None:
            return None
        return latest.seconds + float(latest.duration * latest.time_base) + self.offset


@dataclass
class _Gop:
    packets: list[StoredPacket]
    bytes: int

    @property
    def seconds(self) -> float:
        return self.packets[0].seconds


class PacketRing:
    """The last ``keep_seconds`` of one stream's compressed packets, starting at a keyframe.

    Thread-safe: :meth:`add` runs on the demuxer thread, :meth:`capture` and the
    rest on whichever thread handles events. ``max_bytes`` bounds the ring's
    memory; a single group of pictures larger than that empties it until the
    next keyframe (counted in :attr:`overflows`).
    """

    def __init__(
        self,
        keep_seconds: float = 8.0,
        max_bytes: int = 64 * 1024 * 1024,
        *,
        stream: Any | None = None,
        offset: float = 0.0,
    ) -> None:
        if keep_seconds <= 0:
            raise ValueError(f"keep_seconds must be positive, got {keep_seconds}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.keep_seconds = float(keep_seconds)
        self.max_bytes = int(max_bytes)
        self.offset = float(offset)
        """Seconds added to a packet's own time to reach the pipeline's timeline."""
        self.packets_added = 0
        self.overflows = 0
        self.untimed = 0
        """Packets with no time stamp at all (a raw H.264 or HEVC elementary stream): not
        kept, as nothing could place them in a clip."""
        self._lock = threading.Lock()
        self._gops: deque[_Gop] = deque()
        self._bytes = 0
        self._newest = float("-inf")
        self._stream: Any | None = None
        self._time_base: Fraction | None = None
        self._scale = 0.0
        self._template: Template | None = None
        self._captures: list[Capture] = []
        if stream is not None:
            self.open(stream, offset)

    # -- feeding (demuxer thread) ------------------------------------------------------------

    def open(self, stream: Any, offset: float | None = None) -> None:
        """A new input (connection, pass of a looping file): its packets start a new timeline.

        Packets of the previous input are dropped and the clips being recorded
        from them end here. :meth:`add` calls this itself when a packet comes
        from another stream object, with the offset unchanged.
        """
        try:
            template: Template | None = Template(stream)
        except Exception as exc:  # never break the demuxer: clips of this input will fail
            log.warning("clips: cannot keep the codec parameters of the stream: %s", exc)
            template = None
        with self._lock:
            finished = self._captures
            self._captures = []
            self._gops.clear()
            self._bytes = 0
            self._newest = float("-inf")
            self._stream = stream
            self._time_base = stream.time_base
            self._scale = float(stream.time_base or 0.0)
            self._template = template
            if offset is not None:
                self.offset = float(offset)
        for capture in finished:
            self._finish(capture, "new stream")

    def add(self, packet: Any) -> None:
        """Keep one ``av.Packet`` of the video stream; empty (flush) packets are ignored."""
        size = packet.size
        if not size:
            return
        if packet.stream is not self._stream:
            self.open(packet.stream)
        pts, dts = packet.pts, packet.dts
        if pts is None and dts is None:
            self.untimed += 1  # nothing to place it in time: a remuxed clip cannot use it either
            return
        # A demuxed packet is in its stream's time base: reading it from the packet
        # would make a new Fraction per packet.
        time_base, scale = self._time_base, self._scale
        if time_base is None:
            time_base = packet.time_base
            scale = float(time_base)
        seconds = (pts if pts is not None else dts) * scale
        decode_seconds = (dts if dts is not None else pts) * scale
        stored = StoredPacket(
            bytes(packet),
            pts,
            dts,
            bool(packet.is_keyframe),
            packet.duration or 0,
            time_base,
            seconds,
            decode_seconds,
        )
        done: list[Capture] = []
        with self._lock:
            self.packets_added += 1
            if decode_seconds < self._newest - BACKWARDS_TOLERANCE:
                # Time stamps jumped back (a wrapped or restarted clock): a new timeline.
                self._gops.clear()
                self._bytes = 0
                done, self._captures = self._captures, []
            self._newest = max(self._newest, decode_seconds)
            self._keep(stored)
            for capture in self._captures:
                if self._take(capture, stored):
                    done.append(capture)
            if done:
                self._captures = [c for c in self._captures if c not in done]
        for capture in done:
            self._finish(capture, capture.reason or "new timeline")

    def _keep(self, packet: StoredPacket) -> None:
        gops = self._gops
        if packet.keyframe:
            gops.append(_Gop([packet], len(packet.data)))
        elif gops:
            gops[-1].packets.append(packet)
            gops[-1].bytes += len(packet.data)
        else:
            return  # before the first keyframe: undecodable on its own
        self._bytes += len(packet.data)
        horizon = self._newest - self.keep_seconds
        while len(gops) > 1 and (gops[1].seconds <= horizon or self._bytes > self.max_bytes):
            self._bytes -= gops.popleft().bytes
        if self._bytes > self.max_bytes:  # one GOP larger than the bound: start again
            self.overflows += 1
            gops.clear()
            self._bytes = 0

    def _take(self, capture: Capture, packet: StoredPacket) -> bool:
        """Give ``packet`` to ``capture``; True when the capture is complete."""
        latest = capture.latest
        if latest is None and not packet.keyframe:
            return False
        if (
            latest is not None
            and packet.decode_seconds + capture.offset >= capture.end
            and packet.seconds >= latest.seconds
        ):  # past the end, and shown after every picture taken: none to come fills a hole
            capture.reason = "post-roll"
            return True
        if capture.bytes + len(packet.data) > capture.max_bytes:
            capture.reason = "size"
            return True
        capture.packets.append(packet)
        if latest is None or packet.seconds > latest.seconds:
            capture.latest = packet
        capture.bytes += len(packet.data)
        capture.last_packet = time.monotonic()
        return False

    # -- clips (event thread) -----------------------------------------------------------------

    def capture(
        self,
        start: float,
        end: float,
        on_done: Callable[[Capture], None],
        *,
        max_seconds: float = 120.0,
        max_bytes: int = 256 * 1024 * 1024,
        context: dict[str, Any] | None = None,
    ) -> Capture:
        """Record from the keyframe at or before ``start`` until ``end`` (pipeline times).

        The packets already in the ring are taken at once; later ones as they
        come. ``on_done(capture)`` is called once, on the thread that ends it
        (usually the demuxer's), so it must not block. Where the ring no longer
        holds ``start``, the capture begins with its oldest keyframe; where it
        is empty, with the next keyframe. ``context`` rides along for ``on_done``.
        """
        capture = Capture(start, end, max_seconds, max_bytes, on_done, context=context or {})
        complete = False
        with self._lock:
            capture.template = self._template
            capture.offset = self.offset
            packets = [p for gop in self._gops for p in gop.packets]
            first = 0
            for i, p in enumerate(packets):
                if p.keyframe and p.seconds + self.offset <= start:
                    first = i
            for p in packets[first:]:
                if self._take(capture, p):
                    complete = True
                    break
            if not complete:
                self._captures.append(capture)
        if complete:
            self._finish(capture, capture.reason)
        return capture

    def extend(self, capture: Capture, end: float) -> bool:
        """Move a capture's end later (bounded by its ``max_seconds``); False once it is done."""
        with self._lock:
            if capture.done or capture not in self._captures:
                return False
            begin = capture.first_seconds if capture.packets else capture.start
            capture.end = max(capture.end, min(end, begin + capture.max_seconds))
            return True

    def finish(self, capture: Capture, reason: str) -> None:
        """End a capture now with the packets it has (a stalled stream, shutting down)."""
        with self._lock:
            if capture not in self._captures:
                return
            self._captures.remove(capture)
        self._finish(capture, reason)

    def close(self) -> None:
        """The stream is gone: end every capture and drop the packets."""
        with self._lock:
            finished, self._captures = self._captures, []
            self._gops.clear()
            self._bytes = 0
        for capture in finished:
            self._finish(capture, "closed")

    def _finish(self, capture: Capture, reason: str) -> None:
        if capture.done:
            return
        capture.done = True
        capture.reason = reason
        try:
            capture.on_done(capture)
        except Exception as exc:  # the demuxer thread must never die of a clip
            log.error("clip hand-over failed: %s: %s", type(exc).__name__, exc)

    # -- inspection ---------------------------------------------------------------------------

    @property
    def captures(self) -> list[Capture]:
        with self._lock:
            return list(self._captures)

    def packets(self) -> list[StoredPacket]:
        """A copy of the packets held now, oldest (a keyframe) first."""
        with self._lock:
            return [p for gop in self._gops for p in gop.packets]

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def seconds(self) -> float:
        """Span of video held, from the first keyframe to the newest packet."""
        with self._lock:
            if not self._gops:
                return 0.0
            return max(0.0, self._newest - self._gops[0].seconds)

    @property
    def template(self) -> Template | None:
        return self._template
