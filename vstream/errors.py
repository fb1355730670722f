"""Errors that vstream reports to its users.

Every error a user can cause (a missing video, a model that does not fit, a bad
argument) derives from :class:`VstreamError`. The CLI prints such errors as one
line and exits with status 2; anything else is a bug and exits with status 1.
"""

from __future__ import annotations


class VstreamError(Exception):
    """Base class for errors caused by bad input rather than by a bug."""


class SourceError(VstreamError):
    """A video source could not be opened or decoded."""


class ModelError(VstreamError):
    """An ONNX model could not be loaded or its inputs/outputs do not fit."""


class RuntimeNotInstalledError(VstreamError):
    """No usable ONNX Runtime wheel is installed."""
