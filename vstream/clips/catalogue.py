"""The clips of several recorders (one per clips sink), listed and served as one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from vstream.clips.recorder import ClipRecorder, ClipStats


class Catalogue:
    """What the dashboard and the API read: every recorder's clips, newest first."""

    def __init__(self, recorders: list[ClipRecorder]) -> None:
        self.recorders = recorders

    def clips(self, stream_id: str | None = None) -> list[dict[str, Any]]:
        listed = [clip for r in self.recorders for clip in r.clips(stream_id)]
        return sorted(listed, key=lambda clip: clip.get("created", 0), reverse=True)

    def recording(self, stream_id: str | None = None) -> list[dict[str, Any]]:
        return [capture for r in self.recorders for capture in r.recording(stream_id)]

    def file(self, clip_id: str, kind: str) -> Path | None:
        return next((p for r in self.recorders if (p := r.file(clip_id, kind))), None)

    @property
    def stats(self) -> ClipStats:
        total = ClipStats()
        for recorder in self.recorders:
            for field in fields(ClipStats):
                name = field.name
                setattr(total, name, getattr(total, name) + getattr(recorder.stats, name))
        return total
