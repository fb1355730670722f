"""Colour conversion and resize in one pass, by FFmpeg's scaler: the ``resize: area`` opt-in.

The default letterbox is the reference's (FFmpeg's full-size RGB, then
OpenCV's bilinear; :mod:`vstream.preprocess.letterbox`): models notice the
difference. This path is for those who prefer area averaging and its cost.

The CPU decoder leaves each picture in FFmpeg's memory (YUV, as decoded).
Converting it to RGB at full size and then resizing, as a naive loop does,
touches every full-size pixel twice more than needed: for a 720p picture
that costs more than decoding it. FFmpeg's scaler (libswscale, through
PyAV) instead reads the YUV planes once and writes RGB straight at the
letterbox size, so nothing is ever allocated at full size, in float or
otherwise; the letterbox then only pads and normalises into the model input.

Area averaging is the interpolation: for the downscaling a detector input
almost always is, it averages every source pixel instead of sampling a few
(no aliasing), and on this project's machine it was the fastest of FFmpeg's
filters that keep edges where they are (0.5 ms for 720p to 320x180 planar
RGB, against 4.9 ms for a full-size RGB conversion and a bilinear resize). Each scaler
runs on the calling thread (``threads=1``): several streams never each
start a thread per core for it.
"""

from __future__ import annotations

import av
import numpy as np
import torch
from av.video.reformatter import Interpolation, VideoReformatter

from vstream.preprocess.recent import Recent

INTERPOLATION = Interpolation.AREA

MAX_CONTEXTS = 8
"""Scaling contexts kept per :class:`Scaler`, one per source layout, least recently used dropped."""


class Scaler:
    """FFmpeg scaling contexts, one per source layout and target size, reused frame after frame.

    A context is set up for one source size and pixel format (building its
    filters costs more than scaling a picture), so streams of different
    sizes sharing one letterboxer each keep theirs. Not thread-safe: each
    letterboxer has its own, used by whichever stage holds its buffer.
    """

    def __init__(self) -> None:
        self._contexts: Recent[tuple[int, int, str, int, int], VideoReformatter] = Recent(
            MAX_CONTEXTS
        )

    def rgb_planes(
        self, picture: av.VideoFrame, width: int, height: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``picture`` as R, G and B ``uint8`` ``(height, width)`` planes, in one pass.

        Planar output (FFmpeg's ``gbrp``) is what the model input's layout
        wants, and FFmpeg writes it faster than packed RGB. Each tensor is a
        view of the scaled picture FFmpeg wrote (rows may be padded for
        alignment) and keeps that picture alive while it is used.
        """
        key = (picture.width, picture.height, picture.format.name, width, height)
        context = self._contexts.get(key, VideoReformatter)
        scaled = context.reformat(
            picture, width, height, "gbrp", interpolation=INTERPOLATION, threads=1
        )
        green, blue, red = (
            torch.from_numpy(
                np.ndarray((height, width), np.uint8, buffer=plane, strides=(plane.line_size, 1))
            )
            for plane in scaled.planes
        )
        return red, green, blue
