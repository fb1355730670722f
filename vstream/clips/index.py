"""The clips of one directory: atomic files, a listing, and retention.

Each clip is up to three files named by its id: ``<id>.mp4`` (or ``.mkv``),
``<id>.jpg`` (the snapshot) and ``<id>.json`` (its description). Every file is
written to a hidden temporary name in the same directory and renamed into
place (:func:`write_atomic`); the description comes last, so a clip is whole
exactly when its ``.json`` exists. Leftovers of a crash (temporary files, media
without a description) are removed when the directory is opened again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vstream.diskspace import sync

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
MEDIA_SUFFIXES = (".mp4", ".mkv", ".jpg")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_GENERATED_ID = re.compile(r"^\d{8}-\d{6}-[A-Za-z0-9_.-]+-[0-9a-f]{6}$")


def new_id(stream: str, when: float) -> str:
    """``YYYYmmdd-HHMMSS-<stream>-<6 hex>``: sorts by time, unique, safe as a file name."""
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{safe_name(stream)}-{secrets.token_hex(3)}"


def safe_name(text: str, limit: int = 48) -> str:
    """``text`` reduced to characters that are safe in a file name (never empty)."""
    return _SAFE.sub("_", text).strip("._")[:limit] or "stream"


def valid_id(clip_id: str) -> bool:
    """Whether ``clip_id`` could name a clip (no path separators, no leading dot)."""
    return bool(_ID.match(clip_id)) and not clip_id.startswith(".")


def temp_path(path: Path) -> Path:
    """The hidden temporary name ``path`` is written under before it is renamed."""
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


def write_atomic(path: Path, write: Callable[[Path], None]) -> int:
    """Write ``path`` through ``write(temporary_path)``, flush it to disk, rename it into place.

    Returns the file's size. On any error the temporary file is removed and
    the error raised; ``path`` is either absent or whole, never partial.
    """
    tmp = temp_path(path)
    try:
        write(tmp)
        sync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise
    _sync_directory(path.parent)
    return path.stat().st_size


def write_bytes_atomic(path: Path, data: bytes) -> int:
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))


def _sync_directory(directory: Path) -> None:
    with suppress(OSError):
        sync(directory)


@dataclass
class Retention:
    """Caps on one clip directory; the oldest clips are deleted first. None: no cap."""

    max_count: int | None = 200
    max_bytes: int | None = 2 * 1024**3

    def __post_init__(self) -> None:
        for name in ("max_count", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"retention {name} must be at least 1, got {value}")


@dataclass
class ClipInfo:
    """One clip as the API lists it. File names are relative to the clip directory."""

    id: str
    stream: str
    events: list[dict[str, Any]]
    start_pts: float | None
    end_pts: float | None
    created: float
    """Unix time the clip was finished."""
    clip: str | None = None
    snapshot: str | None = None
    bytes: int = 0
    """Bytes of every file of the clip (video, snapshot, description)."""
    codec: str | None = None
    reason: str = ""
    """Why recording ended: ``post-roll``, ``size``, ``stalled``, ``closed``, ``new stream``."""
    files: list[str] = field(default_factory=list)

    @property
    def duration(self) -> float | None:
        if self.start_pts is None or self.end_pts is None:
            return None
        return max(0.0, self.end_pts - self.start_pts)

    def to_dict(self, directory: Path | None = None) -> dict[str, Any]:
        """The JSON description; with ``directory``, ``path``/``snapshot_path`` are absolute."""
        data = asdict(self)
        data.pop("files")
        data["event"] = self.events[0] if self.events else None
        data["duration"] = None if self.duration is None else round(self.duration, 3)
        data["created_iso"] = datetime.fromtimestamp(self.created, timezone.utc).isoformat(
            timespec="seconds"
        )
        if directory is not None:
            data["path"] = str(directory / self.clip) if self.clip else None
            data["snapshot_path"] = str(directory / self.snapshot) if self.snapshot else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClipInfo:
        return cls(
            id=str(data["id"]),
            stream=str(data.get("stream", "")),
            events=list(data.get("events") or []),
            start_pts=data.get("start_pts"),
            end_pts=data.get("end_pts"),
            created=float(data.get("created", 0.0)),
            clip=data.get("clip"),
            snapshot=data.get("snapshot"),
            bytes=int(data.get("bytes", 0)),
            codec=data.get("codec"),
            reason=str(data.get("reason", "")),
        )


class ClipIndex:
    """The whole clips of one directory, oldest first; thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._clips: dict[str, ClipInfo] = {}

    def load(self) -> int:
        """Read the descriptions already on disk and remove crash leftovers; clips found.

        Symbolic links are skipped: neither a description nor a clip's file may be one.
        """
        found: dict[str, ClipInfo] = {}
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return 0
        except OSError as exc:
            log.warning("clips: cannot read %s: %s", self.directory, exc.strerror or exc)
            return 0
        # Only plain files are clips: a symbolic link placed here could point anywhere, and
        # the API serves what the index lists.
        entries = [entry for entry in entries if not entry.is_symlink()]
        names = {entry.name for entry in entries}
        for entry in entries:
            if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX):
                with suppress(OSError):
                    os.unlink(entry.path)
                continue
            if not entry.name.endswith(".json"):
                continue
            try:
                info = ClipInfo.from_dict(json.loads(Path(entry.path).read_text("utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("clips: skipping %s: %s", entry.path, exc)
                continue
            if info.id + ".json" != entry.name:
                continue
            info.files = [n for n in (info.clip, info.snapshot) if n and n in names]
            info.clip = info.clip if info.clip in names else None
            info.snapshot = info.snapshot if info.snapshot in names else None
            info.files.append(entry.name)
            info.bytes = sum(_size(self.directory / n) for n in info.files)
            found[info.id] = info
        for name in names:  # media of a clip whose description was never written
            stem, suffix = os.path.splitext(name)
            orphan = suffix in MEDIA_SUFFIXES and stem not in found
            if orphan and _GENERATED_ID.match(stem):
                with suppress(OSError):
                    os.unlink(self.directory / name)
        with self._lock:
            self._clips = dict(sorted(found.items(), key=lambda item: item[1].created))
        return len(found)

    def add(self, info: ClipInfo) -> None:
        with self._lock:
            self._clips[info.id] = info

    def get(self, clip_id: str) -> ClipInfo | None:
        with self._lock:
            return self._clips.get(clip_id)

    def list(self, stream: str | None = None) -> list[ClipInfo]:
        """Clips, newest first (only ``stream``'s when given)."""
        with self._lock:
            clips = list(self._clips.values())
        return [c for c in reversed(clips) if stream is None or c.stream == stream]

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(c.bytes for c in self._clips.values())

    def remove(self, clip_id: str) -> ClipInfo | None:
        """Forget a clip and delete its files (description first); the clip, if there was one."""
        with self._lock:
            info = self._clips.pop(clip_id, None)
        if info is not None:
            for name in sorted(info.files, key=lambda n: not n.endswith(".json")):
                with suppress(FileNotFoundError):
                    os.unlink(self.directory / name)
        return info

    def enforce(self, retention: Retention, keep: str | None = None) -> list[str]:
        """Delete the oldest clips until within ``retention`` (never ``keep``); ids deleted."""
        deleted: list[str] = []
        while True:
            with self._lock:
                count = len(self._clips)
                total = sum(c.bytes for c in self._clips.values())
                over = (retention.max_count is not None and count > retention.max_count) or (
                    retention.max_bytes is not None and total > retention.max_bytes
                )
                oldest = next((i for i in self._clips if i != keep), None)
            if not over or oldest is None:
                return deleted
            try:
                self.remove(oldest)
            except OSError as exc:
                log.error("clips: cannot delete %s: %s", oldest, exc.strerror or exc)
                return deleted
            deleted.append(oldest)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
