"""Errors that vstream reports to its users, classified by what should happen next.

Every error a user can cause (a missing video, a model that does not fit, a bad
argument) derives from :class:`VstreamError`; the CLI prints it as one line and
exits with status 2. Anything else is a bug and exits with status 1.

Services also need to know whether trying again can help. Only
:class:`TransientError` is retried (with backoff): a network that is down, a
camera that went away, a broker that does not answer. Everything else (a bug,
a model that does not fit the config, an unsupported codec or bit depth, an
allocation failure) fails its stream or sink once, loudly, and is never
retried: a retry loop around a bug only looks like a flaky camera.
"""

from __future__ import annotations


class VstreamError(Exception):
    """Base class for errors caused by bad input rather than by a bug."""


class TransientError(VstreamError):
    """Input or output that may work when tried again: retried with backoff."""


class SourceError(VstreamError):
    """A video source cannot be used: opened, decoded or read to its end."""


class SourceUnavailable(SourceError, TransientError):
    """A source is unreachable for now: refused, timed out, stalled or cut off."""


class ModelError(VstreamError):
    """An ONNX model could not be loaded or its inputs/outputs do not fit."""


class RuntimeNotInstalledError(VstreamError):
    """No usable ONNX Runtime wheel is installed."""


class LimitExceeded(VstreamError):
    """A deployment limit (streams, decoder threads) would be exceeded; nothing was started."""


def describe(exc: BaseException) -> str:
    """One line for ``exc``: its message for a :class:`VstreamError`, else type and message."""
    if isinstance(exc, VstreamError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when it has none.

    For a reason quoted inside a message of our own (``cannot load model m.onnx:
    <first line>``), where a library's multi-line message or traceback text
    would break the one-line rule.
    """
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
