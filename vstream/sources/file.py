"""Video files: every frame once, in order, with start/end, stride, realtime pacing and loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import torch

from vstream.config.sources import SourceOptions
from vstream.decoders import Decoder, Picture, open_decoder
from vstream.errors import SourceError
from vstream.frame import Frame
from vstream.sources.base import PacketTap, ResumePoint, SourceState, SourceStats

log = logging.getLogger(__name__)

_PTS_TOLERANCE = 1e-6
"""Seconds of rounding allowed when comparing a frame's time stamp with start/end."""


class Pacer:
    """Sleeps until each time stamp is due on the wall clock, counted from the first one.

    A consumer slower than real time is never made to wait; waiting ends early
    when ``stop`` is set, so closing a paced source is prompt.
    """

    def __init__(self, stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
        self._stop = stop
        self._clock = clock
        self._origin: tuple[float, float] | None = None

    def __call__(self, pts: float) -> None:
        now = self._clock()
        if self._origin is None:
            self._origin = (now, pts)
            return
        wall0, pts0 = self._origin
        delay = wall0 + (pts - pts0) - now
        if delay > 0:
            self._stop.wait(delay)


class VideoFileSource:
    """Every frame of a video file exactly once, in order, as :class:`Frame` tensors.

    ``options`` select a time range (``start_seconds``/``end_seconds``), keep
    every n-th frame (``stride``), pace frames at the file's own rate
    (``realtime``) and start again at the end (``loop``). Frame indices count
    the frames of the selected range, so with a stride of 3 they go 0, 3, 6;
    indices and time stamps keep increasing across loops, so a looped file
    looks like one long stream.

    Damaged packets are skipped and counted in :attr:`stats`; a pass that ends
    before the frame count its container declares is reported as truncated
    after the frames that could be decoded were delivered.

    ``resume`` starts after a frame already delivered elsewhere (a cluster
    worker was lost): the file is sought to that frame's time stamp, the
    frames up to it are skipped, and indices continue from it, so every frame
    is still delivered once with its original index and time stamp. A looped
    file is endless, like a camera: it continues at the start of a new pass,
    its indices and time stamps continuing after the gap.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        stream_id: str | None = None,
        device: str | torch.device = "cpu",
        options: SourceOptions | None = None,
        packet_tap: PacketTap | None = None,
        resume: ResumePoint | None = None,
    ) -> None:
        self.path = Path(path)
        self.resume = resume
        self.packet_tap = packet_tap
        self.stream_id = stream_id or self.path.stem
        self.device = torch.device(device)
        self.options = options or SourceOptions()
        if not self.path.is_file():
            raise SourceError(f"video file not found: {self.path}")
        self._stop = threading.Event()
        self._decoding = threading.Lock()
        """Held while the decoder works, so close() from another thread never pulls it away."""
        self._decoder: Decoder | None = self._open()
        self.info = self._decoder.info
        self._state = SourceState.STREAMING
        self._corrupt_in_finished_passes = 0
        self.stats = SourceStats()

    def _open(self) -> Decoder:
        decoder = open_decoder(
            str(self.path),
            kind=self.options.decoder,
            device=self.device,
            pixel_format=self.options.pixel_format,
            threads=self.options.decoder_threads,
        )
        decoder.demuxer.tap = self.packet_tap
        return decoder

    @property
    def state(self) -> SourceState:
        return self._state

    @property
    def decoder_name(self) -> str:
        """Which decoder reads the file: ``cpu`` or ``nvdec``."""
        return self._decoder.name if self._decoder is not None else self.options.decoder.value

    @property
    def frame_count(self) -> int | None:
        """Frames the container declares, or None when it does not say."""
        return self.info.frame_count

    @property
    def fps(self) -> float | None:
        return self.info.fps

    def _pictures(self, decoder: Decoder) -> Iterator[Picture]:
        """The decoder's pictures, each pulled under the lock, until the source is closed."""
        pictures = decoder.pictures()
        while True:
            with self._decoding:
                if self._stop.is_set():
                    return
                picture = next(pictures, None)
            if picture is None:
                return
            self.stats.frames_decoded += 1
            self.stats.corrupt_packets = self._corrupt_in_finished_passes + decoder.corrupt_packets
            yield picture

    def __iter__(self) -> Iterator[Frame]:
        """Every selected frame, in order, read on the calling thread."""
        for frame in self._frames():
            self.stats.frames_delivered += 1
            yield frame

    def _frames(self) -> Generator[Frame, None, None]:
        options = self.options
        start = options.start_seconds or 0.0
        end = options.end_seconds
        next_index = 0
        pts_offset = 0.0
        # After a resume, the first pass skips the frames up to this time stamp.
        skip_through: float | None = None
        if self.resume is not None:
            next_index = self.resume.index + 1
            if options.loop:
                gap = max(time.time() - self.resume.wall_time, self._frame_period(1, 0.0, 0.0))
                pts_offset = self.resume.pts_seconds + gap - start
                if self.packet_tap is not None:
                    self.packet_tap.offset = pts_offset
            else:
                skip_through = self.resume.pts_seconds
        pace = Pacer(self._stop) if options.realtime else None
        try:
            while True:
                with self._decoding:
                    decoder = self._decoder
                    if decoder is None or self._stop.is_set():
                        break
                    decoder.seek(start if skip_through is None else max(start, skip_through))
                first = last = skip_through
                in_pass = next_index if skip_through is not None else 0
                for picture in self._pictures(decoder):
                    pts = picture.pts_seconds
                    if pts is None:
                        pts = start + in_pass / (self.fps or 1.0)
                    before = pts < start - _PTS_TOLERANCE or (
                        skip_through is not None and pts <= skip_through + _PTS_TOLERANCE
                    )
                    after = end is not None and pts >= end - _PTS_TOLERANCE
                    if before or after:
                        self.stats.frames_skipped += 1  # decoded, not selected: counted
                        if after:
                            break
                        continue
                    first = pts if first is None else first
                    last = pts
                    in_pass += 1
                    index, next_index = next_index, next_index + 1
                    if index % options.stride:
                        self.stats.frames_skipped += 1
                        continue
                    if pace is not None:
                        pace(pts + pts_offset)
                    yield picture.to_frame(self.stream_id, index, pts + pts_offset, time.time())
                if self._stop.is_set():
                    return
                self._end_pass(decoder, in_pass, last)
                if first is None or last is None:
                    raise SourceError(f"{self.path}: no frames in the selected time range")
                pts_offset += last - first + self._frame_period(in_pass, first, last)
                skip_through = None
                if self.packet_tap is not None:
                    self.packet_tap.offset = pts_offset
                with self._decoding:
                    decoder.close()
                    self._decoder = (
                        self._open() if options.loop and not self._stop.is_set() else None
                    )
        except SourceError:
            self._state = SourceState.FAILED
            raise
        finally:
            self.close()

    def _end_pass(self, decoder: Decoder, frames_in_pass: int, last_pts: float | None) -> None:
        """Account for one pass; fail if the file turned out damaged or truncated.

        Every decodable frame has been delivered by then; failing makes sure
        nobody takes the output for a complete account of the file. Truncation
        shows as fewer frames than the container declares (MP4, MOV, AVI) or
        as an end before its declared duration (MKV); a TS file cut at a
        packet boundary cannot be told from a shorter one.
        """
        self._corrupt_in_finished_passes += decoder.corrupt_packets
        self.stats.corrupt_packets = self._corrupt_in_finished_passes
        problems = []
        if decoder.corrupt_packets:
            problems.append(f"{decoder.corrupt_packets} damaged packets skipped")
        whole_file = self.options.start_seconds is None and self.options.end_seconds is None
        declared, duration = self.info.frame_count, self.info.duration_seconds
        if whole_file and declared is not None and frames_in_pass < declared:
            problems.append(f"{frames_in_pass} of {declared} frames decoded")
        elif whole_file and duration is not None and last_pts is not None:
            period = 1.0 / self.fps if self.fps else 0.0
            declared_end = self.info.start_seconds + duration
            if declared_end - (last_pts + period) > max(2 * period, 0.1):
                problems.append(
                    f"the video ends at {last_pts + period:.2f} s "
                    f"of a declared {declared_end:.2f} s"
                )
        if problems:
            raise SourceError(
                f"{self.path}: damaged or truncated video ({', '.join(problems)}); "
                f"{frames_in_pass} frames were read"
            )

    def _frame_period(self, frames: int, first: float, last: float) -> float:
        """Duration of one frame, so that the next loop starts one frame after this one ends."""
        if self.fps:
            return 1.0 / self.fps
        return (last - first) / (frames - 1) if frames > 1 else 0.0

    def close(self) -> None:
        """Stop the iteration and release the file; safe from any thread, and more than once.

        When another thread is inside the decoder, that thread releases it as
        soon as the picture it is decoding is done.
        """
        self._stop.set()
        if self._state is SourceState.STREAMING:
            self._state = SourceState.FINISHED
        if not self._decoding.acquire(blocking=False):
            return
        try:
            decoder, self._decoder = self._decoder, None
            if decoder is not None:
                decoder.close()
        finally:
            self._decoding.release()

    def __enter__(self) -> VideoFileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
