"""Instance masks on the device, and the compact form in which they reach the host.

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
reads each object's bits as a :class:`Mask`, which writes itself as COCO RLE
or polygons for the records (``postprocess.mask_format``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from vstream.transfer import upload

MaskFormat = Literal["rle", "polygon"]

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)
"""Bit values of a byte, most significant first (numpy's ``packbits`` order)."""


def box_windows(xyxy: np.ndarray) -> np.ndarray:
    """``(K, 4)`` int64 ``x0, y0, width, height`` of the frame pixels each box's mask covers:
    the columns ``c`` with ``x1 <= c < x2`` and the rows alike (boxes are clipped to the frame)."""
    start = np.ceil(xyxy[:, :2]).astype(np.int64)
    end = np.ceil(xyxy[:, 2:4]).astype(np.int64)
    return np.concatenate([start, np.maximum(end - start, 0)], axis=1).reshape(-1, 4)


def packed_offsets(windows: np.ndarray) -> np.ndarray:
    """``(K + 1,)`` byte offsets of each object's bits in the packed tensor (whole bytes each)."""
    nbytes = (windows[:, 2] * windows[:, 3] + 7) // 8
    return np.concatenate([[0], np.cumsum(nbytes)]).astype(np.int64)


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
    for position, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        if end > start:
            maps[start:end] = coefficients[start:end].float() @ protos[position].reshape(nm, -1)
    table = upload(
        torch.from_numpy(np.concatenate([windows, offsets[:-1, None] * 8, frame[:, None]], 1)),
        device,
    )
    bits_per_object = torch.from_numpy((offsets[1:] - offsets[:-1]) * 8)
    owner = torch.repeat_interleave(
        torch.arange(count, device=device), upload(bits_per_object, device), output_size=total
    )
    x0, y0, width, height, start, frame_of = table[owner].unbind(1)
    local = torch.arange(total, device=device) - start
    inside = local < width * height
    row = torch.div(local, width.clamp(min=1), rounding_mode="floor")
    col = local - row * width
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
    weights = torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=device)
    return (bits.view(-1, 8).to(torch.uint8) * weights).sum(1, dtype=torch.uint8)


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


@dataclass(frozen=True, eq=False)
class Mask:
    """One object's mask: its window in the frame, the window's bits, and how records write it.

    ``bits`` holds ``height * width`` bits row-major, packed most significant first
    (``np.packbits``), padded to a whole byte: the compact form that left the device.
    """

    x: int
    y: int
    width: int
    height: int
    bits: np.ndarray
    frame_width: int
    frame_height: int
    format: MaskFormat = "rle"

    @property
    def area(self) -> int:
        """Pixels of the object (set bits)."""
        return int(np.unpackbits(self.bits).sum())  # the padding bits are 0

    def window(self) -> np.ndarray:
        """``(height, width)`` bool: the mask inside its window."""
        flat = np.unpackbits(self.bits, count=self.width * self.height)
        return flat.reshape(self.height, self.width).astype(bool)

    def moved(self, dx: int, dy: int) -> Mask:
        """The same mask with its window moved by ``(dx, dy)`` pixels (a predicted box's)."""
        return Mask(
            self.x + dx,
            self.y + dy,
            self.width,
            self.height,
            self.bits,
            self.frame_width,
            self.frame_height,
            self.format,
        )

    def record(self) -> dict[str, Any]:
        """The record's keys: ``area`` and ``mask`` (COCO RLE) or ``polygon`` (rings of
        ``[x, y, x, y, ...]`` frame pixels, COCO's polygon form)."""
        if self.format == "polygon":
            return {"area": self.area, "polygon": polygons(self)}
        return {"area": self.area, "mask": coco_rle(self)}


def unpack_masks(
    packed: np.ndarray,
    windows: np.ndarray,
    frame_sizes: Sequence[tuple[int, int]],
    mask_format: MaskFormat,
) -> list[Mask]:
    """Each object's :class:`Mask` from the batch's packed bits (copied out of ``packed``);
    ``frame_sizes`` are each object's frame ``(width, height)``."""
    offsets = packed_offsets(windows)
    owned = np.array(packed, dtype=np.uint8, copy=True)
    return [
        Mask(int(x), int(y), int(w), int(h), owned[start:end], fw, fh, mask_format)
        for (x, y, w, h), start, end, (fw, fh) in zip(
            windows.tolist(), offsets[:-1], offsets[1:], frame_sizes, strict=True
        )
    ]


def coco_rle(mask: Mask) -> dict[str, Any]:
    """COCO's compressed RLE of the mask in its whole frame: ``{"size": [h, w], "counts"}``.

    Runs alternate 0s and 1s in column-major order over the frame, starting with 0s;
    the string is COCO's (``pycocotools``' ``rleToString``): each run, less the run two
    before it from the third on, in 5-bit groups, low first, each group a character
    ``48 + group``, ``0x20`` set while more groups follow.
    """
    height, width = mask.frame_height, mask.frame_width
    column, row = np.nonzero(mask.window().T)  # column-major order: by column, then row
    index = (mask.x + column) * height + mask.y + row
    breaks = np.flatnonzero(np.diff(index) != 1) + 1
    starts = index[np.concatenate([[0], breaks])] if len(index) else index
    ends = index[np.concatenate([breaks - 1, [len(index) - 1]])] + 1 if len(index) else index
    edges = np.stack([starts, ends], 1).reshape(-1)
    counts = np.diff(np.concatenate([[0], edges, [height * width]])).tolist()
    if len(counts) > 1 and counts[-1] == 0:
        counts.pop()  # a mask ending on the frame's last pixel ends with its run of 1s
    return {"size": [height, width], "counts": _rle_string(counts)}


def _rle_string(counts: list[int]) -> str:
    characters = []
    for i, count in enumerate(counts):
        value = count - counts[i - 2] if i > 2 else count
        more = True
        while more:
            group = value & 0x1F
            value >>= 5
            more = value != -1 if group & 0x10 else value != 0
            characters.append(chr(48 + (group | 0x20 if more else group)))
    return "".join(characters)


def polygons(mask: Mask) -> list[list[float]]:
    """The mask's outer contours in frame pixels, each ``[x, y, x, y, ...]`` (OpenCV's
    ``findContours``, external contours, simple chain: pixel centres on the boundary)."""
    import cv2

    window = np.ascontiguousarray(mask.window().astype(np.uint8))
    contours, _ = cv2.findContours(window, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    offset = np.array([mask.x, mask.y])
    return [(c.reshape(-1, 2) + offset).reshape(-1).astype(float).tolist() for c in contours]
