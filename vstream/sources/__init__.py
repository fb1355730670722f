"""Sources and decoders: where frames come from."""

from __future__ import annotations

import torch

from vstream.errors import SourceError
from vstream.sources.base import Source, SourceState, SourceStats
from vstream.sources.file import VideoFileSource
from vstream.sources.options import DecoderKind, FreshnessPolicy, ReconnectPolicy, SourceOptions
from vstream.uri import is_live, redact_uri


def open_source(
    uri: str,
    *,
    stream_id: str | None = None,
    device: str | torch.device = "cpu",
    options: SourceOptions | None = None,
) -> Source:
    """Open the file, camera or URL ``uri`` as a :class:`Source` of device frames."""
    if is_live(uri):
        raise SourceError(f"live sources are not supported yet: {redact_uri(uri)}")
    return VideoFileSource(uri, stream_id=stream_id, device=device)


__all__ = [
    "DecoderKind",
    "FreshnessPolicy",
    "ReconnectPolicy",
    "Source",
    "SourceOptions",
    "SourceState",
    "SourceStats",
    "VideoFileSource",
    "open_source",
]
