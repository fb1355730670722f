"""The annotated-video writer: H.264 on its own thread, behind a bounded queue.

:class:`VideoWriter` is what the engine's outputs use. It takes annotated RGB
pictures (``uint8`` ``(H, W, 3)`` tensors on the CPU or a CUDA device, as
:class:`vstream.annotate.Annotator` makes them) and their time stamps, and
encodes them on a thread of its own, with the encoder
:mod:`vstream.sinks.video.encoders` chooses:

- ``policy="block"`` (the default, right for files): :meth:`VideoWriter.write`
  waits for room in the queue, so every frame is kept and detection waits for
  the encoder when it falls behind.
- ``policy="drop"``: a full queue drops the frame and counts it
  (``stats.frames_dropped``), so encoding never slows detection.

Time stamps come from the frames (``pts_seconds``), counted from the first
frame written, so variable-frame-rate sources keep their timing; ``fps`` is
the nominal rate written into the container (and the clock for frames given
without a time stamp). A time stamp that goes back (a live source that starts
again from zero) continues the video one nominal frame after the last picture.

A file is complete only once :meth:`VideoWriter.close` has flushed the encoder
(:mod:`vstream.sinks.video.container`). An unwritable directory, a full disk
or an encoder failure is logged once, as one line (:class:`VideoWriteError`),
and counted (``stats.failures``, and every frame lost in
``stats.frames_failed``); the partial file is removed and the caller's thread
never sees an exception. With ``min_free_bytes``, frames are not encoded while
the file's disk has less free than that (``stats.frames_skipped``, one warning
per episode), so a video never takes the space the records need; the video
shows the gap and goes on when space is freed.

The target may instead be an ``rtmp://`` or ``rtmps://`` URL: the video is then
published live (FLV, H.264 tuned for low latency, a key frame every two
seconds so a viewer joining sees a picture soon) to a media server such as
nginx-rtmp or MediaMTX. A server that cannot be reached or goes away is a
transient fault: the writer reconnects with backoff (:data:`RECONNECT_SECONDS`),
the frames of the outage are counted in ``stats.frames_failed`` and the
reconnections in ``stats.reconnects``; logs show the URL with its stream key
masked.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, get_args

import torch

from vstream.config.sinks import (
    CRF_RANGE,
    QUEUE_FRAMES_RANGE,
    VideoEncoder,
    VideoOverflow,
    unfit_output,
)
from vstream.diskspace import FreeSpace
from vstream.errors import describe
from vstream.sinks.base import make_parents
from vstream.sinks.video.container import (
    PUBLISH_FORMAT,
    TIME_BASE,
    Backend,
    VideoWriteError,
    complete,
    container_format,
    partial_path,
)
from vstream.sinks.video.encoders import (
    DEFAULT_CRF,
    DEFAULT_ENCODER,
    DEFAULT_PRESET,
    DEFAULT_QUEUE_FRAMES,
    X264_PRESETS,
    check_choice,
    check_range,
    log_choice_once,
    resolve_encoder,
)
from vstream.sinks.video.libx264 import LibX264
from vstream.sinks.video.nvenc import Nvenc
from vstream.uri import is_publish_url, publish_display

log = logging.getLogger(__name__)

RECONNECT_SECONDS = (1.0, 30.0)
"""First and longest wait before connecting again to a media server that went away."""


@dataclass
class VideoWriterStats:
    """Counters of a :class:`VideoWriter`."""

    frames_written: int = 0
    """Frames encoded into the video (all of them are in the file once it is closed)."""
    frames_dropped: int = 0
    """Frames refused because the queue was full (``policy="drop"`` only)."""
    frames_failed: int = 0
    """Frames lost to a failure: refused after it, or encoded into a file that was discarded."""
    frames_skipped: int = 0
    """Frames of a file not encoded while its disk had less than ``min_free_bytes`` free."""
    failures: int = 0
    """Failures (each logged once): opening, writing or finishing the file."""
    reconnects: int = 0
    """Times a live output was connected again after losing its media server."""
    encode_seconds: float = 0.0
    """Time the encoder thread spent encoding and writing frames."""


def _error_text(exc: BaseException) -> str:
    """One line for ``exc``; an FFmpeg or OS error without the address it quotes.

    PyAV's errors quote the file or URL they concern, and a publish URL holds
    its stream key.
    """
    strerror = getattr(exc, "strerror", None)
    return str(strerror) if strerror else describe(exc)


@dataclass
class _Item:
    image: torch.Tensor
    ticks: int
    ready: Any
    """A CUDA event recorded after the picture was drawn (None on the CPU)."""


_STOP = object()


class VideoWriter:
    """Encodes annotated pictures into ``path`` on a thread of its own (see the module).

    ``path`` is a video file, or an ``rtmp://`` / ``rtmps://`` URL to publish to
    (:attr:`path` is then None and :attr:`target` shows the URL without its key).

    ``width`` x ``height`` is the size of the video (a picture of another size
    is resized to it on its device; odd sizes lose their last row or column,
    as 4:2:0 needs even ones). ``device`` is where the pictures will be, for
    ``encoder="auto"``; :attr:`encoder` says what was chosen (``"nvenc"`` or
    ``"cpu"``, libx264). ``preset``, ``crf`` and ``threads`` (0: FFmpeg's
    choice) tune libx264; ``bitrate`` (bits per second) NVENC. ``min_free_bytes``
    (files only; 0: no check): frames are skipped while the disk has less free.
    """

    def __init__(
        self,
        path: str | Path,
        width: int,
        height: int,
        fps: float,
        *,
        encoder: VideoEncoder = DEFAULT_ENCODER,
        policy: VideoOverflow = "block",
        queue_frames: int = DEFAULT_QUEUE_FRAMES,
        device: torch.device | str | None = None,
        preset: str = DEFAULT_PRESET,
        crf: int = DEFAULT_CRF,
        threads: int = 0,
        bitrate: int | None = None,
        min_free_bytes: int = 0,
    ) -> None:
        if width <= 1 or height <= 1:
            raise ValueError(f"video size must be at least 2x2, got {width}x{height}")
        if not (isinstance(fps, int | float) and math.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        check_choice("policy", policy, get_args(VideoOverflow))
        check_range("queue_frames", queue_frames, QUEUE_FRAMES_RANGE)
        check_range("crf", crf, CRF_RANGE)
        check_choice("preset", preset, X264_PRESETS)
        self.url = str(path) if is_publish_url(str(path)) else None
        self.path: Path | None = None if self.url else Path(path)
        self.partial_path = partial_path(self.path) if self.path else None
        self.format = container_format(self.path) if self.path else PUBLISH_FORMAT
        self.target = publish_display(self.url) if self.url else str(self.path)
        """What the logs call this video: the file, or the URL with its stream key masked."""
        self.width, self.height = width, height
        self.encoded_size = (width - width % 2, height - height % 2)
        if self.encoded_size != (width, height):
            log.warning(
                "annotated video %s: %dx%d is odd; encoded as %dx%d (4:2:0 needs even sizes)",
                self.target, width, height, *self.encoded_size,
            )  # fmt: skip
        self.fps = float(fps)
        self.policy = policy
        self.device = torch.device(device) if device is not None else None
        self.requested_encoder = encoder
        self.encoder, reason = resolve_encoder(encoder, self.device)
        log_choice_once("nvenc" if self.encoder == "nvenc" else "libx264", reason)
        self._options = {"preset": preset, "crf": crf, "threads": threads, "bitrate": bitrate}
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_frames)
        self._lock = threading.Lock()
        self._stats = VideoWriterStats()
        self._error: VideoWriteError | None = None
        self._closing = False
        self._offered = 0
        self._first_pts: float | None = None
        self._resize_warned = False
        self._retry_at: float | None = None
        """When a live output next tries to connect (None: connected, or a file)."""
        self._retry_delay = RECONNECT_SECONDS[0]
        self.min_free_bytes = int(min_free_bytes) if self.path is not None else 0
        self._space = FreeSpace(f"annotated video {self.target}", log)
        """Frames are skipped while the disk is below min_free_bytes (logged once per episode)."""
        self._thread = threading.Thread(
            target=self._run, name=f"vstream-video-{Path(self.target).name}", daemon=True
        )
        self._thread.start()

    # -- the caller's side ------------------------------------------------------------

    @property
    def stats(self) -> VideoWriterStats:
        """A snapshot of the counters."""
        with self._lock:
            return VideoWriterStats(**asdict(self._stats))

    @property
    def error(self) -> VideoWriteError | None:
        """The failure that stopped the video, if any."""
        return self._error

    @property
    def closed(self) -> bool:
        return self._closing

    def write(self, image: torch.Tensor, pts_seconds: float | None = None) -> bool:
        """Queue ``image`` (RGB ``uint8`` ``(H, W, 3)``, CPU or CUDA) shown at ``pts_seconds``.

        Returns True when the picture was queued, False when it was dropped
        (``policy="drop"`` and a full queue) or refused (after a failure or
        :meth:`close`); both are counted. With ``policy="block"`` this waits for
        room in the queue. The writer keeps ``image`` until it is encoded: do
        not draw on it again. Without ``pts_seconds`` the picture comes
        ``1 / fps`` after the previous one.
        """
        if image.dim() != 3 or image.shape[2] != 3 or image.dtype != torch.uint8:
            raise ValueError(
                f"expected RGB uint8 (H, W, 3), got {tuple(image.shape)} {image.dtype}"
            )
        with self._lock:
            if self._closing or self._error is not None:
                self._stats.frames_failed += 1
                return False
            if pts_seconds is None or not math.isfinite(pts_seconds):
                start = self._first_pts or 0.0
                pts_seconds = start + self._offered / self.fps
            if self._first_pts is None:
                self._first_pts = pts_seconds
            self._offered += 1
            ticks = round((pts_seconds - self._first_pts) / TIME_BASE)
        ready = None
        if image.is_cuda:
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(image.device))
        item = _Item(image, ticks, ready)
        if self.policy == "block":
            self._queue.put(item)
            return True
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._lock:
                self._stats.frames_dropped += 1
            return False
        return True

    def close(self, timeout: float | None = None) -> VideoWriterStats:
        """Flush the encoder, finish (or discard) the file and join the thread; idempotent.

        Waits at most ``timeout`` seconds for the thread (None: as long as it
        takes); returns the counters.
        """
        with self._lock:
            first = not self._closing
            self._closing = True
        if first:
            self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "annotated video %s: the encoder did not finish within %.0f s", self.target, timeout
            )
        return self.stats

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the encoder thread -----------------------------------------------------------------

    def _open_backend(self) -> Backend:
        backend = self._new_backend()
        if self.url is not None:
            try:
                backend.connect()
            except BaseException:
                backend.abort()
                raise
        return backend

    def _new_backend(self) -> Backend:
        destination = self.url or self.partial_path
        if self.partial_path is not None:
            for target in (self.path, self.partial_path):  # written, then renamed to
                if (why := unfit_output(target)) is not None:
                    raise VideoWriteError(f"annotated video {self.path}: {why}")
            # FFmpeg opens the file only when the first packet comes out of the encoder (after
            # its look-ahead): make it now, so that an unwritable directory shows at once.
            make_parents(self.partial_path)
            with open(self.partial_path, "wb"):
                pass
        width, height = self.encoded_size
        if self.encoder == "nvenc":
            try:
                device = self.device if self.device is not None else torch.device("cuda")
                return Nvenc(
                    destination, self.format, width, height, self.fps, device, self._options
                )
            except Exception as exc:
                if self.requested_encoder != "auto":
                    raise
                log.warning(
                    "annotated video %s: NVENC failed to start (%s); using libx264",
                    self.target, _error_text(exc),
                )  # fmt: skip
                self.encoder = "cpu"
        return LibX264(destination, self.format, width, height, self.fps, self._options)

    def _prepare(self, item: _Item) -> torch.Tensor:
        """The picture at the video's size, ready to read on this thread's stream."""
        image = item.image
        if item.ready is not None:
            torch.cuda.current_stream(image.device).wait_event(item.ready)
        width, height = self.encoded_size
        if image.shape[0] != height or image.shape[1] != width:
            if image.shape[0] in (height, height + 1) and image.shape[1] in (width, width + 1):
                image = image[:height, :width]
            else:
                if not self._resize_warned:
                    self._resize_warned = True
                    log.warning(
                        "annotated video %s: pictures of %dx%d are resized to %dx%d",
                        self.target, image.shape[1], image.shape[0], width, height,
                    )  # fmt: skip
                chw = image.permute(2, 0, 1).unsqueeze(0).float()
                chw = torch.nn.functional.interpolate(chw, size=(height, width), mode="bilinear")
                image = chw[0].round_().clamp_(0, 255).to(torch.uint8).permute(1, 2, 0)
        return image.contiguous()

    def _encode_one(self, backend: Backend, item: _Item, ticks: int) -> None:
        """Encode one picture (the writer thread's unit of work; a hook for tests)."""
        backend.encode(self._prepare(item), ticks)

    def _fail(self, exc: BaseException) -> None:
        """Record the first failure: one line in the log, one in the counters."""
        if isinstance(exc, VideoWriteError):
            error = exc
        else:
            error = VideoWriteError(f"annotated video {self.target} not saved: {_error_text(exc)}")
        with self._lock:
            if self._error is not None:
                return
            self._error = error
            self._stats.failures += 1
        log.error("%s", error)
        if self.url is None:  # a traceback would quote the publish URL, key and all
            log.debug("annotated video %s: failure details", self.target, exc_info=exc)

    def _run(self) -> None:
        # This thread's torch work (CUDA conversion, a rare resize) is small: one thread, so
        # that no OpenMP workers spin against the encoder's own threads.
        torch.set_num_threads(1)
        backend: Backend | None = None
        try:
            backend = self._open_backend()
        except Exception as exc:
            if self._transient(exc):
                backend = self._lost(None, exc)
            else:
                self._fail(exc)
        period = max(1, round(1 / (self.fps * TIME_BASE)))
        last_ticks = -period
        shift = 0
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            if backend is None:
                backend = self._reconnect()
            if backend is None or self._error is not None:
                with self._lock:
                    self._stats.frames_failed += 1
                continue
            if not self._room():
                continue
            ticks = item.ticks + shift
            if ticks <= last_ticks:
                # Time went back (a live source started again from zero): carry on one
                # nominal frame after the last picture rather than squeeze the rest together.
                shift += last_ticks + period - ticks
                ticks = last_ticks + period
            last_ticks = ticks
            started = time.perf_counter()
            try:
                self._encode_one(backend, item, ticks)
            except Exception as exc:
                if self._transient(exc):
                    backend = self._lost(backend, exc)
                else:
                    self._fail(exc)
                with self._lock:
                    self._stats.frames_failed += 1
                continue
            with self._lock:
                self._stats.frames_written += 1
                self._stats.encode_seconds += time.perf_counter() - started
        self._finish(backend)

    def _room(self) -> bool:
        """Whether the disk has ``min_free_bytes`` free for the next frame (a skip is counted)."""
        if self.partial_path is None:  # a live output: no disk to keep
            return True
        room = self._space.allows(
            self.partial_path.parent, self.min_free_bytes, self._stats.frames_skipped, "frames"
        )
        if not room:
            with self._lock:
                self._stats.frames_skipped += 1
        return room

    def _transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the network failing a live output (retried), not a bug (fails it).

        FFmpeg's network errors are ``OSError`` subclasses in PyAV (refused, reset,
        broken pipe, timed out, and a server's refusal as an I/O error).
        """
        return self.url is not None and isinstance(exc, OSError)

    def _lost(self, backend: Backend | None, exc: BaseException) -> None:
        """A live output lost (or never reached) its media server: try again after a wait.

        One warning per outage; the frames until the next connection are counted
        as failed. Returns None, the backend the writer has until then.
        """
        if backend is not None:
            backend.abort()
        if self._retry_at is None:
            self._retry_delay = RECONNECT_SECONDS[0]
            log.warning(
                "annotated video %s: %s; publishing again once the server answers",
                self.target, _error_text(exc),
            )  # fmt: skip
        else:
            self._retry_delay = min(self._retry_delay * 2, RECONNECT_SECONDS[1])
        self._retry_at = time.monotonic() + self._retry_delay
        return None

    def _reconnect(self) -> Backend | None:
        """A new connection to the media server once the wait is over (None until then)."""
        if self._retry_at is None or time.monotonic() < self._retry_at:
            return None
        try:
            backend = self._open_backend()
        except Exception as exc:
            return self._lost(None, exc)
        self._retry_at = None
        with self._lock:
            self._stats.reconnects += 1
        log.info("annotated video %s: publishing again", self.target)
        return backend

    def _finish(self, backend: Backend | None) -> None:
        if self.url is not None:
            self._finish_publishing(backend)
            return
        if backend is not None and self._error is None and self._stats.frames_written:
            try:
                backend.finish()
                complete(self.partial_path, self.path)
                log.info(
                    "annotated video: %d frames written to %s (%s)",
                    self._stats.frames_written, self.path, backend.name,
                )  # fmt: skip
                return
            except Exception as exc:
                self._fail(exc)
        if backend is not None:
            backend.abort()
        with contextlib.suppress(OSError):
            self.partial_path.unlink()
        with self._lock:
            written = self._stats.frames_written
            self._stats.frames_failed += written
            self._stats.frames_written = 0
        if self._error is None and not written:
            log.warning("annotated video %s: no frames were written; no file made", self.path)

    def _finish_publishing(self, backend: Backend | None) -> None:
        if backend is not None:
            try:
                backend.finish()
            except Exception as exc:  # the server went away at the very end
                backend.abort()
                log.warning("annotated video %s: %s at the end", self.target, _error_text(exc))
        log.log(
            logging.INFO if self.stats.frames_written else logging.WARNING,
            "annotated video %s", publish_outcome(self.target, self.stats),
        )  # fmt: skip


def file_outcome(shown: str, stats: VideoWriterStats | None) -> str:
    """What became of an annotated video file, in words, for ``vstream run``'s summary.

    ``stats`` is None for a video that never opened (its error logged where it
    happened). A file not saved is said so, where listing its name would read as
    a video made.
    """
    if stats is not None and stats.frames_written:
        return shown
    if stats is None:
        why = "it could not be opened"
    elif stats.failures:
        why = "it failed"
    elif stats.frames_skipped:
        why = f"its {stats.frames_skipped} frames came while the disk was below min_free_bytes"
    else:
        why = "no frame reached it"
    return f"{shown} not saved: {why}"


def publish_outcome(target: str, stats: VideoWriterStats) -> str:
    """What became of a live output, in words: for its last log line and ``vstream run``'s summary.

    A server that never answered is said so: "published" with zero frames read as a success.
    """
    lost = stats.frames_failed + stats.frames_dropped
    if not stats.frames_written:
        why = "the output failed" if stats.failures else "no connection to the server"
        return f"never published to {target}: {why}, {lost} frames lost"
    outcome = f"published to {target}: {stats.frames_written} frames"
    if lost:
        outcome += f", {stats.frames_failed} lost to outages, {stats.frames_dropped} dropped"
    if stats.reconnects:
        outcome += f", {stats.reconnects} reconnects"
    return outcome
