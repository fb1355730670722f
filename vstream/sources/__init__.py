"""Sources: where frames come from (video files, live streams), each a :class:`Source`.

A source is iterated on the calling thread and yields every frame it reads,
in order; freshness (dropping old frames when detection falls behind) is the
engine's business (:mod:`vstream.engine.intake`), not the source's, except
where only the source can: a live stream whose decoding falls too far behind
its camera skips packets before decoding them (``max_behind_seconds``, counted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vstream.lazy import lazy_exports
from vstream.uri import is_live

if TYPE_CHECKING:
    import torch

    from vstream.config.sources import SourceOptions
    from vstream.sources.base import PacketTap, ResumePoint, Source


def open_source(
    uri: str,
    *,
    stream_id: str | None = None,
    device: str | torch.device = "cpu",
    options: SourceOptions | None = None,
    packet_tap: PacketTap | None = None,
    resume: ResumePoint | None = None,
) -> Source:
    """Open the file, camera or URL ``uri`` as a :class:`Source` of device frames.

    ``options`` carry everything else (decoder, reconnection, file playback);
    the defaults suit both files and live streams. ``packet_tap`` receives
    every compressed packet (event clips keep them). ``resume`` continues a
    stream after a frame delivered elsewhere (:class:`ResumePoint`).
    """
    if is_live(uri):
        from vstream.sources.live import LiveSource

        return LiveSource(
            uri, stream_id=stream_id, device=device, options=options, packet_tap=packet_tap,
            resume=resume,
        )  # fmt: skip
    from vstream.sources.file import VideoFileSource

    return VideoFileSource(
        uri, stream_id=stream_id, device=device, options=options, packet_tap=packet_tap,
        resume=resume,
    )  # fmt: skip


__all__ = [
    "DecoderKind",
    "FreshnessPolicy",
    "LiveSource",
    "ReconnectPolicy",
    "ResumePoint",
    "Source",
    "SourceOptions",
    "SourceState",
    "SourceStats",
    "VideoFileSource",
    "open_source",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DecoderKind": "vstream.config.sources",
        "FreshnessPolicy": "vstream.config.sources",
        "ReconnectPolicy": "vstream.config.sources",
        "SourceOptions": "vstream.config.sources",
        "LiveSource": "vstream.sources.live",
        "VideoFileSource": "vstream.sources.file",
        "Source": "vstream.sources.base",
        "ResumePoint": "vstream.sources.base",
        "SourceState": "vstream.sources.base",
        "SourceStats": "vstream.sources.base",
    },
)
