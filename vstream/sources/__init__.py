"""Sources and decoders: where frames come from."""

from vstream.sources.file import VideoFileSource

__all__ = ["VideoFileSource"]
