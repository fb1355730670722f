"""Sources and decoders: where frames come from."""

from vstream.sources.base import Source, SourceState, SourceStats
from vstream.sources.file import VideoFileSource

__all__ = ["Source", "SourceState", "SourceStats", "VideoFileSource"]
