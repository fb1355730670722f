"""Errors of the runtime API, each mapped to its own HTTP status by the server."""

from __future__ import annotations

from vstream.errors import VstreamError


class StreamNotFound(VstreamError):
    """No stream has the given id (404)."""


class StreamConflict(VstreamError):
    """A stream with the given id is already running (409)."""


class PipelineNotFound(VstreamError):
    """No pipeline has the given name (404)."""
