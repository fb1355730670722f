"""Pixel-format conversions for drawing and encoding, on the frame's own device."""

from __future__ import annotations

import functools

import torch

from vstream.frame import Frame, PixelFormat

# BT.601 limited range ("TV"), what FFmpeg's scaler and most players assume by default:
# Y in 16..235, Cb/Cr in 16..240. Rows: Y, Cb, Cr; columns: R, G, B (inputs in 0..255).
_RGB_TO_YCBCR_601 = (
    (65.481 / 255, 128.553 / 255, 24.966 / 255),
    (-37.797 / 255, -74.203 / 255, 112.0 / 255),
    (112.0 / 255, -93.786 / 255, -18.214 / 255),
)
_YCBCR_OFFSETS = (16.0, 128.0, 128.0)


def frame_to_rgb(frame: Frame) -> torch.Tensor:
    """An owned RGB ``uint8`` ``(height, width, 3)`` tensor of ``frame`` on its device.

    Drawing on the result never touches the decoder's buffer: RGB frames are
    copied, YUV frames converted (:func:`vstream.preprocess.colour.to_rgb_planar`,
    honouring the frame's colour matrix and range).
    """
    if frame.pixel_format is PixelFormat.RGB24:
        return frame.data.clone(memory_format=torch.contiguous_format)
    from vstream.preprocess.colour import to_rgb_planar

    planar = to_rgb_planar(frame)[0]
    return planar.round_().to(torch.uint8).permute(1, 2, 0).contiguous()


@functools.lru_cache(maxsize=8)
def _matrix(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    matrix = torch.tensor(_RGB_TO_YCBCR_601, dtype=torch.float32, device=device)
    offsets = torch.tensor(_YCBCR_OFFSETS, dtype=torch.float32, device=device)
    return matrix, offsets


def rgb_to_yuv420(image: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """BT.601 limited-range 4:2:0 of an RGB ``uint8`` ``(H, W, 3)`` picture, on its device.

    Returns ``(H * 3 // 2, W)`` ``uint8``: the luma plane, then I420's U and V
    planes or, with ``interleaved``, NV12's interleaved UV plane. Chroma is the
    mean of each 2x2 block. ``H`` and ``W`` must be even.
    """
    height, width = image.shape[0], image.shape[1]
    if image.dim() != 3 or image.shape[2] != 3 or image.dtype != torch.uint8:
        raise ValueError(f"expected RGB uint8 (H, W, 3), got {tuple(image.shape)} {image.dtype}")
    if height % 2 or width % 2:
        raise ValueError(f"4:2:0 needs an even width and height, got {width}x{height}")
    matrix, offsets = _matrix(image.device)
    rgb = image.float()
    out = torch.empty((height * 3 // 2, width), dtype=torch.uint8, device=image.device)
    luma = torch.matmul(rgb, matrix[0]).add_(offsets[0])
    out[:height].copy_(luma.round_().clamp_(0, 255))
    # Mean RGB of every 2x2 block, then its chroma (the conversion is linear, so this is
    # the mean of the four pixels' chroma).
    blocks = rgb.view(height // 2, 2, width // 2, 2, 3).mean(dim=(1, 3))
    chroma = torch.matmul(blocks, matrix[1:].t()).add_(offsets[1:]).round_().clamp_(0, 255)
    if interleaved:
        out[height:].view(height // 2, width // 2, 2).copy_(chroma)
    else:
        planes = out[height:].view(2, height // 2, width // 2)
        planes.copy_(chroma.permute(2, 0, 1))
    return out
