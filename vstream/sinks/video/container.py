"""Where an encoded video goes, a file or a live output, and what every encoder backend is.

A file is written as ``PATH.partial`` next to ``PATH`` and given its name (after
an ``fsync``) only once it is complete, so that a crash never leaves half a
video named like a whole one; its muxer comes from its extension. A live output
is FLV sent to an ``rtmp://`` or ``rtmps://`` URL, with a time limit on
connecting and on each write, so that a media server that has gone is noticed
instead of waited on for ever.

Both backends (:mod:`vstream.sinks.video.libx264`, :mod:`vstream.sinks.video.nvenc`)
are a :class:`Backend`: one encoder writing one container of this module's.
"""

from __future__ import annotations

import contextlib
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

from vstream.config.sinks import video_container
from vstream.diskspace import sync
from vstream.errors import VstreamError

TIME_BASE = Fraction(1, 90000)
"""Time base of the written stream: 90 kHz, fine enough for any frame timing."""

PARTIAL_SUFFIX = ".partial"

PUBLISH_FORMAT = "flv"
"""FFmpeg's muxer for RTMP."""
PUBLISH_TIMEOUT_SECONDS = 10.0
"""Limit on connecting to the media server and on each write to it."""


class VideoWriteError(VstreamError):
    """The annotated video cannot be written: bad path, unwritable directory, full disk, encoder."""


def partial_path(path: str | Path) -> Path:
    """Where the video is written until it is complete: ``PATH.partial``, same directory."""
    path = Path(path)
    return path.with_name(path.name + PARTIAL_SUFFIX)


def container_format(path: str | Path) -> str:
    """The FFmpeg muxer for ``path``'s extension, or :class:`VideoWriteError`."""
    try:
        return video_container(path)
    except ValueError as exc:
        raise VideoWriteError(str(exc)) from None


def complete(partial: Path, path: Path) -> None:
    """Give the finished ``partial`` file its name ``path``, its bytes on disk first.

    The ``fsync`` comes before the rename so that a crash leaves either the
    partial file or the whole video, never a name over missing bytes.
    """
    sync(partial)
    os.replace(partial, path)


def open_container(path: Path | str, fmt: str) -> Any:
    """The output container; a live one with a time limit on connecting and on each write."""
    import av

    timeout = PUBLISH_TIMEOUT_SECONDS if fmt == PUBLISH_FORMAT else None
    return av.open(str(path), "w", format=fmt, timeout=timeout)


def frame_rate(fps: float) -> Fraction:
    """``fps`` as the fraction a container records: NTSC's ``30000 / 1001``, not a float's."""
    return Fraction(fps).limit_denominator(1001)


class Backend:
    """One encoder writing one container; every method runs on the writer's thread."""

    name = "?"
    container: Any
    """The container of :func:`open_container` the encoder's packets go into."""

    def encode(self, image: torch.Tensor, ticks: int) -> None:  # pragma: no cover - interface
        """Encode the RGB picture ``image`` shown at ``ticks`` (in :data:`TIME_BASE`)."""
        raise NotImplementedError

    def finish(self) -> None:  # pragma: no cover - interface
        """Flush the encoder and close the container: the video is whole."""
        raise NotImplementedError

    def connect(self) -> None:
        """Open the output now: for a live one, reach the media server and start publishing.

        FFmpeg otherwise opens it at the first packet, so a server that is down
        would look reachable until then, and each attempt would count as a
        reconnection (and end the outage, restarting the backoff at its shortest).
        """
        self.container.start_encoding()

    def abort(self) -> None:
        """Close the container, whatever state it is in (a failure is being handled)."""
        container = getattr(self, "container", None)
        if container is not None:
            with contextlib.suppress(Exception):
                container.close()
