"""The colour space of a decoded stream: one rule for every decoder.

FFmpeg says how a picture's YUV maps to RGB in two fields, on frames and on
codec contexts alike: the matrix (``AVColorSpace``) and the range
(``AVColorRange``). The ``yuvj*`` pixel formats (what many IP cameras send,
and MJPEG decodes to) mean full range by themselves: FFmpeg's converter takes
them as full range whatever ``color_range`` says, or when it says nothing.
The CPU decoder reads a decoded frame's fields and NVDEC's adapter the
stream's (NVDEC hands out the coded samples, range untouched); both ask
:func:`colour_space`, so one camera gives the same pixels on either.
"""

from __future__ import annotations

from vstream.frame import ColourMatrix, ColourSpace

AVCOL_SPC_BT709 = 1
"""FFmpeg's ``AVCOL_SPC_BT709``. Every other matrix, unspecified included, converts as BT.601,
as FFmpeg's converter does."""
AVCOL_RANGE_JPEG = 2
"""FFmpeg's ``AVCOL_RANGE_JPEG``: full range (0..255)."""


def colour_space(
    colorspace: int | None, color_range: int | None, pix_fmt: str | None
) -> ColourSpace:
    """The :class:`ColourSpace` FFmpeg converts a picture of these fields with.

    ``colorspace`` and ``color_range`` are FFmpeg's codes (PyAV's ``colorspace`` and
    ``color_range`` of a frame or codec context), ``pix_fmt`` its pixel format's name.
    """
    matrix = ColourMatrix.BT709 if colorspace == AVCOL_SPC_BT709 else ColourMatrix.BT601
    full = color_range == AVCOL_RANGE_JPEG or (pix_fmt or "").startswith("yuvj")
    return ColourSpace(matrix=matrix, full_range=full)


__all__ = ["AVCOL_RANGE_JPEG", "AVCOL_SPC_BT709", "colour_space"]
