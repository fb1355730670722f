"""Demuxing with PyAV (FFmpeg), shared by both decoders.

One demuxer for the CPU and NVDEC paths means one place for what containers
and networks need: transport options, open/read timeouts, the stall watchdog,
seeking, and skipping damaged data.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import av

from vstream.decoders.backlog import Backlog, CatchUp
from vstream.decoders.base import PacketStamp, StreamInfo
from vstream.errors import SourceError, SourceUnavailable
from vstream.uri import redact_uri

log = logging.getLogger(__name__)

_NO_FILE = 0x0001
"""AVFMT_NOFILE: devices and network protocols, whose duration means nothing."""

_NO_TIMESTAMPS = 0x0080
"""AVFMT_NOTIMESTAMPS: raw H.264 or HEVC, whose packets carry no time at all."""

PACKET_STAMPS_KEPT = 256
"""Packet stamps kept for pictures not yet decoded: far more than a decoder holds back
(a DPB of 16 and a few frames of display delay), few enough that damage, whose
pictures never come, cannot make the table grow."""

SEGMENTED_FORMATS = frozenset({"hls", "dash"})
"""Inputs read a segment (seconds of video) at a time: their packets come in bursts by
design, the first of each as old as the segment is long, so a burst is no backlog that
skipping could shorten, and ``max_behind_seconds`` leaves them alone."""

_MP4 = "mp4"
"""One of the names of FFmpeg's MP4/MOV demuxer (``mov,mp4,m4a,3gp,3g2,mj2``)."""

_CLOCK = re.compile(r"(\d+):(\d{2}):(\d{2}(?:\.\d+)?)")
"""``HH:MM:SS.fraction``, how Matroska's ``DURATION`` tag is written."""

MAX_CONSECUTIVE_ERRORS = 200
"""Damaged packets in a row, with no picture between them, before the input is given up.

Large enough to ride out a lost reference frame in a long GOP (a few seconds
of video), small enough to stop quickly on a file that is garbage throughout.
"""


def is_cover(stream: av.stream.Stream) -> bool:
    """Whether ``stream`` is cover art (a song's picture, an MP4's thumbnail): one still
    picture for the file, no video of it."""
    return bool(stream.disposition & av.stream.Disposition.attached_pic)


def clock_seconds(text: str | None) -> float | None:
    """The seconds of an ``HH:MM:SS.fraction`` time, None if ``text`` is not one."""
    found = _CLOCK.fullmatch(text.strip()) if text else None
    if found is None:
        return None
    hours, minutes, seconds = found.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def best_effort_time(item: av.Packet | av.VideoFrame) -> int | None:
    """A packet's or a picture's presentation time, else its decoding time, as FFmpeg's
    ``best_effort_timestamp`` takes it (AVI and raw streams give only one of them); None
    when it has neither."""
    return item.pts if item.pts is not None else item.dts


def av_error_text(exc: BaseException) -> str:
    """One line describing a PyAV error, with any credentials in it redacted.

    PyAV's ``str()`` of an error quotes the URL; its ``strerror`` does not.
    """
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return redact_uri(str(text))


class Demuxer:
    """The packets of the first video stream of a file, URL or capture device (cover art,
    a still picture that audio files carry as a video stream, is no video).

    ``options`` are FFmpeg format/protocol options (``rtsp_transport``,
    ``timeout``...); ``timeout`` is PyAV's ``(open, read)`` limit in seconds,
    so a dead peer cannot block a thread forever; ``stall_seconds`` ends a
    stream whose packets keep coming without the decoder ever reporting a
    picture (see :meth:`progress`). Damaged packets are counted in
    :attr:`corrupt_packets`. ``stamp_packets`` (live input) keeps the wall-clock
    time each packet was read and how far the stream was behind its camera then
    (:class:`~vstream.decoders.backlog.Backlog`), by time stamp, for :meth:`packet_stamp`,
    and skips the packets before the stream's first key frame (joined between two, they
    refer to pictures never read). ``max_behind_seconds`` (live input) bounds that backlog:
    past it, packets are skipped up to a key frame read in step again
    (:class:`~vstream.decoders.backlog.CatchUp`). Skipped packets are counted in
    :attr:`packets_skipped`; the tap still gets every one. Segmented inputs
    (:data:`SEGMENTED_FORMATS`) are never skipped for a backlog.
    """

    def __init__(
        self,
        uri: str,
        *,
        options: Mapping[str, str] | None = None,
        input_format: str | None = None,
        timeout: tuple[float, float] | None = None,
        stall_seconds: float | None = None,
        stamp_packets: bool = False,
        max_behind_seconds: float | None = None,
    ) -> None:
        self.display_name = redact_uri(uri)
        self.stall_seconds = stall_seconds
        self._packet_stamps: dict[int, PacketStamp] | None = {} if stamp_packets else None
        """The stamps of the packets still waiting for their pictures, by time stamp."""
        self.tap: Any = None
        """A :class:`~vstream.sources.base.PacketTap` given every packet, if set."""
        self.on_skip: Callable[[], None] | None = None
        """Called after each packet skipped (:attr:`packets_skipped` counts it already)."""
        self.stop: threading.Event | None = None
        """Set by the reader's owner to end the packets while they are skipped (no picture
        comes out of the decoder then for the reader to look at its own stop)."""
        self.corrupt_packets = 0
        self._errors_in_a_row = 0
        self._last_progress = time.monotonic()
        try:
            self.container = av.open(
                uri, format=input_format, options=dict(options or {}), timeout=timeout
            )
        except (av.error.HTTPUnauthorizedError, av.error.HTTPForbiddenError) as exc:
            # Wrong or missing credentials: connecting again cannot mend them (and a camera
            # may lock the account after a few tries), so the source fails, once.
            raise SourceError(f"cannot open {self.display_name}: {av_error_text(exc)}") from None
        except (av.error.FFmpegError, OSError) as exc:
            # ``from None``: PyAV's own exception quotes the URL, credentials included.
            raise SourceUnavailable(
                f"cannot open {self.display_name}: {av_error_text(exc)}"
            ) from None
        self.stream = self._video_stream()
        self._landed: av.Packet | None = None
        """The key frame a seek found (read to check where it landed), handed out first."""
        limit = None if self.container.format.name in SEGMENTED_FORMATS else max_behind_seconds
        self.catch_up = (
            CatchUp(limit, wait_for_key_frame=stamp_packets)
            if limit is not None or stamp_packets
            else None
        )
        self.backlog = Backlog() if stamp_packets or self.catch_up is not None else None
        """How far behind its camera the stream is read, measured once a packet."""
        codec = self.stream.codec_context
        rate = self.stream.average_rate or self.stream.guessed_rate
        start = self._seconds(self.stream.start_time) or 0.0
        self.info = StreamInfo(
            codec=codec.name,
            width=codec.width,
            height=codec.height,
            fps=float(rate) if rate else None,
            frame_count=self._declared_frames(),
            start_seconds=start,
            duration_seconds=self._declared_duration(start),
        )

    def _video_stream(self) -> av.video.stream.VideoStream:
        videos = self.container.streams.video
        found = [stream for stream in videos if not is_cover(stream)]
        if not found:
            self.container.close()
            covered = " (only cover art)" if videos else ""
            raise SourceError(f"{self.display_name} has no video stream{covered}")
        return found[0]

    def _seconds(self, stream_time: int | None) -> float | None:
        time_base = self.stream.time_base
        if stream_time is None or time_base is None:
            return None
        return float(stream_time * time_base)

    def _declared_frames(self) -> int | None:
        """The pictures the container says the stream shows, None when it does not say.

        An MP4 cut without re-encoding keeps the samples before its first shown picture
        (they are referred to) and hides them with an edit list; FFmpeg flags them
        discarded in its index, its decoder drops their pictures, and the sample count
        still has them (a clip cut at 1.3 s: 75 samples, 67 shown). So an MP4's count is
        its index's entries not discarded; an edit list ending early drops the samples
        after the end from the index as well.
        """
        if _MP4 in self.container.format.name.split(","):
            entries = self.stream.index_entries
            return len(entries) - sum(entry.is_discard for entry in entries) or None
        return self.stream.frames or None

    def _declared_duration(self, start: float) -> float | None:
        """The video stream's declared duration (from ``start``, its first time stamp);
        None for formats that only estimate it, and when only the whole file's is known
        while other streams share it (an audio track running on past the video's end)."""
        if self.container.format.name == "mpegts" or self.container.format.flags & _NO_FILE:
            return None
        if self.container.format.name == "matroska,webm":
            # Matroska declares where the video ends, not how long it lasts: FFmpeg reads
            # a file starting at 10 s that runs 2 s as lasting 12 s.
            end = clock_seconds(self.stream.metadata.get("DURATION")) or self._file_duration()
            return None if end is None else end - start
        return self._seconds(self.stream.duration) or self._file_duration()

    def _file_duration(self) -> float | None:
        """The container's duration, if the video stream is all it spans."""
        others = [
            stream
            for stream in self.container.streams
            if stream is not self.stream and stream.type != "attachment" and not is_cover(stream)
        ]
        if others or self.container.duration is None:
            return None
        return self.container.duration / av.time_base

    def seek(self, seconds: float) -> None:
        """Jump to the key frame at or before ``seconds``; unseekable inputs stay put.

        Where FFmpeg lands is checked, not trusted: in MPEG-TS it lands on the key frame
        after the time asked for (a seek to 1.98 s on the one at 2.44 s), and the pictures
        between would be lost. Until the first key frame read is at or before it, the seek
        goes further back (1 s, then 3 s, 7 s... before it), at worst to the start. The
        packets read before that key frame are dropped: they refer to pictures never read.
        """
        time_base = self.stream.time_base
        if seconds <= 0 or time_base is None or self._untimed:
            return
        target = int(seconds / time_base)
        first = self.stream.start_time or 0
        position, back = target, max(1, int(1 / time_base))  # a second, in the time base
        if not self._seek_to(position):
            return  # unseekable: nothing was read, the input stays put
        while True:
            key = self._key_frame()
            stamp = None if key is None else best_effort_time(key)
            if key is not None and (stamp is None or stamp <= target):
                self._landed = key
                return
            position, back = position - back, 2 * back
            if position < first or not self._seek_to(position):
                break
        self._rewind(first)

    @property
    def _untimed(self) -> bool:
        """Whether the format has no time stamps: FFmpeg cannot seek it, and its attempt
        reads the stream to its end before it says so."""
        return bool(self.container.format.flags & _NO_TIMESTAMPS)

    def _seek_to(self, position: int) -> bool:
        """Seek the stream to ``position`` (its time base); whether FFmpeg could."""
        self._landed = None
        try:
            self.container.seek(position, stream=self.stream, backward=True)
        except av.error.FFmpegError as exc:
            log.debug("%s: seek to %d failed (%s)", self.display_name, position, exc)
            return False
        return True

    def _key_frame(self) -> av.Packet | None:
        """The first key frame from where the input stands, those before it dropped; None if
        none comes (the end, or damage: the seek then goes further back)."""
        try:
            for packet in self.container.demux(self.stream):
                if packet.size and packet.is_keyframe:
                    return packet
        except av.error.FFmpegError as exc:
            log.debug("%s: no key frame after a seek (%s)", self.display_name, exc)
        return None

    def _rewind(self, first: int) -> None:
        """Back to the first packet. Before the first time stamp, where FFmpeg's generic seek
        lands on the first packet (a seek to the first time stamp itself lands after its
        key frame in MPEG-TS, whose seek goes by decoding time); at the first time stamp
        for AVI, which refuses a time before its index."""
        long_before = first - (1 << 40)  # ages before, in any time base
        if not (self._seek_to(long_before) or self._seek_to(first)):
            log.warning(
                "%s: could not seek back to the start; pictures before the first key frame "
                "read may be missing",
                self.display_name,
            )

    def progress(self) -> None:
        """The decoder produced a picture: the stream is alive and not just damage."""
        self._last_progress = time.monotonic()
        self._errors_in_a_row = 0

    def damaged(self, what: str, exc: BaseException | None = None) -> None:
        """Count a damaged packet; give up when nothing but damage is left."""
        self.corrupt_packets += 1
        self._errors_in_a_row += 1
        why = av_error_text(exc) if exc is not None else None  # PyAV's str() quotes the URL
        log.debug("%s: damaged packet (%s: %s)", self.display_name, what, why)
        if self._errors_in_a_row >= MAX_CONSECUTIVE_ERRORS:
            raise SourceUnavailable(
                f"{self.display_name}: {self._errors_in_a_row} damaged packets in a row, "
                f"giving up{f' ({why})' if why else ''}"
            )

    def packets(self) -> Iterator[av.Packet]:
        """Every packet of the stream, then one empty packet that flushes the decoder.

        Damage in the container itself is counted and skipped (FFmpeg
        resynchronises on the next read); errors that end the input (a closed
        connection, a read timeout, a stall) raise :class:`SourceUnavailable`.
        """
        self._last_progress = time.monotonic()
        landed = iter([] if self._landed is None else [self._landed])  # handed out once
        self._landed = None
        while True:
            try:
                for packet in itertools.chain(landed, self.container.demux(self.stream)):
                    self._check_stall()
                    if self.tap is not None and packet.size:
                        self.tap.add(packet)
                    if self.backlog is not None and packet.size and self._skip_or_stamp(packet):
                        if self.stop is not None and self.stop.is_set():
                            return
                        continue
                    yield packet
                return
            except av.error.InvalidDataError as exc:
                self.damaged("demux", exc)
            except (av.error.FFmpegError, OSError) as exc:
                raise SourceUnavailable(
                    f"{self.display_name}: reading failed: {av_error_text(exc)}"
                ) from None

    def _skip_or_stamp(self, packet: av.Packet) -> bool:
        """Measure the backlog at ``packet``; whether the stream is too far behind its camera
        to decode it (``max_behind_seconds``), else stamp it. A packet skipped on purpose is
        not a stall."""
        assert self.backlog is not None
        read, pts = time.time(), self._seconds(packet.pts)
        behind = 0.0 if pts is None else self.backlog.behind(read, pts)
        catch_up = self.catch_up
        if catch_up is not None:
            misjudged = catch_up.misjudged
            if catch_up.skip(pts, behind, packet.is_keyframe):
                self._last_progress = time.monotonic()
                if self.on_skip is not None:
                    self.on_skip()
                return True
            if catch_up.misjudged > misjudged:
                self.backlog.restart(catch_up.clock_lag)
                log.warning(
                    "%s: skipping did not bring its backlog down (%.1f s behind still): "
                    "the camera's clock runs %.1f %% slower than ours; allowed for from here",
                    self.display_name,
                    behind,
                    100 * (1 - 1 / self.backlog.pace),
                )
                behind = self.backlog.behind(read, pts) if pts is not None else 0.0
        if self._packet_stamps is not None and packet.pts is not None:
            self._stamp(packet.pts, PacketStamp(read, behind))
        return False

    @property
    def packets_skipped(self) -> int:
        """Packets read and not decoded: before the stream's first key frame, or the stream
        being too far behind its camera."""
        return self.catch_up.skipped if self.catch_up is not None else 0

    def _stamp(self, pts: int, stamp: PacketStamp) -> None:
        stamps = self._packet_stamps
        assert stamps is not None
        stamps[pts] = stamp
        if len(stamps) > PACKET_STAMPS_KEPT:
            del stamps[next(iter(stamps))]  # the oldest: a picture that never came

    def packet_stamp(self, pts: int | None) -> PacketStamp | None:
        """When the packet of the picture with time stamp ``pts`` was read, and how far the
        stream was behind its camera then, forgotten once asked; None without
        ``stamp_packets``, a time stamp or a record (the first packet of an RTSP session
        has no time stamp before the sender's first report).

        A picture leaves the decoder after its packet, later by the decoder's own delay
        and, with B-frames, by the pictures it waits for: live frames are aged from
        here, so that delay counts in a frame's age as the camera's viewer sees it.
        """
        if self._packet_stamps is None or pts is None:
            return None
        return self._packet_stamps.pop(pts, None)

    def _check_stall(self) -> None:
        if self.stall_seconds and time.monotonic() - self._last_progress > self.stall_seconds:
            raise SourceUnavailable(
                f"{self.display_name}: no picture for {self.stall_seconds:g} s (stalled)"
            )

    def close(self) -> None:
        self.container.close()
