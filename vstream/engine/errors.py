"""Errors of the engine's stream API, each mapped to its own HTTP status by the server."""

from __future__ import annotations

from vstream.errors import LimitExceeded, VstreamError


class StreamNotFound(VstreamError):
    """No stream has the given id (404)."""


class StreamConflict(VstreamError):
    """A stream with the given id is already there, running or ended (409)."""


class PipelineNotFound(VstreamError):
    """No pipeline has the given name (404)."""


class ShuttingDown(VstreamError):
    """The engine is stopping and takes no new streams (503)."""


class PipelineFailed(VstreamError):
    """The pipeline's stages stopped for good (a bug in one): it takes no new streams (503)."""


__all__ = [
    "LimitExceeded",
    "PipelineFailed",
    "PipelineNotFound",
    "ShuttingDown",
    "StreamConflict",
    "StreamNotFound",
]
