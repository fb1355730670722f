"""Instance masks on the host: the compact form that left the device, and what records say of it.

A segmentation model's masks are made on the device
(:mod:`vstream.postprocess.masks`) and cross to the host as the bits of each
object's window: the frame pixels its box crops, ``ceil(x1)..ceil(x2)-1`` by
``ceil(y1)..ceil(y2)-1``, row-major, one bit per pixel, padded to a whole byte.
A :class:`Mask` holds those bits; records write it as COCO RLE or polygons
(``postprocess.mask_format``) with its area in pixels; zones can count by it
(:func:`mask_overlap`), and predicted frames carry it (:class:`TrackMasks`).
No torch here: what reads records needs none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from vstream.results import MASKS, NO_TRACK, PREDICTED, Detections

MaskFormat = Literal["rle", "polygon"]


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

    def fits(self, width: int, height: int) -> bool:
        """Whether the window lies inside a ``width x height`` picture."""
        return (
            self.x >= 0
            and self.y >= 0
            and self.x + self.width <= width
            and (self.y + self.height <= height)
        )

    def moved(self, dx: int, dy: int) -> Mask:
        """The same mask with its window moved by ``(dx, dy)`` pixels (a predicted box's), the
        part outside the frame cut off."""
        x, y = self.x + dx, self.y + dy
        left, top = max(0, -x), max(0, -y)
        right = max(left, min(self.width, self.frame_width - x))
        bottom = max(top, min(self.height, self.frame_height - y))
        bits = self.bits
        if (left, top, right, bottom) != (0, 0, self.width, self.height):
            bits = np.packbits(self.window()[top:bottom, left:right].reshape(-1))
        return Mask(
            x + left,
            y + top,
            right - left,
            bottom - top,
            bits,
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


class TrackMasks:
    """The last detected mask of each confirmed track, carried onto the boxes the tracker
    predicts on frames the detector does not see (cadence).

    A predicted box gets its track's last mask moved by how far the box's centre moved
    (whole pixels; the mask keeps its shape and size), cut to the frame; the box is marked
    ``predicted`` already. A detected frame replaces what is remembered with its own
    tracks' masks, so a track the detector missed carries none until it is found again.
    """

    def __init__(self) -> None:
        self._last: dict[int, tuple[Mask, float, float]] = {}

    def carry(self, detections: Detections) -> Detections:
        """``detections`` with masks: a detected frame's are remembered, a predicted frame's
        (all rows :data:`~vstream.results.PREDICTED`) get the remembered ones, moved."""
        if PREDICTED not in detections.data:
            masks = detections.data.get(MASKS)
            if masks is None:  # a model without masks: nothing to remember
                self._last = {}
                return detections
            self._last = {
                t: (mask, cx, cy)
                for t, mask, (cx, cy) in zip(
                    detections.tracker_id.tolist(),
                    masks.tolist(),
                    _centres(detections),
                    strict=True,
                )
                if t != NO_TRACK and mask is not None
            }
            return detections
        if not self._last:
            return detections
        column = np.empty(len(detections), dtype=object)
        tracks = detections.tracker_id.tolist()
        for row, (t, (cx, cy)) in enumerate(zip(tracks, _centres(detections), strict=True)):
            if t in self._last:
                mask, last_x, last_y = self._last[t]
                column[row] = mask.moved(round(cx - last_x), round(cy - last_y))
        return detections.with_columns(data={MASKS: column})


def _centres(detections: Detections) -> list[list[float]]:
    """Each box's centre, ``[cx, cy]`` in pixels."""
    return ((detections.xyxy[:, :2] + detections.xyxy[:, 2:4]) / 2).tolist()


def mask_overlap(mask: Mask, polygon: Any) -> float:
    """Share of ``mask``'s pixels whose centres lie inside ``polygon`` (a
    :class:`~vstream.analytics.geometry.Polygon`); 0 for an empty mask."""
    rows, cols = np.nonzero(mask.window())
    if len(rows) == 0:
        return 0.0
    centres = np.stack([mask.x + cols + 0.5, mask.y + rows + 0.5], 1)
    return float(np.count_nonzero(polygon.contains(centres))) / len(rows)
