"""Video files: every frame once, in order, with start/end, stride, realtime pacing and loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from vstream.config.sources import SourceOptions, not_a_video_file
from vstream.decoders import Decoder, Picture, open_decoder
from vstream.errors import SourceError
from vstream.frame import Frame
from vstream.sources.base import PacketTap, ResumePoint, SourceState, SourceStats

log = logging.getLogger(__name__)

_PTS_TOLERANCE = 1e-6
"""Seconds of rounding allowed when comparing a frame's time stamp with start/end."""

HELD_WITHOUT_TIME = 32
"""Pictures at the start of a pass held back while none has had a time stamp yet, so that
theirs can be counted back from the first one that comes (:meth:`VideoFileSource._timed`);
past that many, theirs are counted on from the stream's start instead."""


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


@dataclass
class _Pass:
    """How far one pass over the selected range got."""

    index: int
    """The index the next frame of the range gets."""
    frames: int = 0
    """Frames of the range so far, those delivered before a resume included."""
    first: float | None = None
    last: float | None = None
    """Time stamps of the first and last frame of the range so far."""


class _ReadAgain(Exception):
    """The frame a resume goes on after cannot be told by its time stamp: read the pass
    again from the start of the range."""


class _Delivered:
    """Which frames of the first pass after a resume were delivered before it.

    The pass starts at a seek to the last delivered frame's time stamp: the frames up to
    that time stamp were delivered, and indices go on from that frame's. When a second
    frame has that time stamp (a file whose pictures share them), which of them was the
    last delivered is unclear, and skipping both would lose one: the pass is then read
    from the start of the range (:class:`_ReadAgain`), its frames counted as the first
    reading counted them, and those up to the resume point's index skipped.
    """

    def __init__(self, point: ResumePoint) -> None:
        self.point = point
        self.by_index = False
        """Told by index, from the start of the range, rather than by time stamp."""
        self._at_point = 0
        self._passed = False

    def read_from(self, start: float | None) -> float:
        """Where the pass starts reading (a seek), for a range starting at ``start``."""
        start = start or 0.0
        return start if self.by_index else max(start, self.point.pts_seconds)

    def first(self) -> _Pass:
        """The pass as it stands before its first frame is read."""
        if self.by_index:
            return _Pass(index=0)
        after, pts = self.point.index + 1, self.point.pts_seconds
        return _Pass(index=after, frames=after, first=pts, last=pts)

    def before(self, pts: float) -> bool:
        """Whether the frame at ``pts`` was delivered, told by its time stamp;
        :class:`_ReadAgain` at a second frame with the resume point's."""
        if self.by_index:
            return False
        point = self.point.pts_seconds
        if not self._passed and abs(pts - point) <= _PTS_TOLERANCE:
            self._at_point += 1
            if self._at_point > 1:
                self.by_index = True
                raise _ReadAgain
        self._passed = self._passed or pts > point + _PTS_TOLERANCE
        return pts <= point + _PTS_TOLERANCE

    def delivered(self, index: int) -> bool:
        """Whether the frame given ``index`` was delivered, told by its index."""
        return index <= self.point.index


class VideoFileSource:
    """Every frame of a video file exactly once, in order, as :class:`Frame` tensors.

    ``options`` select a time range (``start_seconds``/``end_seconds``, in the
    file's own time stamps, those the frames carry: a file whose first frame is
    at 1.48 s, as FFmpeg writes MPEG-TS, has nothing before 1.48 s), keep every
    n-th frame (``stride``), pace frames at the file's own rate (``realtime``)
    and start again at the end (``loop``). Frame indices count the frames of
    the selected range, so with a stride of 3 they go 0, 3, 6; indices and
    time stamps keep increasing across loops, so a looped file looks like one
    long stream. Without ``start_seconds`` every frame counts, those with
    negative time stamps too (an MPEG-TS clock that wrapped, an MP4 starting
    before 0).

    Damaged packets are skipped and counted in :attr:`stats`; a pass that ends
    before the frame count its container declares is reported as truncated
    after the frames that could be decoded were delivered.

    ``resume`` starts after a frame already delivered elsewhere (a cluster
    worker was lost): the file is sought to that frame's time stamp, the
    frames up to it are skipped, and indices continue from it, so every frame
    is still delivered once with its original index and time stamp (where
    frames share that time stamp, by counting from the range's start,
    :class:`_Delivered`). A looped
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
        if (problem := not_a_video_file(self.path)) is not None:
            raise SourceError(problem)
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

    def _timed(self, pictures: Iterator[Picture]) -> Iterator[tuple[Picture, float]]:
        """Each picture with its time stamp, one it lacks given after the picture before's.

        FFmpeg gives none to some pictures (an MKV's written before its cluster's time,
        an AVI's last when its pts proved wrong): counted on from the start of the pass,
        they would run back in time against those that have one. The pictures before a
        pass's first time stamp are held back (:data:`HELD_WITHOUT_TIME` at most) and
        counted back from it, one frame period each; a stream without any (raw H.264,
        which cannot be sought either) is counted from its start.
        """
        origin = self.info.start_seconds
        period = 1.0 / (self.fps or 1.0)
        held: list[Picture] = []
        last: float | None = None  # the time stamp given last; None before the pass's first
        for picture in pictures:
            pts = picture.pts_seconds
            if last is None:
                if pts is None and len(held) < HELD_WITHOUT_TIME:
                    held.append(picture)
                    continue
                first = origin if pts is None else pts - len(held) * period
                yield from self._spaced(held, first, period)
                last, held = first + (len(held) - 1) * period, []
            last = pts if pts is not None else last + period
            yield picture, last
        yield from self._spaced(held, origin, period)

    @staticmethod
    def _spaced(
        pictures: list[Picture], first: float, period: float
    ) -> Iterator[tuple[Picture, float]]:
        """``pictures`` with time stamps ``period`` apart from ``first``."""
        for n, picture in enumerate(pictures):
            yield picture, first + n * period

    def _frames(self) -> Generator[Frame, None, None]:
        options = self.options
        next_index = 0
        pts_offset = 0.0
        delivered: _Delivered | None = None
        if self.resume is not None:
            next_index = self.resume.index + 1
            if options.loop:
                gap = max(time.time() - self.resume.wall_time, self._frame_period(1, 0.0, 0.0))
                pts_offset = self.resume.pts_seconds + gap - (options.start_seconds or 0.0)
                if self.packet_tap is not None:
                    self.packet_tap.offset = pts_offset
            else:
                delivered = _Delivered(self.resume)
        pace = Pacer(self._stop) if options.realtime else None
        try:
            while True:
                with self._decoding:
                    decoder = self._decoder
                    if decoder is None or self._stop.is_set():
                        break
                    start = options.start_seconds
                    decoder.seek(delivered.read_from(start) if delivered else start or 0.0)
                done = delivered.first() if delivered else _Pass(index=next_index)
                try:
                    yield from self._pass(decoder, done, delivered, pts_offset, pace)
                except _ReadAgain:
                    self.stats.frames_skipped += 1  # the frame that showed it, delivered before
                    self._reopen(decoder, again=True)
                    continue
                if self._stop.is_set():
                    return
                self._end_pass(decoder, done.frames, done.last)
                if done.first is None or done.last is None:
                    raise SourceError(f"{self.path}: no frames in the selected time range")
                next_index = done.index
                pts_offset += (
                    done.last - done.first + self._frame_period(done.frames, done.first, done.last)
                )
                delivered = None
                if self.packet_tap is not None:
                    self.packet_tap.offset = pts_offset
                self._reopen(decoder, again=options.loop)
        except SourceError:
            self._state = SourceState.FAILED
            raise
        finally:
            self.close()

    def _pass(
        self,
        decoder: Decoder,
        done: _Pass,
        delivered: _Delivered | None,
        pts_offset: float,
        pace: Pacer | None,
    ) -> Generator[Frame, None, None]:
        """The selected frames of one pass, counted in ``done``."""
        options = self.options
        start, end = options.start_seconds, options.end_seconds
        for picture, pts in self._timed(self._pictures(decoder)):
            before = start is not None and pts < start - _PTS_TOLERANCE
            after = end is not None and pts >= end - _PTS_TOLERANCE
            if before or after or (delivered is not None and delivered.before(pts)):
                self.stats.frames_skipped += 1  # decoded, not selected: counted
                if after:
                    break
                continue
            done.first = pts if done.first is None else done.first
            done.last = pts
            done.frames += 1
            index, done.index = done.index, done.index + 1
            if index % options.stride or (delivered is not None and delivered.delivered(index)):
                self.stats.frames_skipped += 1
                continue
            if pace is not None:
                pace(pts + pts_offset)
            yield picture.to_frame(self.stream_id, index, pts + pts_offset, time.time())

    def _reopen(self, decoder: Decoder, *, again: bool) -> None:
        """Close ``decoder``; open the file again for another pass if ``again``."""
        with self._decoding:
            decoder.close()
            self._decoder = self._open() if again and not self._stop.is_set() else None

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
