"""Event clips and snapshots, as Frigate makes them.

One :class:`ClipRecorder` per clip directory. Per stream it owns a
:class:`~vstream.clips.ring.PacketRing` that the demuxer feeds
(``recorder.ring(stream_id).add(packet)``). When an event fires,
:meth:`ClipRecorder.trigger` starts a clip at the keyframe before the event's
pre-roll; it ends ``post_roll`` seconds after the event. The merge rule: an
event within ``merge`` seconds of the previous event of the stream's clip being
recorded joins that clip (which then ends ``post_roll`` after it) instead of
starting its own, so a burst of events makes one clip, not one per frame;
``merge=0`` gives every event its own clip. Clips of events further apart each
have their whole pre-roll and post-roll, so they may share footage. A worker
thread then remuxes the
original packets to MP4 (no re-encoding), writes the annotated snapshot as a
JPEG, and the clip's description last, each file atomically. A clip that has
ended waits for that thread however many end at once (a burst of events, a
shutdown), its packets being in memory already; only a writer that falls
``max_queued_bytes`` behind has clips dropped, each episode logged once.
Retention keeps the directory within a count and a size, deleting the oldest clips first;
``min_free_bytes`` keeps clips from taking a disk's last space (which the
records need more): below it, a clip is not written, counted, and the
episode logged once.

Nothing here stops a pipeline: a full disk or a directory that cannot be
written gives one clear log line (no traceback) and a counted failure.
"""

from __future__ import annotations

import io
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vstream.clips.index import (
    ClipIndex,
    ClipInfo,
    Retention,
    new_id,
    valid_id,
    write_atomic,
    write_bytes_atomic,
)
from vstream.clips.ring import Capture, PacketRing, StoredPacket, Template
from vstream.config.sinks import ClipsSinkConfig
from vstream.diskspace import FreeSpace

log = logging.getLogger(__name__)

DEFAULT_PRE_ROLL: float = ClipsSinkConfig.model_fields["pre_roll_seconds"].default
"""Seconds before an event: the ``clips`` sink's default, which a recorder made in Python gets."""
DEFAULT_POST_ROLL: float = ClipsSinkConfig.model_fields["post_roll_seconds"].default
DEFAULT_MERGE: float = ClipsSinkConfig.model_fields["merge_seconds"].default

Snapshot = Any
"""An RGB ``uint8`` ``(H, W, 3)`` picture (torch tensor on any device, or NumPy array)."""

_STOP = object()
CLIPS_NAMED = 3
"""Clips a log line names by id; it counts the rest."""


@dataclass
class ClipStats:
    """Counters of one recorder (read them for metrics)."""

    events: int = 0
    """Events triggered."""
    extended: int = 0
    """Events that joined the clip being recorded (within ``merge`` seconds of its previous
    event) instead of starting one."""
    clips: int = 0
    """Clips written (video files)."""
    snapshots: int = 0
    failures: int = 0
    """Clips or snapshots that could not be written (disk full, no permission, no video)."""
    dropped: int = 0
    """Finished captures dropped because the clips waiting for the writer held
    ``max_queued_bytes`` already (also counted as failures)."""
    unwritten: int = 0
    """Clips :meth:`ClipRecorder.close` gave up on, the writer being too slow to write them
    within its timeout (also counted as failures); the one being written then is among
    them, though the worker may yet finish it if the process lives on."""
    deleted: int = 0
    """Clips deleted by retention."""
    skipped_low_space: int = 0
    """Clips not written because the disk had less than ``min_free_bytes`` free."""
    bytes_written: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class ClipWriteError(Exception):
    """A clip's file could not be written; the message is one line for the log."""


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text).splitlines()[0] if str(text) else type(exc).__name__


def remux(path: Path, template: Template, packets: list[StoredPacket], format: str) -> None:
    """Write ``packets`` (starting with a keyframe) to ``path`` as they are: no re-encoding.

    Time stamps are shifted so that the first picture is at 0.
    """
    import av

    first = packets[0]
    base = first.pts if first.pts is not None else first.dts
    options = {"movflags": "+faststart"} if format == "mp4" else {}
    with av.open(str(path), "w", format=format, options=options) as output:
        stream = _stream_from(output, template)
        if format == "mp4" and template.codec == "hevc":
            with suppress(Exception):  # hvc1, not hev1: the tag browsers and Apple players want
                stream.codec_tag = "hvc1"
        for stored in packets:
            packet = av.Packet(stored.data)
            packet.pts = None if stored.pts is None else stored.pts - base
            packet.dts = None if stored.dts is None else stored.dts - base
            packet.duration = stored.duration
            packet.time_base = stored.time_base
            packet.is_keyframe = stored.keyframe
            packet.stream = stream
            output.mux(packet)


def _stream_from(output: Any, template: Template) -> Any:
    """The output stream copying ``template``'s codec parameters.

    ValueError when the container cannot hold the codec.
    """
    try:
        return output.add_stream_from_template(template.stream)
    except ValueError:
        raise
    except Exception:  # no encoder by the codec's name: copy the decoder's context instead
        return output.add_stream_from_template(template.stream, opaque=True)


def container_for(template: Template, preferred: str = "mp4") -> tuple[str, str]:
    """``(format, suffix)``: MP4 where it can hold the codec, else Matroska."""
    import av

    if preferred == "mp4":
        probe = av.open(io.BytesIO(), "w", format="mp4")
        try:
            _stream_from(probe, template)
            return "mp4", ".mp4"
        except ValueError:
            pass
        finally:
            probe.close()
    return "matroska", ".mkv"


class ClipRecorder:
    """Event clips of many streams into one directory.

    ``pre_roll``/``post_roll``: seconds of video before and after an event.
    ``merge``: an event this many seconds or less after the previous event of
    the clip being recorded joins that clip (0: every event its own clip).
    ``margin``: extra seconds the rings keep beyond the pre-roll, for the time
    an event takes to travel from the demuxer through inference to
    :meth:`trigger`. ``max_clip_seconds``/``max_clip_bytes`` bound one clip
    however many events extend it. ``stall_seconds``: a clip whose stream
    sends no packet for this long is written with what it has.
    ``min_free_bytes``: a clip is written only while the directory's disk has
    at least this much free (0: no check). ``max_queued_bytes``: the packets of
    the clips waiting for the writer, each clip counted whole (footage clips
    share counts once per clip); a clip ending past it is dropped, so that a
    writer slower than the clips for long (a slow disk) cannot take all the
    memory. A clip that :meth:`flush` or :meth:`close` ends is never dropped.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        pre_roll: float = DEFAULT_PRE_ROLL,
        post_roll: float = DEFAULT_POST_ROLL,
        merge: float = DEFAULT_MERGE,
        margin: float = 3.0,
        retention: Retention | None = None,
        max_clip_seconds: float = 120.0,
        max_clip_bytes: int = 256 * 1024 * 1024,
        ring_max_bytes: int = 64 * 1024 * 1024,
        jpeg_quality: int = 85,
        max_queued_bytes: int = 1024 * 1024 * 1024,
        stall_seconds: float = 10.0,
        format: str = "mp4",
        min_free_bytes: int = 0,
    ) -> None:
        if min(pre_roll, post_roll, merge, margin) < 0:
            raise ValueError("pre_roll, post_roll, merge and margin must not be negative")
        if format not in ("mp4", "matroska"):
            raise ValueError(f"clip format must be mp4 or matroska, got {format!r}")
        self.directory = Path(directory)
        self.pre_roll = float(pre_roll)
        self.post_roll = float(post_roll)
        self.merge = float(merge)
        self.margin = float(margin)
        self.retention = retention or Retention()
        self.max_clip_seconds = float(max_clip_seconds)
        self.max_clip_bytes = int(max_clip_bytes)
        self.ring_max_bytes = int(ring_max_bytes)
        self.jpeg_quality = int(jpeg_quality)
        self.stall_seconds = float(stall_seconds)
        self.format = format
        self.min_free_bytes = int(min_free_bytes)
        self.max_queued_bytes = int(max_queued_bytes)
        self._space = FreeSpace(f"clips: {self.directory}", log)
        """Whether clips are being skipped for want of space (logged once per episode)."""
        self.stats = ClipStats()
        self.index = ClipIndex(self.directory)
        self.index.load()
        self.stats.deleted += len(self.index.enforce(self.retention))
        self._lock = threading.RLock()
        self._stats_lock = threading.Lock()
        self._rings: dict[str, PacketRing] = {}
        self._active: dict[str, Capture] = {}
        """Clips being recorded, by clip id."""
        self._latest: dict[str, Capture] = {}
        """The clip each stream's next event may join (its newest)."""
        self._last_failure: str | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._queued: dict[str, Capture] = {}
        """Clips handed to the writer and not written yet (the one being written included)."""
        self._queued_bytes = 0
        self._behind = False
        """Whether clips are being dropped for a writer behind by ``max_queued_bytes``
        (logged once per episode)."""
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="clips", daemon=True)
        self._thread.start()

    # -- the pipeline's side --------------------------------------------------------------------

    def ring(self, stream_id: str) -> PacketRing:
        """The packet ring of ``stream_id`` (created on first use); feed it from the demuxer."""
        with self._lock:
            ring = self._rings.get(stream_id)
            if ring is None:
                ring = PacketRing(self.pre_roll + self.margin + 0.001, self.ring_max_bytes)
                self._rings[stream_id] = ring
            return ring

    def remove_stream(self, stream_id: str) -> None:
        """The stream is gone: its clip being recorded is written with what it has."""
        with self._lock:
            ring = self._rings.pop(stream_id, None)
            self._latest.pop(stream_id, None)
            self._active = {
                i: c for i, c in self._active.items() if c.context["stream"] != stream_id
            }
        if ring is not None:
            ring.close()

    def trigger(
        self,
        stream_id: str,
        event: Mapping[str, Any],
        pts_seconds: float,
        snapshot: Snapshot | Callable[[], Snapshot] | None = None,
    ) -> str | None:
        """An event at ``pts_seconds`` (on the pipeline's timeline, ``Frame.pts_seconds``) on
        ``stream_id``: the event's own time, which may precede the frame that reported it
        (a line crossing is dated where the object was first seen across).

        Returns the id of the clip that will hold it: the clip being recorded
        when the event comes within ``merge`` seconds of its previous event
        (which is then extended to this event's post-roll), else a new clip.
        ``event`` must be JSON-serialisable
        (its name, line or zone, track id...). ``snapshot`` is the annotated
        picture of the event, or a callable returning it; it is only used (and
        only called) when a new clip starts. The picture is copied, so the
        caller may reuse its buffer. Never raises for I/O; returns None when the
        stream has no ring.
        """
        record = {**dict(event), "pts": round(float(pts_seconds), 6)}
        with self._lock:
            self._count("events")
            ring = self._rings.get(stream_id)
            if self._closed:
                self._fail("closed", f"clips: event on {stream_id!r} after the recorder closed")
                return None
            if ring is None:
                self._fail("no-ring", f"clips: event on {stream_id!r}, which has no packet ring")
                return None
            if ring.untimed and not ring.packets_added:
                self._fail(
                    "untimed",
                    f"clips: no clip of {stream_id!r}, whose packets have no time stamps (a raw "
                    "H.264 or HEVC stream; clips need a container or protocol that times them, "
                    "as MP4, MPEG-TS, Matroska or RTSP do)",
                )
                return None
            current = self._latest.get(stream_id)
            if (
                current is not None
                and not current.done
                and pts_seconds - current.context["events"][-1]["pts"] <= self.merge
                and ring.extend(current, pts_seconds + self.post_roll)
            ):
                current.context["events"].append(record)
                self._count("extended")
                return str(current.context["id"])
            start = pts_seconds - self.pre_roll
            end = max(pts_seconds + self.post_roll, start + 0.001)
            clip_id = new_id(stream_id, time.time())
        picture = ready = None
        if snapshot is not None:
            try:
                from vstream.clips.jpeg import as_rgb

                picture = as_rgb(snapshot() if callable(snapshot) else snapshot).clone()
                if picture.is_cuda:  # the writer thread waits for the copy, not this thread
                    import torch

                    ready = torch.cuda.Event()
                    ready.record(torch.cuda.current_stream(picture.device))
            except Exception as exc:
                self._fail("snapshot", f"clips: no snapshot for {clip_id}: {_reason(exc)}")
        context = {
            "id": clip_id,
            "stream": stream_id,
            "events": [record],
            "picture": picture,
            "picture_ready": ready,
        }
        capture = ring.capture(
            start,
            end,
            self._captured,
            max_seconds=self.max_clip_seconds,
            max_bytes=self.max_clip_bytes,
            context=context,
        )
        with self._lock:
            self._latest[stream_id] = capture
            if not capture.done:
                self._active[clip_id] = capture
        return clip_id

    # -- the API's side -------------------------------------------------------------------------

    def clips(self, stream_id: str | None = None) -> list[dict[str, Any]]:
        """Whole clips, newest first, as JSON-ready dictionaries (absolute paths included)."""
        return [c.to_dict(self.directory) for c in self.index.list(stream_id)]

    def clip(self, clip_id: str) -> ClipInfo | None:
        return self.index.get(clip_id) if valid_id(clip_id) else None

    def file(self, clip_id: str, kind: str) -> Path | None:
        """The path of a clip's ``video`` or ``snapshot``, None if there is none."""
        info = self.clip(clip_id)
        if info is None:
            return None
        name = info.clip if kind == "video" else info.snapshot if kind == "snapshot" else None
        return self.directory / name if name else None

    def recording(self, stream_id: str | None = None) -> list[dict[str, Any]]:
        """Clips being recorded now (waiting for their post-roll), of ``stream_id`` if given."""
        with self._lock:
            active = [
                c
                for c in self._active.values()
                if not c.done and stream_id in (None, c.context["stream"])
            ]
        return [
            {"id": c.context["id"], "stream": c.context["stream"], "events": c.context["events"]}
            for c in active
        ]

    # -- lifecycle -------------------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """End every clip being recorded now and wait until all are written, those that
        ended before and wait for the writer included; False on timeout."""
        with self._lock:
            rings = list(self._rings.values())
        for ring in rings:
            for capture in ring.captures:
                ring.finish(capture, "flushed")
        return self._drain(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is being recorded and what waits for the writer, then stop the worker.

        ``timeout`` bounds the whole wait. The writer is a daemon thread, which
        the process does not wait for: clips it has not written by then are
        given up, counted (``unwritten``) and named in one error line, and the
        worker stops after the clip in hand (which it may yet finish).
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self.flush(timeout):
            with suppress(queue.Empty):  # the clips not started are not waited for any more
                while True:
                    self._queue.get_nowait()
        self._queue.put(_STOP)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            unwritten = list(self._queued)
        if unwritten:
            self._count("unwritten", len(unwritten))
            self._count("failures", len(unwritten))
            more = len(unwritten) - CLIPS_NAMED
            log.error(
                "clips: closing, gave up after %g s waiting for the writer: %d clips unwritten "
                "(%s%s)",
                timeout, len(unwritten), ", ".join(unwritten[:CLIPS_NAMED]),
                f" and {more} more" if more > 0 else "",
            )  # fmt: skip

    def _drain(self, timeout: float) -> bool:
        done = threading.Event()
        self._queue.put(done.set)
        return done.wait(timeout)

    # -- internals ---------------------------------------------------------------------------------

    def _count(self, name: str, amount: int = 1) -> None:
        with self._stats_lock:
            setattr(self.stats, name, getattr(self.stats, name) + amount)

    def _fail(self, kind: str, message: str) -> None:
        """Count a failure; log it as one line, once per run of identical causes."""
        self._count("failures")
        key = f"{kind}:{message.split(': ', 2)[-1]}"
        if key != self._last_failure:
            log.error("%s (%d clip failures so far)", message, self.stats.failures)
        else:
            log.debug("%s", message)
        self._last_failure = key

    def _captured(self, capture: Capture) -> None:
        """A capture ended (on the demuxer's thread, usually): hand it to the writer.

        Never blocks. Its packets are in memory already, so however many clips
        end at once, each waits for the writer; only where those waiting hold
        ``max_queued_bytes`` (the writer has been behind for long) is it dropped,
        the episode logged once. A clip ended by :meth:`flush` is never dropped:
        shutting down ends them all at once, and nothing comes after them.
        """
        clip_id = capture.context["id"]
        flushed = capture.reason == "flushed"
        with self._lock:
            drop = (
                not flushed
                and bool(self._queued)
                and self._queued_bytes + capture.bytes > self.max_queued_bytes
            )
            was_behind = self._behind
            if not flushed:
                self._behind = drop
            if not drop:
                self._queued[clip_id] = capture
                self._queued_bytes += capture.bytes
            waiting = self._queued_bytes
        if not drop:
            self._queue.put(capture)
            if was_behind and not flushed:
                log.info(
                    "clips: the writer caught up; writing clips again (%d dropped so far)",
                    self.stats.dropped,
                )
            return
        capture.packets = []
        self._count("dropped")
        self._count("failures")
        if was_behind:
            log.debug("clips: clip %s dropped: the writer is behind", clip_id)
        else:
            log.error(
                "clips: the writer is behind, %d bytes of clips waiting (max_queued_bytes %d): "
                "clip %s dropped, and those ending until it catches up (counted)",
                waiting, self.max_queued_bytes, clip_id,
            )  # fmt: skip

    def _write_queued(self, capture: Capture) -> None:
        try:
            self._write(capture)
        finally:
            capture.packets = []  # the memory goes back now, whatever the index keeps
            with self._lock:
                self._queued.pop(capture.context["id"], None)
                self._queued_bytes -= capture.bytes

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=0.5)
            except queue.Empty:
                self._check_stalled()
                continue
            if job is _STOP:
                return
            try:
                if isinstance(job, Capture):
                    self._write_queued(job)
                else:
                    job()
            except Exception as exc:  # the worker must outlive any one clip
                self._fail("bug", f"clips: unexpected {type(exc).__name__}: {exc}")
            self._check_stalled()

    def _check_stalled(self) -> None:
        now = time.monotonic()
        with self._lock:
            active = list(self._active.items())
        for clip_id, capture in active:
            if capture.done:
                with self._lock:
                    self._active.pop(clip_id, None)
                continue
            idle = now - capture.last_packet
            age = now - capture.started
            if idle > self.stall_seconds or age > self.max_clip_seconds + self.stall_seconds:
                ring = self._rings.get(capture.context["stream"])
                if ring is not None:
                    ring.finish(capture, "stalled")

    def _write(self, capture: Capture) -> None:
        context = capture.context
        clip_id: str = context["id"]
        picture = context.pop("picture", None)
        ready = context.pop("picture_ready", None)
        template = capture.template
        if template is None or not capture.packets:
            # A snapshot and a description alone would list a clip that has no video.
            why = (
                "no codec parameters"
                if template is None
                else "no video packets (the stream ended or stalled before a keyframe)"
            )
            stream = context["stream"]
            self._fail("empty", f"clips: clip {clip_id} of {stream!r} not written: {why}")
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            kinds = "clip and snapshot" if picture is not None else "clip"
            self._fail(
                "directory",
                f"clips: cannot write {kinds} {clip_id}: cannot create {self.directory}: "
                f"{_reason(exc)}",
            )
            return
        if not self._room_for(clip_id):
            return
        written: list[str] = []
        info = ClipInfo(
            id=clip_id,
            stream=context["stream"],
            events=context["events"],
            start_pts=_rounded(capture.first_seconds),
            end_pts=_rounded(capture.last_seconds),
            created=time.time(),
            reason=capture.reason,
        )
        try:
            if picture is not None:
                from vstream.clips.jpeg import encode_jpeg

                if ready is not None:
                    import torch

                    torch.cuda.current_stream(picture.device).wait_event(ready)
                jpeg = encode_jpeg(picture, self.jpeg_quality)
                name = f"{clip_id}.jpg"
                self._write_file(name, lambda path: write_bytes_atomic(path, jpeg), "snapshot")
                written.append(name)
                info.snapshot = name
                self._count("snapshots")
            fmt, suffix = container_for(template, self.format)
            name = clip_id + suffix
            packets = capture.packets
            self._write_file(
                name,
                lambda path: write_atomic(path, lambda tmp: remux(tmp, template, packets, fmt)),
                "clip",
            )
            written.append(name)
            info.clip = name
            info.codec = template.codec
            self._count("clips")
            info.files = [*written, f"{clip_id}.json"]
            description = _describe(info, sum(_size(self.directory / n) for n in written))
            self._write_file(
                f"{clip_id}.json", lambda path: write_bytes_atomic(path, description), "description"
            )
        except ClipWriteError as exc:
            for name in written:
                with suppress(OSError):
                    (self.directory / name).unlink()
            self._fail("write", str(exc))
            return
        self._count("bytes_written", info.bytes)
        self.index.add(info)
        self._last_failure = None
        deleted = self.index.enforce(self.retention, keep=clip_id)
        if deleted:
            self._count("deleted", len(deleted))
            log.debug("clips: retention deleted %s", ", ".join(deleted))

    def _room_for(self, clip_id: str) -> bool:
        """Whether the disk has ``min_free_bytes`` free for ``clip_id``; a skip is counted."""
        room = self._space.allows(
            self.directory, self.min_free_bytes, self.stats.skipped_low_space, "clips"
        )
        if not room:
            self._count("skipped_low_space")
        return room

    def _write_file(self, name: str, write: Callable[[Path], int], what: str) -> None:
        path = self.directory / name
        try:
            write(path)
        except Exception as exc:  # OSError (disk full, permissions), FFmpegError (muxing)...
            raise ClipWriteError(f"clips: cannot write {what} {path}: {_reason(exc)}") from None


def _describe(info: ClipInfo, media_bytes: int) -> bytes:
    """The clip's description, its ``bytes`` set to the clip's size on disk, its own included.

    The description holds its own length, which changes with the digits of the
    count; this settles in two or three passes.
    """
    info.bytes = media_bytes
    while True:
        description = json.dumps(info.to_dict(), indent=1).encode()
        if info.bytes == media_bytes + len(description):
            return description
        info.bytes = media_bytes + len(description)


def _rounded(seconds: float | None) -> float | None:
    """A time to the microsecond, as the events' ``pts``: a packet's end is a sum of floats
    (14.120000000000001), which the description and ``GET /clips`` should not show."""
    return None if seconds is None else round(seconds, 6)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
