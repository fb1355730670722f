"""Object crops cut from the decoded frame on its own device, resized for a secondary model.

Crops come from the whole decoded picture, not from the detector's
letterboxed input: a 20-pixel object in a 4K frame keeps its 20 pixels
instead of the 3 the letterbox left it. The frame is made RGB by the
preprocessing's own conversion (:func:`vstream.preprocess.colour.to_rgb_planar`:
NV12 or I420 on a GPU, the decoder's RGB on the CPU), and every box is cut
and resized in one call of torchvision's ``roi_align`` kernel (the compiled
op, without ``import torchvision``; see :func:`vstream.postprocess.nms.torchvision_op`).

``roi_align`` with ``aligned=True`` samples bin centres in pixel-edge
coordinates (a box ``[0, W]`` covers the whole row), so boxes go in as the
detector gives them. ``resize="linear"`` takes one bilinear sample per
output pixel, which is OpenCV's ``INTER_LINEAR`` resize of the cut box (the
same numbers wherever the box is shrunk; enlarged, the edge pixels blend with
the frame's neighbours instead of repeating the box's border).
``resize="area"`` averages ``ceil(box / output)`` samples per output pixel
in each direction, one source pixel apart: OpenCV's ``INTER_AREA`` at whole
ratios, and no aliasing when a large box shrinks a lot. Samples outside the
frame (a square crop at its edge) read 0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from vstream.frame import Frame, PixelFormat
from vstream.postprocess.nms import torchvision_op
from vstream.preprocess.colour import to_rgb_planar
from vstream.transfer import upload

Crop = Literal["stretch", "square"]
Resize = Literal["linear", "area"]


def square_boxes(boxes: torch.Tensor) -> torch.Tensor:
    """The square around each ``x1, y1, x2, y2`` box's centre, its side the box's longer side."""
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    half = (boxes[:, 2:] - boxes[:, :2]).amax(dim=1, keepdim=True) / 2
    return torch.cat([centre - half, centre + half], dim=1)


def crop_rgb(
    rgb: torch.Tensor,
    boxes: torch.Tensor,
    size: tuple[int, int],
    *,
    crop: Crop = "stretch",
    resize: Resize = "linear",
) -> torch.Tensor:
    """Cut ``boxes`` (``(K, 4)`` xyxy pixels) out of ``rgb`` (``(1, 3, H, W)`` float), resized.

    Returns ``(K, 3, height, width)`` float32 on ``rgb``'s device, in ``rgb``'s value units.
    """
    boxes = boxes.to(device=rgb.device, dtype=torch.float32)
    if crop == "square":
        boxes = square_boxes(boxes)
    rois = torch.cat([boxes.new_zeros((len(boxes), 1)), boxes], dim=1)
    height, width = size
    sampling = 1 if resize == "linear" else 0  # 0: ceil(bin size) samples per bin, averaged
    return torchvision_op("roi_align")(rgb, rois, 1.0, height, width, sampling, True)


def crop_frame(
    frame: Frame,
    boxes: np.ndarray | torch.Tensor,
    size: tuple[int, int],
    *,
    crop: Crop = "stretch",
    resize: Resize = "linear",
) -> torch.Tensor:
    """:func:`crop_rgb` of a decoded frame, in 0..255, on the frame's device.

    ``boxes`` are on the host (the detector's boxes already are). Only the
    part of the frame that holds them, plus a margin of the pixels the
    bilinear samples reach, is made RGB: converting a whole 720p frame to
    float RGB costs more than reading 20 crops of it. The answer is the one
    the whole frame gives (the region's edges are the frame's, or beyond
    every sample).
    """
    host = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4).cpu()
    if crop == "square":
        host = square_boxes(host)
    left, top, right, bottom = _region(host, frame)
    part = _part(frame, left, top, right, bottom)
    shifted = host - torch.tensor([left, top, left, top], dtype=torch.float32)
    if part.pixel_format is PixelFormat.RGB24:
        # Contiguous planes: torchvision's CPU roi_align is some 60 times slower on the
        # channels-last strides of an RGB24 picture's planar view, and making its float
        # copy contiguous costs six times what the uint8 planes' copy does.
        rgb = part.data.permute(2, 0, 1).contiguous().unsqueeze(0).float()
    else:
        rgb = to_rgb_planar(part)  # NV12, I420: converted into contiguous planes
    return crop_rgb(rgb, upload(shifted, frame.device), size, crop="stretch", resize=resize)


_MARGIN = 2
"""Pixels around the boxes a bilinear sample may read (half a pixel out, one neighbour)."""


def _region(boxes: torch.Tensor, frame: Frame) -> tuple[int, int, int, int]:
    """The frame's rectangle holding every box and its margin; even edges for 4:2:0 chroma."""
    if len(boxes) == 0:
        return 0, 0, 2, 2
    low = (boxes[:, :2].amin(dim=0) - _MARGIN).floor().clamp(min=0)
    high = (boxes[:, 2:].amax(dim=0) + _MARGIN).ceil()
    left, top = (int(v) // 2 * 2 for v in low.tolist())
    right = min(frame.width, -(-int(high[0]) // 2) * 2)
    bottom = min(frame.height, -(-int(high[1]) // 2) * 2)
    return left, top, max(right, left + 2), max(bottom, top + 2)


def _part(frame: Frame, left: int, top: int, right: int, bottom: int) -> Frame:
    """The rectangle of ``frame`` as a frame of its own (the whole frame when it is all)."""
    if (left, top, right, bottom) == (0, 0, frame.width, frame.height):
        return frame
    width, height = right - left, bottom - top
    data = frame.data
    if frame.pixel_format is PixelFormat.RGB24:
        part = data[top:bottom, left:right]
    elif frame.pixel_format is PixelFormat.NV12:  # interleaved U, V: even columns stay pairs
        rows = frame.height + top // 2, frame.height + bottom // 2
        part = torch.cat([data[top:bottom, left:right], data[rows[0] : rows[1], left:right]])
    else:  # I420: each chroma plane's rectangle, laid out as planes of the part
        h, w = frame.height, frame.width
        planes = data[h:].reshape(2, h // 2, w // 2)[
            :, top // 2 : bottom // 2, left // 2 : right // 2
        ]
        part = torch.cat([data[top:bottom, left:right].reshape(-1), planes.reshape(-1)])
        part = part.view(height * 3 // 2, width)
    return Frame(part.contiguous(), frame.pixel_format, width, height, colour=frame.colour)


__all__ = ["crop_frame", "crop_rgb", "square_boxes"]
