"""Sources and decoders: where frames come from."""

from __future__ import annotations

import torch

from vstream.sources.base import Source, SourceState, SourceStats
from vstream.sources.file import VideoFileSource
from vstream.sources.live import LiveSource
from vstream.sources.options import DecoderKind, FreshnessPolicy, ReconnectPolicy, SourceOptions
from vstream.uri import is_live


def open_source(
    uri: str,
    *,
    stream_id: str | None = None,
    device: str | torch.device = "cpu",
    options: SourceOptions | None = None,
) -> Source:
    """Open the file, camera or URL ``uri`` as a :class:`Source` of device frames.

    ``options`` carry everything else (decoder, freshness policy, reconnection,
    file playback); the defaults suit both files and live streams.
    """
    options = options or SourceOptions()
    if is_live(uri):
        return LiveSource(uri, stream_id=stream_id, device=device, options=options)
    return VideoFileSource(uri, stream_id=stream_id, device=device, options=options)


__all__ = [
    "DecoderKind",
    "FreshnessPolicy",
    "LiveSource",
    "ReconnectPolicy",
    "Source",
    "SourceOptions",
    "SourceState",
    "SourceStats",
    "VideoFileSource",
    "open_source",
]
