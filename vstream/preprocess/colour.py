"""YUV 4:2:0 -> RGB conversion on the device.

NVDEC hands out NV12 and most cameras encode BT.601 or BT.709 in limited
range, so the conversion runs as a few tensor ops wherever the frame already
is, instead of asking the decoder for RGB on the host.
"""

from __future__ import annotations

import functools

import torch

from vstream.frame import ColourMatrix, ColourSpace, Frame, PixelFormat

# (Kr, Kb) luma coefficients of each matrix (ITU-R BT.601 and BT.709).
_LUMA_COEFFICIENTS = {
    ColourMatrix.BT601: (0.299, 0.114),
    ColourMatrix.BT709: (0.2126, 0.0722),
}


@functools.cache
def yuv_to_rgb_coefficients(colour: ColourSpace) -> tuple[tuple[float, ...], tuple[float, float]]:
    """Return the 3x3 matrix (row-major) and the (luma, chroma) offsets for ``colour``.

    RGB = M @ (Y - luma_offset, U - chroma_offset, V - chroma_offset), in 0..255.
    """
    kr, kb = _LUMA_COEFFICIENTS[colour.matrix]
    kg = 1.0 - kr - kb
    if colour.full_range:
        y_scale, c_scale, luma_offset = 1.0, 1.0, 0.0
    else:
        y_scale, c_scale, luma_offset = 255.0 / 219.0, 255.0 / 224.0, 16.0
    matrix = (
        y_scale, 0.0, 2.0 * (1.0 - kr) * c_scale,
        y_scale, -2.0 * kb * (1.0 - kb) / kg * c_scale, -2.0 * kr * (1.0 - kr) / kg * c_scale,
        y_scale, 2.0 * (1.0 - kb) * c_scale, 0.0,
    )  # fmt: skip
    return matrix, (luma_offset, 128.0)


@functools.lru_cache(maxsize=16)
def _matrix_on(colour: ColourSpace, device: torch.device) -> torch.Tensor:
    """The conversion matrix as a device tensor, made once per colour space and device."""
    matrix, _ = yuv_to_rgb_coefficients(colour)
    return torch.tensor(matrix, dtype=torch.float32, device=device).view(3, 3)


def chroma_planes(
    data: torch.Tensor, pixel_format: PixelFormat, width: int, height: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The U and V planes of a 4:2:0 picture laid out as ``pixel_format`` says (a frame's
    :attr:`~vstream.frame.Frame.data`), each ``(height/2, width/2)`` (views of a contiguous
    picture)."""
    h, w = height, width
    chroma = data[h:]
    if pixel_format is PixelFormat.NV12:
        interleaved = chroma.view(h // 2, w // 2, 2)
        return interleaved[..., 0], interleaved[..., 1]
    planar = chroma.reshape(2, h // 2, w // 2)
    return planar[0], planar[1]


def to_rgb_planar(frame: Frame) -> torch.Tensor:
    """Convert ``frame`` to float32 RGB of shape ``(1, 3, height, width)`` in 0..255.

    Chroma is upsampled by sample repetition, which is what FFmpeg's default
    scaler does closely enough for detection (a mean error below one level).
    """
    if frame.pixel_format is PixelFormat.RGB24:
        return frame.data.permute(2, 0, 1).unsqueeze(0).float()
    _, (luma_offset, chroma_offset) = yuv_to_rgb_coefficients(frame.colour)
    h, w = frame.height, frame.width
    u, v = chroma_planes(frame.data, frame.pixel_format, w, h)
    yuv = torch.empty((3, h, w), dtype=torch.float32, device=frame.device)
    torch.sub(frame.data[:h], luma_offset, out=yuv[0])
    yuv[1].view(h // 2, 2, w // 2, 2).copy_(u[:, None, :, None].expand(-1, 2, -1, 2))
    yuv[2].view(h // 2, 2, w // 2, 2).copy_(v[:, None, :, None].expand(-1, 2, -1, 2))
    yuv[1:].sub_(chroma_offset)
    rgb = torch.mm(_matrix_on(frame.colour, frame.device), yuv.view(3, -1)).view(1, 3, h, w)
    return rgb.clamp_(0.0, 255.0)
