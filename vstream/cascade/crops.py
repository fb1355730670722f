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

import torch

from vstream.frame import Frame
from vstream.postprocess.nms import torchvision_op
from vstream.preprocess.colour import to_rgb_planar

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
    boxes: torch.Tensor,
    size: tuple[int, int],
    *,
    crop: Crop = "stretch",
    resize: Resize = "linear",
) -> torch.Tensor:
    """:func:`crop_rgb` of a decoded frame, in 0..255, on the frame's device."""
    return crop_rgb(to_rgb_planar(frame), boxes, size, crop=crop, resize=resize)


__all__ = ["crop_frame", "crop_rgb", "square_boxes"]
