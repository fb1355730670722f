"""Live streams (RTSP, HTTP/HLS, V4L2...): a reader thread that never silently dies.

A reader thread connects, decodes and hands frames to the pipeline through a
bounded :class:`~vstream.sources.queue.FrameQueue` whose freshness policy
decides what a slow pipeline costs: dropped (and counted) old frames with
``latest``, backpressure with ``block``. When the stream errors, ends or
stalls, the thread reconnects with exponential backoff and jitter, forever or
up to the policy's limit, and every change of state is logged, with
credentials redacted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import torch

from vstream.decoders import Decoder, DecoderKind, open_decoder, resolve_decoder
from vstream.errors import SourceError
from vstream.frame import Frame
from vstream.sources.backoff import Backoff
from vstream.sources.base import SourceState, SourceStats
from vstream.sources.options import FreshnessPolicy, SourceOptions
from vstream.sources.queue import FrameQueue
from vstream.uri import redact_uri, stream_name

log = logging.getLogger(__name__)

JOIN_SECONDS = 1.0
"""How long close() waits for the reader thread to leave FFmpeg.

A read blocked on a silent peer returns only at the read timeout; close()
does not wait for that: the thread is a daemon and closes its own connection
when the read returns.
"""


def check_live_options(options: SourceOptions) -> None:
    """Reject options a live source cannot honour, before any thread starts."""
    file_only = {
        "a start time": options.start_seconds is not None,
        "a stride": options.stride != 1,
        "loop": options.loop,
        "realtime": options.realtime,
    }
    for name, given in file_only.items():
        if given:
            raise SourceError(f"{name} applies to video files, not to live streams")
    if options.rtsp_transport not in ("tcp", "udp"):
        raise SourceError(f"RTSP transport must be tcp or udp, got {options.rtsp_transport!r}")
    if options.queue_size < 1:
        raise SourceError(f"queue size must be at least 1, got {options.queue_size}")
    if min(options.open_timeout_seconds, options.read_timeout_seconds) <= 0:
        raise SourceError("open and read timeouts must be positive")
    policy = options.reconnect
    if policy.watchdog_seconds <= 0 or policy.initial_delay_seconds < 0:
        raise SourceError("the watchdog time must be positive and reconnect delays not negative")
    if policy.max_attempts is not None and policy.max_attempts < 0:
        raise SourceError(f"reconnect attempts must not be negative, got {policy.max_attempts}")


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
    """Frames of a live stream, reconnecting by itself, with a freshness policy.

    The reader thread starts at construction; iterate to receive frames.
    Time stamps count seconds since the source was opened, across
    reconnections; ``options.end_seconds`` ends the stream at that time.
    ``state`` and ``stats`` may be read from any thread at any time, and
    :meth:`close` (from any thread) ends the iteration promptly.
    """

    def __init__(
        self,
        uri: str,
        *,
        stream_id: str | None = None,
        device: str | torch.device = "cpu",
        options: SourceOptions | None = None,
    ) -> None:
        self.options = options or SourceOptions()
        check_live_options(self.options)
        self._uri = uri
        self.name = redact_uri(uri)
        """The address as it may be shown: credentials replaced by ``***``."""
        self.stream_id = stream_id or stream_name(uri)
        self.device = torch.device(device)
        self.decoder_kind = resolve_decoder(self.options.decoder, self.device)
        self.policy = FreshnessPolicy(self.options.policy or FreshnessPolicy.LATEST)
        self.stats = SourceStats()
        self._queue: FrameQueue[Frame] = FrameQueue(self.options.queue_size, self.policy)
        self._stop = threading.Event()
        self._state = SourceState.CONNECTING
        self._error: SourceError | None = None
        self._end_reached = False
        self._cuda_stream = (
            torch.cuda.current_stream(self.device).cuda_stream
            if self.decoder_kind is DecoderKind.NVDEC
            else None
        )
        self._thread = threading.Thread(
            target=self._run, name=f"vstream-source-{self.stream_id}", daemon=True
        )
        log.info("%s: connecting to %s", self.stream_id, self.name)
        self._thread.start()

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
        return open_decoder(
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
            cuda_stream=self._cuda_stream,
            threads=self.options.decoder_threads,
        )

    def _run(self) -> None:
        """The reader thread: connect, stream, and reconnect until closed or out of attempts."""
        backoff = Backoff(self.options.reconnect)
        started = time.time()
        last_frame: float | None = None
        try:
            while not self._stop.is_set():
                reason, last_frame = self._connection(backoff, started, last_frame)
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
                    else:
                        self._fail(f"{reason}; no reconnection attempts left")
                    return
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
        except Exception as exc:  # a bug must end the stream loudly, never silently
            self._fail(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            self._queue.close()
            if self._state is not SourceState.FAILED:
                self._state = SourceState.FINISHED

    def _connection(
        self, backoff: Backoff, started: float, last_frame: float | None
    ) -> tuple[str | None, float | None]:
        """One connection, from opening to its end; the reason it ended (None: end of stream)."""
        try:
            decoder = self._open()
        except SourceError as exc:
            return str(exc), last_frame
        corrupt_before = self.stats.corrupt_packets
        pts_offset: float | None = None
        try:
            for picture in decoder.pictures():
                if self._stop.is_set():
                    return None, last_frame
                now = time.time()
                self.stats.frames_decoded += 1
                self.stats.corrupt_packets = corrupt_before + decoder.corrupt_packets
                if pts_offset is None:
                    # Time stamps restart with every connection: continue them from the
                    # wall clock, so the gap of a reconnection shows in the records.
                    pts_offset = (now - started) - (picture.pts_seconds or 0.0)
                    self._streaming(backoff, now, last_frame)
                pts = (
                    picture.pts_seconds + pts_offset
                    if picture.pts_seconds is not None
                    else now - started
                )
                if self.options.end_seconds is not None and pts >= self.options.end_seconds:
                    self._end_reached = True
                    return None, last_frame
                frame = picture.to_frame(self.stream_id, self.stats.frames_decoded - 1, pts, now)
                last_frame = now
                if not self._queue.put(frame):
                    return None, last_frame
                self.stats.frames_dropped = self._queue.dropped
            return None, last_frame
        except SourceError as exc:
            return str(exc), last_frame
        except Exception as exc:  # whatever breaks a connection, the next one may work
            return f"{type(exc).__name__}: {exc}", last_frame
        finally:
            self.stats.corrupt_packets = corrupt_before + decoder.corrupt_packets
            decoder.close()

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

    def _fail(self, reason: str) -> None:
        self._error = SourceError(f"{self.name}: {redact_uri(reason)}")
        self._set_state(SourceState.FAILED, reason)

    def __iter__(self) -> Iterator[Frame]:
        """Frames as the policy hands them over; :class:`SourceError` if the source failed."""
        while True:
            frame = self._queue.get()
            if frame is None or self._stop.is_set():
                break
            self.stats.frames_delivered += 1
            yield frame
        if self._error is not None and not self._stop.is_set():
            raise self._error

    def close(self) -> None:
        """Stop the reader and end the iteration; safe from any thread, and more than once."""
        self._stop.set()
        self._queue.close()
        self._queue.clear()
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_SECONDS)
        if self._state is not SourceState.FAILED:
            self._state = SourceState.FINISHED

    def __enter__(self) -> LiveSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
