"""Instance masks on the device, and the compact form in which they leave it.

A segmentation model gives every box row ``nm`` mask coefficients and the
frame ``nm`` prototypes at a quarter of the input size
(:mod:`vstream.postprocess.tasks`). A mask is only made for the boxes kept
after NMS: its logits are the coefficients times the prototypes. Ultralytics
makes frame-sized masks (``retina_masks``) by resampling those logits
bilinearly to the frame, keeping the pixels above 0, and cropping them to the
box (a pixel column ``c`` is kept where ``x1 <= c < x2``). vstream follows
the same rule but computes only the pixels inside each box: every frame pixel
centre of the box's window is mapped through the letterbox to prototype
coordinates and the logits sampled there bilinearly, so nothing frame-sized
is ever made.

**What leaves the device.** Each object's window, ``ceil(x1)..ceil(x2)-1`` by
``ceil(y1)..ceil(y2)-1`` in frame pixels, row-major, one bit per pixel,
padded to whole bytes: the batch's masks are one ``uint8`` tensor copied once
(:func:`vstream.transfer.to_host`), ``w * h / 8`` bytes per object. The host
reads each object's bits as a :class:`vstream.masks.Mask`, which writes itself
as COCO RLE or polygons for the records (``postprocess.mask_format``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch

from vstream.masks import Mask, packed_offsets
from vstream.transfer import upload

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)
"""Bit values of a byte, most significant first (numpy's ``packbits`` order)."""


def mask_bits(
    protos: torch.Tensor,
    coefficients: torch.Tensor,
    frame: np.ndarray,
    windows: np.ndarray,
    geometry: torch.Tensor,
    input_size: tuple[int, int],
) -> torch.Tensor:
    """The kept objects' masks in their windows, bit-packed, on the device.

    ``protos`` ``[B, nm, mh, mw]`` is the model's output, ``coefficients``
    ``[K, nm]`` the kept rows', ``frame`` (host, sorted) each object's
    position in the batch, ``windows`` (host) :func:`box_windows`, and
    ``geometry`` the per-frame ``(pad_x, pad_y, gain_x, gain_y, width,
    height)`` rows of the postprocess. Returns ``uint8`` of
    ``packed_offsets(windows)[-1]`` bytes; sizes come from the host, so
    nothing here waits for the device.
    """
    device = protos.device
    _, nm, mh, mw = protos.shape
    count = len(windows)
    offsets = packed_offsets(windows)
    total = int(offsets[-1]) * 8
    if total == 0:
        return torch.zeros(0, dtype=torch.uint8, device=device)
    # Logits at prototype resolution, one map per object: each frame's objects at once.
    maps = torch.empty((count, mh * mw), dtype=torch.float32, device=device)
    bounds = np.searchsorted(frame, np.arange(int(frame[-1]) + 2), side="left")
    for position, (start, end) in enumerate(itertools.pairwise(bounds)):
        if end > start:
            maps[start:end] = coefficients[start:end].float() @ protos[position].reshape(nm, -1)
    bits_per_object = (offsets[1:] - offsets[:-1]) * 8
    owner, _, row, col, inside = _window_slots(windows, bits_per_object, device)
    placed = np.concatenate([windows[:, :2], frame[:, None]], 1)
    x0, y0, frame_of = upload(torch.from_numpy(placed), device)[owner].unbind(1)
    rows = geometry[frame_of]
    # Frame pixel centres -> input pixels (through the letterbox) -> prototype pixels.
    input_x = (x0 + col).float().add_(0.5).mul_(rows[:, 2]).add_(rows[:, 0])
    input_y = (y0 + row).float().add_(0.5).mul_(rows[:, 3]).add_(rows[:, 1])
    logits = _bilinear(
        maps,
        owner,
        input_x * (mw / input_size[1]) - 0.5,
        input_y * (mh / input_size[0]) - 0.5,
        mh,
        mw,
    )
    bits = (logits > 0) & inside
    weights = upload(torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8), device)
    return (bits.view(-1, 8).to(torch.uint8) * weights).sum(1, dtype=torch.uint8)


def _window_slots(
    windows: np.ndarray, slots: np.ndarray, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For ``slots[k]`` slots of each object ``k`` in turn (sizes from the host: no wait),
    on the device: the object, the slot's place in the object's slots, the row and column
    of its window, and whether the slot is
    one of the window's ``w * h`` pixels (slots past them pad to whole bytes)."""
    total = int(slots.sum())
    table = upload(torch.from_numpy(np.stack([windows[:, 2], windows[:, 3]], 1)), device)
    starts = upload(torch.from_numpy(np.concatenate([[0], np.cumsum(slots)[:-1]])), device)
    owner = torch.repeat_interleave(
        torch.arange(len(windows), device=device),
        upload(torch.from_numpy(slots.astype(np.int64)), device),
        output_size=total,
    )
    width, height = table[owner].unbind(1)
    local = torch.arange(total, device=device) - starts[owner]
    row = torch.div(local, width.clamp(min=1), rounding_mode="floor")
    return owner, local, row, local - row * width, local < width * height


def mask_pixels(
    masks: Sequence[Mask], width: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every window pixel of ``masks`` (which :meth:`Mask.fits` a picture ``width`` wide), on
    ``device``: its flat index in the picture (``y * width + x``), whether it is set, and its
    object. The windows' bits go up as they are (packed), not one value per pixel."""
    windows = np.array([(m.x, m.y, m.width, m.height) for m in masks], np.int64).reshape(-1, 4)
    offsets = packed_offsets(windows)
    packed = np.concatenate([m.bits for m in masks]) if masks else np.zeros(0, np.uint8)
    owner, local, row, col, _ = _window_slots(windows, windows[:, 2] * windows[:, 3], device)
    origin = np.concatenate([windows[:, :2], offsets[:-1, None]], 1)
    x0, y0, start = upload(torch.from_numpy(origin), device)[owner].unbind(1)
    byte = upload(torch.from_numpy(packed), device)[
        start + torch.div(local, 8, rounding_mode="floor")
    ]
    on = ((byte.to(torch.int32) >> (7 - local % 8)) & 1).bool()
    return (y0 + row) * width + x0 + col, on, owner


def _bilinear(
    maps: torch.Tensor, owner: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mh: int, mw: int
) -> torch.Tensor:
    """``maps[owner]`` sampled at ``(x, y)`` (pixel centres at integers), edges replicated, as
    ``F.interpolate(mode="bilinear", align_corners=False)`` samples."""
    x = x.clamp(0, mw - 1)
    y = y.clamp(0, mh - 1)
    left, top = x.floor(), y.floor()
    fx, fy = x - left, y - top
    left, top = left.long(), top.long()
    right, bottom = (left + 1).clamp(max=mw - 1), (top + 1).clamp(max=mh - 1)
    base = owner * (mh * mw)
    flat = maps.view(-1)

    def at(r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return flat[base + r * mw + c]

    upper = at(top, left) * (1 - fx) + at(top, right) * fx
    lower = at(bottom, left) * (1 - fx) + at(bottom, right) * fx
    return upper * (1 - fy) + lower * fy
