"""A cheap "did the picture change?" test, on a small grey copy, on the frame's own device.

The motion gate (:class:`~vstream.config.cadence.MotionGateConfig`) keeps
the detector off a still scene. Measuring that must cost far less than the
detection it saves, and must not move the frame off its device, so it works
on a copy of the luma about :data:`SIZE` pixels wide: NV12 and I420 frames
already hold the luma as their first ``height`` rows, and a picture the CPU
decoder has not converted yet lends its luma plane as it is (no colour
conversion at all); an RGB frame's samples are taken on a sparse grid first
and only those are weighted into grey. Only a grid a few times denser than
the copy is read, then averaged down to it, which also tames sensor noise.
Everything stays a torch tensor on the frame's device; the only value that
reaches the host is one number per frame, the fraction of changed pixels.
The luma of a video stream is usually limited range (16..235), grey made
from RGB full range, so the same ``threshold`` is a little stricter on the
former; a stream's frames all take the same way, so its gate is consistent.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from vstream.config.cadence import MotionGateConfig
from vstream.frame import Frame, PixelFormat

if TYPE_CHECKING:
    import torch

SIZE = 64
"""Width of the grey copy, in pixels (its height keeps the frame's aspect ratio)."""


MASK_SIZES = 4
"""Frame sizes a gate keeps the masks' cells for (a camera may switch between a few)."""


def copy_shape(frame_width: int, frame_height: int, width: int = SIZE) -> tuple[int, int]:
    """``(rows, width)`` of the grey copy of a frame: its height keeps the aspect ratio."""
    return max(1, round(width * frame_height / frame_width)), width


def small_luma(frame: Frame, width: int = SIZE) -> torch.Tensor:
    """``frame``'s brightness, ``(h, width)`` float32 on its device, ``h`` by its aspect ratio."""
    import torch.nn.functional as F

    height, _ = copy_shape(frame.width, frame.height, width)
    step_y = max(1, frame.height // (height * 4))
    step_x = max(1, frame.width // (width * 4))
    plane = getattr(frame.picture, "luma", lambda: None)()
    if plane is not None:
        luma = plane[::step_y, ::step_x].float()
    elif frame.pixel_format is PixelFormat.RGB24:
        rgb = frame.data[::step_y, ::step_x].float()
        luma = rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114
    else:
        luma = frame.data[: frame.height : step_y, ::step_x].float()
    return F.adaptive_avg_pool2d(luma[None, None], (height, width))[0, 0]


def mask_grid(
    polygons: list[list[tuple[float, float]]], frame_size: tuple[int, int], shape: tuple[int, int]
) -> np.ndarray:
    """Which cells of a ``shape`` (rows, columns) grid over the frame lie outside every polygon.

    A cell is masked when its centre is inside a polygon (even-odd rule),
    with polygon corners in frame pixels. Each polygon's edges are tested
    against every cell at once: (edges, rows, columns) booleans, bounded by
    :data:`~vstream.config.cadence.MAX_MASK_CORNERS`.
    """
    rows, cols = shape
    width, height = frame_size
    ys = (np.arange(rows) + 0.5) * height / rows
    xs = (np.arange(cols) + 0.5) * width / cols
    masked = np.zeros(shape, dtype=bool)
    for polygon in polygons:
        x1, y1 = np.asarray(polygon, dtype=np.float64).T[:, :, None]  # (edges, 1) each
        x2, y2 = np.roll(x1, -1, axis=0), np.roll(y1, -1, axis=0)
        spans = (y1 > ys) != (y2 > ys)  # (edges, rows): the edge crosses the row's centre line
        with np.errstate(divide="ignore", invalid="ignore"):  # level edges span no row
            meets = x1 + (ys - y1) * (x2 - x1) / (y2 - y1)  # where it crosses it
        crossings = spans[:, :, None] & (xs < meets[:, :, None])  # (edges, rows, cols)
        masked |= np.logical_xor.reduce(crossings, axis=0)
    return ~masked


class MotionGate:
    """Compares each frame with the grey copy kept at the stream's last detection."""

    def __init__(self, config: MotionGateConfig) -> None:
        self.config = config
        self._reference: torch.Tensor | None = None
        self._pending: torch.Tensor | None = None
        """The copy of the frame last measured: the reference once it is detected."""
        self._keep: torch.Tensor | None = None
        """Cells outside the masks (bool, the copy's shape); None without masks."""
        self._size: tuple[int, int, int] | None = None
        """``(width, height, pixel format)`` the reference and mask were made for."""
        self._grids: dict[tuple[int, int], np.ndarray] = {}
        """:func:`mask_grid` by frame size, made by :meth:`prepare` (the newest few)."""
        self._lock = threading.Lock()
        """Guards :attr:`_grids`: the reader's thread fills it, the preprocessing thread reads."""

    def prepare(self, width: int, height: int) -> np.ndarray | None:
        """The masks' :func:`mask_grid` for frames of this size (None without masks).

        The stream's reader calls this before it queues a frame of a new size,
        so the rasterising is done on the stream's own thread, not on the
        preprocessing thread every stream of the pipeline shares.
        """
        if not self.config.masks:
            return None
        with self._lock:
            grid = self._grids.get((width, height))
        if grid is None:
            polygons = [list(p) for p in self.config.masks]
            grid = mask_grid(polygons, (width, height), copy_shape(width, height))
            with self._lock:
                if len(self._grids) >= MASK_SIZES:
                    del self._grids[next(iter(self._grids))]
                self._grids[(width, height)] = grid
        return grid

    def changed_fraction(self, frame: Frame) -> float:
        """The fraction of the (unmasked) picture that changed since :meth:`remember` last ran.

        1.0 when there is nothing to compare with: the first frame, or one of
        another size (a reconnected camera) or on another device.
        """
        import torch

        luma = small_luma(frame)
        size = (frame.width, frame.height, frame.pixel_format.value)
        if self._reference is None or self._size != size or luma.device != self._reference.device:
            self._size = size
            self._reference = None
            self._keep = None
            grid = self.prepare(frame.width, frame.height)  # made already for a reader's frames
            if grid is not None:
                self._keep = torch.from_numpy(grid).to(luma.device)
            self._pending = luma
            return 1.0
        self._pending = luma
        moved = (luma - self._reference).abs_() > self.config.threshold
        if self._keep is not None:
            total = int(self._keep.sum())
            return float((moved & self._keep).sum()) / total if total else 0.0
        return float(moved.float().mean())

    def still(self, frame: Frame) -> bool:
        """Whether ``frame`` changed less than ``min_area_fraction`` since the last detection."""
        return self.changed_fraction(frame) < self.config.min_area_fraction

    def remember(self) -> None:
        """The frame last measured is detected: later frames are compared with it."""
        self._reference = self._pending
