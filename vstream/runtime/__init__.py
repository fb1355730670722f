"""The daemon's runtime: pipelines of streams sharing a detector, feeding sinks."""

from vstream.runtime.daemon import Runtime
from vstream.runtime.errors import PipelineNotFound, StreamConflict, StreamNotFound
from vstream.runtime.pipeline import PipelineRuntime
from vstream.runtime.stream import StreamReader

__all__ = [
    "PipelineNotFound",
    "PipelineRuntime",
    "Runtime",
    "StreamConflict",
    "StreamNotFound",
    "StreamReader",
]
