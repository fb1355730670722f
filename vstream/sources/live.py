"""Live streams (RTSP, HTTP/HLS, V4L2...): connect, decode, reconnect, never silently die.

Iterating a :class:`LiveSource` connects, decodes and yields frames on the
calling thread (the engine gives each stream a reader thread of its own, and
its intake queue applies the freshness policy). When the stream fails in a
way that may pass (refused, timed out, stalled, cut off: a
:class:`~vstream.errors.TransientError`) or simply ends, the source
reconnects with exponential backoff and jitter, forever or up to the policy's
limit. Anything else (an unsupported codec, a bug) fails the stream at once,
with one line: retrying a bug forever only looks like a flaky camera. Every
change of state is logged, with credentials redacted.

Live input is decoded for low delay: FFmpeg's frame threading holds back one
frame per thread, so live streams decode with slice threads and the
decoder's low-delay flag (see :mod:`vstream.decoders.cpu`); NVDEC's parser and
display queue hold back two, so every packet is marked a whole picture and the
queue is left out (see :mod:`vstream.decoders.nvdec`). A frame's capture time, which
its age counts from, is when its packet was read, less how far the stream had fallen
behind its camera then (:mod:`vstream.decoders.backlog`): what a decoder still holds back
(B-frames), and what waits in the socket when decoding is slower than the camera, are
part of the age a viewer sees. Under the ``latest`` policy that backlog is also bounded:
past ``max_behind_seconds``, the demuxer skips the waiting packets, undecoded and counted
(``stats.packets_skipped``), up to a key frame read in step with the camera again. A
connection starts at the stream's first key frame: the packets before it, which refer to
pictures never received, are skipped and counted the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterator

import torch

from vstream.config.sources import FreshnessPolicy, SourceOptions
from vstream.decoders import Decoder, open_decoder, resolve_decoder
from vstream.decoders.backlog import STEP_BACK_SECONDS, WARN_AFTER_SECONDS, WARN_SECONDS
from vstream.decoders.base import PacketStamp, Picture
from vstream.errors import SourceError, TransientError, describe
from vstream.frame import Frame
from vstream.sources.backoff import Backoff
from vstream.sources.base import PacketTap, ResumePoint, SourceState, SourceStats
from vstream.uri import redact_uri, stream_name

log = logging.getLogger(__name__)

DEFAULT_FRAME_STEP_SECONDS = 0.04
"""The step between two frames before one is seen (25 frames a second)."""


def check_live_options(options: SourceOptions) -> None:
    """Reject file playback options, which a live stream cannot honour."""
    file_only = {
        "a start time": options.start_seconds is not None,
        "a stride": options.stride != 1,
        "loop": options.loop,
        "realtime": options.realtime,
    }
    for name, given in file_only.items():
        if given:
            raise SourceError(f"{name} applies to video files, not to live streams")


def ffmpeg_input(uri: str, options: SourceOptions) -> tuple[dict[str, str], str | None]:
    """FFmpeg options and input format that give ``uri`` the transport and time limits asked for."""
    microseconds = str(int(options.read_timeout_seconds * 1_000_000))
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    # Probing a live stream delays its first frame, after every reconnection too: FFmpeg
    # waits for 20 frames to guess a frame rate nothing here needs; 3 are enough.
    ffmpeg = {"fpsprobesize": "3"}
    if scheme in ("rtsp", "rtsps"):
        ffmpeg |= {"rtsp_transport": options.rtsp_transport, "timeout": microseconds}
    elif scheme:
        ffmpeg["rw_timeout"] = microseconds
    input_format = options.input_format
    if input_format is None and uri.startswith("/dev/video"):
        input_format = "v4l2"
    return ffmpeg, input_format


class LiveSource:
    """Frames of a live stream, reconnecting by itself, read on the iterating thread.

    Time stamps count seconds since the iteration started, across
    reconnections, so a gap shows in the records; ``options.end_seconds`` ends
    the stream at that time. ``resume`` continues a stream read elsewhere
    before (a cluster worker was lost): indices go on after its last frame,
    time stamps by the wall clock since it, and the gap is reported as after
    a reconnection. ``state`` and ``stats`` may be read from any
    thread at any time, and :meth:`close` (from any thread) ends the iteration
    at the next frame, or when a blocked read returns (at the latest after
    ``read_timeout_seconds``).
    """

    def __init__(
        self,
        uri: str,
        *,
        stream_id: str | None = None,
        device: str | torch.device = "cpu",
        options: SourceOptions | None = None,
        packet_tap: PacketTap | None = None,
        resume: ResumePoint | None = None,
    ) -> None:
        self.options = options or SourceOptions()
        self.resume = resume
        check_live_options(self.options)
        self.packet_tap = packet_tap
        self._uri = uri
        self.name = redact_uri(uri)
        """The address as it may be shown: credentials replaced by ``***``."""
        self.stream_id = stream_id or stream_name(uri)
        self.device = torch.device(device)
        self.decoder_kind = resolve_decoder(self.options.decoder, self.device)
        self.stats = SourceStats()
        self._stop = threading.Event()
        self._state = SourceState.CONNECTING
        self._end_reached = False
        self._behind_since: float | None = None
        """Read time of the first frame of the backlog now lasting (this connection's)."""
        self._behind_told = False
        self._last_out: float | None = resume.pts_seconds if resume is not None else None
        """The time stamp of the last frame delivered (or resumed after): the next is later."""
        self._frame_step = DEFAULT_FRAME_STEP_SECONDS
        """The latest step between two frames delivered: where a restarted clock's first
        frame goes after the last one."""

    @property
    def state(self) -> SourceState:
        return self._state

    def _set_state(self, state: SourceState, detail: str = "") -> None:
        if state is self._state:
            return
        self._state = state
        log.log(
            logging.WARNING if state is SourceState.FAILED else logging.INFO,
            "%s: %s%s",
            self.stream_id,
            state.value,
            f" ({redact_uri(detail)})" if detail else "",
        )

    def _open(self) -> Decoder:
        ffmpeg, input_format = ffmpeg_input(self._uri, self.options)
        reconnect = self.options.reconnect
        decoder = open_decoder(
            self._uri,
            kind=self.decoder_kind,
            device=self.device,
            pixel_format=self.options.pixel_format,
            ffmpeg_options=ffmpeg,
            input_format=input_format,
            timeout=(
                self.options.open_timeout_seconds,
                min(self.options.read_timeout_seconds, reconnect.watchdog_seconds),
            ),
            stall_seconds=reconnect.watchdog_seconds,
            threads=self.options.decoder_threads,
            low_delay=True,
            max_behind_seconds=self._skip_limit(),
        )
        decoder.demuxer.tap = self.packet_tap
        decoder.demuxer.stop = self._stop
        return decoder

    def _skip_limit(self) -> float | None:
        """How far behind its camera the stream may fall before its packets are skipped:
        ``max_behind_seconds``, except under the block policy, which never drops a frame."""
        if self.options.policy is FreshnessPolicy.BLOCK:
            return None
        return self.options.max_behind_seconds

    def __iter__(self) -> Iterator[Frame]:
        """Connect, yield frames, reconnect until closed, out of attempts or failed.

        Raises :class:`SourceError` once the source has failed (after the
        frames read before); a bug raises as itself, once, never retried.
        """
        log.info("%s: connecting to %s", self.stream_id, self.name)
        backoff = Backoff(self.options.reconnect)
        started = time.time()
        last_frame: float | None = None
        if self.resume is not None:
            # Another host's clock may be ahead: time stamps must still go forward.
            last_frame = min(self.resume.wall_time, started)
            started = last_frame - self.resume.pts_seconds
        try:
            while not self._stop.is_set():
                reason, last_frame = yield from self._connection(backoff, started, last_frame)
                if self._stop.is_set():
                    break
                if self._end_reached:
                    self._set_state(SourceState.FINISHED, "end time reached")
                    return
                if reason is None and not self.options.reconnect.on_end:
                    self._set_state(SourceState.FINISHED, "end of stream")
                    return
                if backoff.exhausted:
                    if reason is None:
                        self._set_state(SourceState.FINISHED, "end of stream, no reconnection left")
                        return
                    raise SourceError(f"{self.name}: {reason}; no reconnection attempts left")
                delay = backoff.next_delay()
                self.stats.reconnects += 1
                self._set_state(SourceState.RECONNECTING)
                log.warning(
                    "%s: %s; reconnecting in %.1f s (attempt %d)",
                    self.stream_id,
                    redact_uri(reason or "end of stream"),
                    delay,
                    backoff.attempts,
                )
                self._stop.wait(delay)
        except Exception as exc:  # fatal: fail once, loudly, and let the caller see it
            self._set_state(SourceState.FAILED, describe(exc))
            raise
        finally:
            if self._state is not SourceState.FAILED:
                self._state = SourceState.FINISHED

    def _connection(
        self, backoff: Backoff, started: float, last_frame: float | None
    ) -> Generator[Frame, None, tuple[str | None, float | None]]:
        """One connection, from opening to its end; returns why it ended (None: end of stream).

        Only a :class:`TransientError` ends a connection with a reason to
        retry; anything else propagates and fails the source.
        """
        try:
            decoder = self._open()
        except TransientError as exc:
            return str(exc), last_frame
        corrupt_before = self.stats.corrupt_packets
        skipped_before = self.stats.packets_skipped
        joined_at = skipped_before  # and after the packets before the first key frame
        told = skipped_before  # the skipped packets said (logged) so far

        def counted_now() -> None:  # the one place the count moves: at each packet skipped
            self.stats.packets_skipped = skipped_before + decoder.packets_skipped

        decoder.demuxer.on_skip = counted_now
        pts_offset: float | None = None
        last_pts: float | None = None
        self._behind_since, self._behind_told = None, False
        try:
            for picture in decoder.pictures():
                if self._stop.is_set():
                    return None, last_frame
                now = time.time()
                self.stats.frames_decoded += 1
                self.stats.corrupt_packets = corrupt_before + decoder.corrupt_packets
                skipped = skipped_before + decoder.packets_skipped
                if skipped > told:
                    if pts_offset is None:  # the connection's first picture
                        log.info(
                            "%s: joined between key frames: %d packets before the first "
                            "skipped undecoded",
                            self.stream_id,
                            skipped - skipped_before,
                        )
                        joined_at = skipped
                    else:
                        self._caught_up(skipped - told, told == joined_at, picture, last_pts)
                    told = skipped
                previous, last_pts = last_pts, picture.pts_seconds
                restarted = (
                    previous is not None
                    and last_pts is not None
                    and last_pts < previous - STEP_BACK_SECONDS
                )
                if pts_offset is None or restarted:
                    # Time stamps restart with every connection, and where the camera's
                    # clock starts again: continue them from the wall clock, so the gap of a
                    # reconnection shows in the records, after the last one delivered.
                    pts_offset = self._anchor(now - started, picture.pts_seconds or 0.0)
                    if self.packet_tap is not None:
                        self.packet_tap.offset = pts_offset
                    if not restarted:
                        self._streaming(backoff, now, last_frame)
                pts = (
                    picture.pts_seconds + pts_offset
                    if picture.pts_seconds is not None
                    else now - started
                )
                if self._last_out is not None:
                    # Never back (a tracker takes that for a new scene); a step taken once.
                    if pts > self._last_out:
                        self._frame_step = pts - self._last_out
                    pts = max(pts, self._last_out)
                if self.options.end_seconds is not None and pts >= self.options.end_seconds:
                    self.stats.frames_skipped += 1
                    self._end_reached = True
                    return None, last_frame
                last_frame = now
                self.stats.frames_delivered += 1
                # Its place among the pictures read, skipped ones included: a skip shows
                # in the frame numbers as in the time stamps.
                index = self.stats.frames_decoded + self.stats.packets_skipped - 1
                if self.resume is not None:
                    index += self.resume.index + 1
                # Aged from its packet's arrival, less what the stream had fallen behind its
                # camera then: the decoder's delay and the backlog are part of its age.
                packet = picture.packet
                captured = now if packet is None else self._captured(packet)
                self._last_out = pts
                yield picture.to_frame(self.stream_id, index, pts, captured)
            return None, last_frame
        except TransientError as exc:
            return str(exc), last_frame
        finally:
            self.stats.corrupt_packets = corrupt_before + decoder.corrupt_packets
            decoder.close()

    def _anchor(self, elapsed: float, first_pts: float) -> float:
        """The offset from the camera's clock to the records' where that clock (re)starts at
        ``first_pts``, ``elapsed`` seconds of wall clock into the run: the wall clock's,
        unless that would not follow the last time stamp delivered (a connection that had
        run ahead of the wall clock, reading a burst the camera held for it)."""
        offset = elapsed - first_pts
        if self._last_out is not None and first_pts + offset <= self._last_out:
            offset = self._last_out + self._frame_step - first_pts
        return offset

    def _captured(self, packet: PacketStamp) -> float:
        """When a frame's ``packet`` was sent, by the stream's pace: its read time less what
        the stream had fallen behind (:mod:`vstream.decoders.backlog`). A backlog that
        lasts is told once, and its end."""
        read, behind = packet
        self.stats.behind_seconds = behind
        if behind < WARN_SECONDS / 2:
            if self._behind_told:
                log.info("%s: caught up with the camera", self.stream_id)
            self._behind_since, self._behind_told = None, False
        elif behind >= WARN_SECONDS:
            if self._behind_since is None:
                self._behind_since = read
            elif not self._behind_told and read - self._behind_since >= WARN_AFTER_SECONDS:
                self._behind_told = True
                log.warning(
                    "%s: frames read %.1f s behind the camera's pace (decoding, or the "
                    "network, is slower than the stream)",
                    self.stream_id,
                    behind,
                )
        return read - behind

    def _caught_up(self, count: int, first: bool, picture: Picture, last_pts: float | None) -> None:
        """``count`` packets were skipped before ``picture`` to catch up: say so, the
        ``first`` time in the connection as a warning (later ones are in the counters, and
        at debug level)."""
        gap = (
            f" (a {picture.pts_seconds - last_pts:.2f} s gap in the video)"
            if picture.pts_seconds is not None and last_pts is not None
            else ""
        )
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "%s: fell over %g s behind the camera: %d packets skipped%s to catch up at a key frame",
            self.stream_id,
            self.options.max_behind_seconds,
            count,
            gap,
        )

    def _streaming(self, backoff: Backoff, now: float, last_frame: float | None) -> None:
        """The first frame of a connection: reset the backoff and report the gap."""
        backoff.reset()
        if last_frame is None:
            self._set_state(SourceState.STREAMING)
            return
        gap = now - last_frame
        self.stats.last_gap_seconds = gap
        self._set_state(SourceState.STREAMING)
        log.info(
            "%s: streaming again after a %.2f s gap (%d reconnects so far)",
            self.stream_id,
            gap,
            self.stats.reconnects,
        )

    def close(self) -> None:
        """End the iteration; safe from any thread, and more than once."""
        self._stop.set()
        if self._state is not SourceState.FAILED:
            self._state = SourceState.FINISHED

    def __enter__(self) -> LiveSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
