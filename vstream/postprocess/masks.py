"""Instance masks on the device, and the compact form in which they leave it.

A segmentation model gives every box row ``nm`` mask coefficients and the
frame ``nm`` prototypes at a quarter of the input size
(:mod:`vstream.postprocess.tasks`). A mask is only made for the boxes kept
after NMS: its logits are the coefficients times the prototypes. Ultralytics
makes frame-sized masks (``retina_masks``) by upsampling those logits
bilinearly by 1, 2 or 4 (whatever makes the letterbox's bars whole pixels),
cutting the bars off, resizing the rest bilinearly to the frame, keeping the
pixels above 0 and cropping them to the box (a pixel column ``c`` is kept
where ``x1 <= c < x2``). vstream follows the same rule but resizes only the
pixels inside each box: every frame pixel centre of the box's window is
sampled where that resize would sample it, so nothing frame-sized is ever
made.

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
import torch.nn.functional as F

from vstream.masks import Mask, packed_offsets
from vstream.transfer import upload

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)
"""Bit values of a byte, most significant first (numpy's ``packbits`` order)."""


def mask_bits(
    protos: torch.Tensor,
    coefficients: torch.Tensor,
    frame: np.ndarray,
    windows: np.ndarray,
    frame_sizes: Sequence[tuple[int, int]],
    letterbox: bool = True,
) -> torch.Tensor:
    """The kept objects' masks in their windows, bit-packed, on the device.

    ``protos`` ``[B, nm, mh, mw]`` is the model's output, ``coefficients``
    ``[K, nm]`` the kept rows', ``frame`` (host, sorted) each object's
    position in the batch, ``windows`` (host) :func:`~vstream.masks.box_windows`,
    ``frame_sizes`` each batch position's ``(width, height)``, ``letterbox``
    whether the input was letterboxed (else stretched). Returns ``uint8`` of
    ``packed_offsets(windows)[-1]`` bytes; sizes come from the host, so
    nothing here waits for the device.
    """
    device = protos.device
    _, nm, mh, mw = protos.shape
    offsets = packed_offsets(windows)
    total = int(offsets[-1]) * 8
    if total == 0:
        return torch.zeros(0, dtype=torch.uint8, device=device)
    # Per object (host): its frame's rule, and where its upsampled logits start in `grids`.
    rules = [_frame_rule(width, height, mh, mw, letterbox) for width, height in frame_sizes]
    factor = np.array([rules[f][0] for f in frame.tolist()], np.int64)
    starts = np.concatenate([[0], np.cumsum(factor * factor * mh * mw)])
    grids = torch.empty(int(starts[-1]), dtype=torch.float32, device=device)
    bounds = np.searchsorted(frame, np.arange(int(frame[-1]) + 2), side="left")
    for position, (first, last) in enumerate(itertools.pairwise(bounds)):
        if last > first:
            logits = coefficients[first:last].float() @ protos[position].reshape(nm, -1)
            up = rules[position][0]
            logits = logits.view(-1, 1, mh, mw)
            if up > 1:
                logits = F.interpolate(logits, scale_factor=up, mode="bilinear")
            grids[starts[first] : starts[last]] = logits.reshape(-1)
    # Per object: grid width, crop top and left, content height and width, frame height and
    # width, grid start.
    table = np.array(
        [
            (rules[f][0] * mw, *rules[f][1:], frame_sizes[f][1], frame_sizes[f][0])
            for f in frame.tolist()
        ],
        np.int64,
    ).reshape(-1, 7)
    table = np.concatenate([table, starts[:-1, None], windows[:, :2]], 1)
    owner, _, row, col, inside = _window_slots(windows, (offsets[1:] - offsets[:-1]) * 8, device)
    stride, top, left, content_h, content_w, height, width, start, x0, y0 = upload(
        torch.from_numpy(table), device
    )[owner].unbind(1)
    # Each frame pixel centre in the crop of the upsampled logits, as a bilinear resize of
    # the crop to the frame samples it (align_corners=False, edges replicated).
    y = ((y0 + row).float() + 0.5) * (content_h / height) - 0.5
    x = ((x0 + col).float() + 0.5) * (content_w / width) - 0.5
    logits = _bilinear(
        grids, start, stride, y.clamp_(min=0), x.clamp_(min=0), top, left, content_h, content_w
    )
    bits = (logits > 0) & inside
    weights = upload(torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8), device)
    return (bits.view(-1, 8).to(torch.uint8) * weights).sum(1, dtype=torch.uint8)


def _frame_rule(
    width: int, height: int, mh: int, mw: int, letterbox: bool
) -> tuple[int, int, int, int, int]:
    """How Ultralytics brings prototype-resolution logits to a ``width x height`` frame:
    ``(factor, top, left, content_h, content_w)``.

    The logits are upsampled bilinearly by ``factor``, the smallest of 1, 2 and 4 at which
    the letterbox's bars are whole pixels on each side (the prototypes are a quarter of
    the input); the picture's part (``content_h x content_w`` from ``top, left``) is then
    resized bilinearly to the frame. A stretched input has no bars: the whole grid is the
    picture.
    """
    if not letterbox:
        return 1, 0, 0, mh, mw

    def content(factor: int) -> tuple[int, int]:
        gain = min(factor * mh / height, factor * mw / width)
        return max(round(height * gain), 1), max(round(width * gain), 1)

    bars_h, bars_w = 4 * mh - content(4)[0], 4 * mw - content(4)[1]
    factor = next((f for f in (1, 2) if (bars_h * f) % 8 == 0 and (bars_w * f) % 8 == 0), 4)
    content_h, content_w = content(factor)
    top = round((factor * mh - content_h) / 2 - 0.1)
    left = round((factor * mw - content_w) / 2 - 0.1)
    return factor, top, left, content_h, content_w


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
    grids: torch.Tensor,
    start: torch.Tensor,
    stride: torch.Tensor,
    y: torch.Tensor,
    x: torch.Tensor,
    top: torch.Tensor,
    left: torch.Tensor,
    height: torch.Tensor,
    width: torch.Tensor,
) -> torch.Tensor:
    """Bilinear samples at ``(y, x)`` (pixel centres at integers, >= 0) of crops
    ``height x width`` at ``(top, left)`` of row-major grids ``stride`` wide starting at
    ``start`` in ``grids``, the crop's last row and column replicated beyond it."""
    y = torch.minimum(y, (height - 1).float())
    x = torch.minimum(x, (width - 1).float())
    row, col = y.floor(), x.floor()
    fy, fx = y - row, x - col
    row, col = row.long(), col.long()
    below = torch.minimum(row + 1, height - 1) + top
    right = torch.minimum(col + 1, width - 1) + left
    row, col = row + top, col + left

    def at(r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return grids[start + r * stride + c]

    upper = at(row, col) * (1 - fx) + at(row, right) * fx
    lower = at(below, col) * (1 - fx) + at(below, right) * fx
    return upper * (1 - fy) + lower * fy
