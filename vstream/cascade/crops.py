"""Object crops cut from the decoded frame on its own device, resized for a secondary model.

Crops come from the whole decoded picture, not from the detector's
letterboxed input: a 20-pixel object in a 4K frame keeps its 20 pixels
instead of the 3 the letterbox left it.

By default a crop is the one users train their secondary models on: the
detector's box rounded to whole pixels (``round: nearest``, as supervision's
``crop_image`` does; ``floor``: truncated, as Ultralytics' ``save_one_box``
and ``int()`` in most scripts do), clipped to the frame, cut, and resized by
OpenCV's ``cv2.resize`` (``INTER_LINEAR``, or ``INTER_AREA`` with ``resize:
area``) of the frame's RGB, which is FFmpeg's. On the CPU (RGB frames, and
any picture the CPU decoder left in FFmpeg's memory), OpenCV itself resizes
the cut, so the crop is exactly what a training script makes from the same
frame. A frame elsewhere (NVDEC's NV12 on a GPU) takes the
letterbox's way to the same pixels (:mod:`vstream.preprocess.resample`):
the cut converted with FFmpeg's fixed-point arithmetic, then blended with
OpenCV's fixed-point weights, within one grey level of OpenCV's; ``area``
averages the cut with torch there (OpenCV's ``INTER_AREA`` at whole ratios).

``round: subpixel`` keeps the rule vstream had before: the box's fractional
edges sampled as they are, every box in one call of torchvision's
``roi_align`` (the compiled op, without ``import torchvision``; see
:func:`vstream.postprocess.nms.torchvision_op`) on the frame made RGB by
:func:`vstream.preprocess.colour.to_rgb_planar`. ``aligned=True`` samples bin
centres in pixel-edge coordinates (a box ``[0, W]`` covers the whole row);
``resize: linear`` takes one bilinear sample per output pixel (OpenCV's
``INTER_LINEAR`` of a whole-pixel box; enlarged, the edge pixels blend with
the frame's neighbours instead of repeating the box's border), ``area``
averages ``ceil(box / output)`` samples per output pixel in each direction.
Samples outside the frame (a square crop at its edge) read 0. Models trained
on those crops (this project's demo colour and appearance models) want them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from vstream.decoders.cpu import PyAVPicture
from vstream.frame import Frame, PixelFormat
from vstream.postprocess.nms import torchvision_op
from vstream.preprocess.colour import to_rgb_planar
from vstream.preprocess.letterbox import _opencv as opencv
from vstream.preprocess.resample import Resampler
from vstream.transfer import upload

Crop = Literal["stretch", "square"]
Resize = Literal["linear", "area"]
Round = Literal["nearest", "floor", "subpixel"]


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
    rounding: Round = "nearest",
    resampler: Resampler | None = None,
) -> torch.Tensor:
    """The crops of ``boxes`` (``(K, 4)`` xyxy frame pixels, on the host) out of ``frame``,
    each resized to ``size`` (``(height, width)``): ``(K, 3, height, width)`` float32 RGB in
    0..255 on the frame's device.

    ``rounding`` (the ``round`` option) says how a box becomes pixels (see the
    module's docstring); ``resampler`` keeps its plans from call to call (a
    :class:`~vstream.cascade.model.SecondaryModel` has one).
    """
    host = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4).cpu()
    if crop == "square":
        host = square_boxes(host)
    if rounding == "subpixel":
        return _sampled(frame, host, size, resize)
    cuts = whole_pixel_boxes(host.numpy(), rounding, frame.width, frame.height)
    if frame.device.type == "cpu" and frame.pixel_format is PixelFormat.RGB24:
        return _opencv_crops(frame.data.numpy(), cuts, size, resize)
    if isinstance(frame.picture, PyAVPicture):  # the CPU decoder's, kept as YUV: FFmpeg's RGB
        rgb = frame.picture.to_tensor(PixelFormat.RGB24).numpy()
        return _opencv_crops(rgb, cuts, size, resize)
    return _device_crops(frame, cuts, size, resize, resampler or Resampler())


def whole_pixel_boxes(boxes: np.ndarray, rounding: Round, width: int, height: int) -> np.ndarray:
    """``(K, 4)`` xyxy boxes as the whole-pixel rectangles cut for them, ``(K, 4)`` int64.

    ``nearest`` rounds each edge (half to even, as numpy's and supervision's
    ``np.round``), ``floor`` drops the fraction (``int()`` of an edge inside the
    frame, as Ultralytics' ``save_one_box``). The rectangle is then clipped to
    the frame and keeps at least one pixel each way.
    """
    edges = np.round(boxes) if rounding == "nearest" else np.floor(boxes)
    limits = np.array([width, height, width, height])
    cuts = np.clip(edges, 0, limits).astype(np.int64)
    cuts[:, :2] = np.minimum(cuts[:, :2], limits[:2] - 1)
    cuts[:, 2:] = np.maximum(cuts[:, 2:], cuts[:, :2] + 1)
    return cuts


def _opencv_crops(
    rgb: np.ndarray, cuts: np.ndarray, size: tuple[int, int], resize: Resize
) -> torch.Tensor:
    """Each cut of a host RGB picture resized by OpenCV itself: a training script's crop."""
    cv2 = opencv()
    height, width = size
    interpolation = cv2.INTER_LINEAR if resize == "linear" else cv2.INTER_AREA
    crops = np.empty((len(cuts), height, width, 3), np.uint8)
    for out, (x1, y1, x2, y2) in zip(crops, cuts.tolist(), strict=True):
        cv2.resize(rgb[y1:y2, x1:x2], (width, height), dst=out, interpolation=interpolation)
    return torch.from_numpy(crops).permute(0, 3, 1, 2).float()


def _device_crops(
    frame: Frame, cuts: np.ndarray, size: tuple[int, int], resize: Resize, resampler: Resampler
) -> torch.Tensor:
    """Each cut as OpenCV resizes FFmpeg's RGB of it, in the letterbox's fixed-point arithmetic
    (:class:`Resampler`): a 4:2:0 frame's cut is made RGB first, its chroma read from the
    frame's own 2x2 blocks, as FFmpeg converts the whole frame."""
    height, width = size
    out = torch.empty((len(cuts), 3, height, width), device=frame.device)
    for slot, (x1, y1, x2, y2) in enumerate(cuts.tolist()):
        if frame.pixel_format is PixelFormat.RGB24:
            cut = frame.data[y1:y2, x1:x2]
        else:
            rgb = _rgb(frame, x1 // 2 * 2, y1 // 2 * 2, x2 + x2 % 2, y2 + y2 % 2, resampler)
            cut = rgb[y1 % 2 : y1 % 2 + y2 - y1, x1 % 2 : x1 % 2 + x2 - x1]
        if resize == "linear":
            window = out[slot : slot + 1]
            resampler.resample([cut], PixelFormat.RGB24, (x2 - x1, y2 - y1), frame.colour, window)
        else:
            planar = cut.permute(2, 0, 1).unsqueeze(0).float()
            out[slot : slot + 1] = F.interpolate(planar, size=size, mode="area") / 255
    return out.mul_(255).round_()


def _rgb(
    frame: Frame, left: int, top: int, right: int, bottom: int, resampler: Resampler
) -> torch.Tensor:
    """FFmpeg's RGB of a rectangle of a 4:2:0 frame (even edges), ``(h, w, 3)`` uint8."""
    part = _part(frame, left, top, right, bottom)
    rgb = torch.empty((1, 3, part.height, part.width), device=frame.device)
    shape = (part.width, part.height)
    resampler.resample([part.data], part.pixel_format, shape, part.colour, rgb)
    return rgb[0].mul_(255).round_().to(torch.uint8).permute(1, 2, 0)


def _sampled(
    frame: Frame, host: torch.Tensor, size: tuple[int, int], resize: Resize
) -> torch.Tensor:
    """``round: subpixel``: :func:`crop_rgb` of the fractional boxes.

    Only the part of the frame that holds them, plus a margin of the pixels the
    bilinear samples reach, is made RGB: converting a whole 720p frame to
    float RGB costs more than reading 20 crops of it. The answer is the one
    the whole frame gives (the region's edges are the frame's, or beyond
    every sample).
    """
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


__all__ = ["crop_frame", "crop_rgb", "square_boxes", "whole_pixel_boxes"]
