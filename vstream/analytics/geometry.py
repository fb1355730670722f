"""Plane geometry for lines and zones, vectorised over points.

Image coordinates: ``x`` to the right, ``y`` down. With ``y`` down, the 2-D
cross product ``(end - start) x (p - start)`` is positive for points on the
right of the line as seen on the screen when looking from ``start`` to
``end``: the side an ``in`` crossing ends on (:class:`~vstream.config.analytics.LineConfig`).
"""

from __future__ import annotations

import numpy as np

from vstream.config.analytics import Anchor, polygon_area
from vstream.results import rotated_corners

ANCHOR_FRACTIONS: dict[Anchor, tuple[float, float]] = {
    Anchor.CENTER: (0.5, 0.5),
    Anchor.BOTTOM_CENTER: (0.5, 1.0),
    Anchor.TOP_CENTER: (0.5, 0.0),
    Anchor.CENTER_LEFT: (0.0, 0.5),
    Anchor.CENTER_RIGHT: (1.0, 0.5),
    Anchor.TOP_LEFT: (0.0, 0.0),
    Anchor.TOP_RIGHT: (1.0, 0.0),
    Anchor.BOTTOM_LEFT: (0.0, 1.0),
    Anchor.BOTTOM_RIGHT: (1.0, 1.0),
}
"""Where each anchor sits in its box, as fractions of the width and the height."""


def anchor_points(boxes: np.ndarray, anchor: Anchor) -> np.ndarray:
    """``(N, 2)`` anchor points of ``(N, 4)`` ``x1, y1, x2, y2`` boxes."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    corner = boxes[:, :2]
    return corner + ANCHOR_FRACTIONS[anchor] * (boxes[:, 2:] - corner)


class Segment:
    """A line segment with signed distances (positive on the ``in`` side) and positions along it."""

    def __init__(self, start: tuple[float, float], end: tuple[float, float]) -> None:
        self.start = np.asarray(start, dtype=np.float64)
        self.end = np.asarray(end, dtype=np.float64)
        self.direction = self.end - self.start
        self.length = float(np.hypot(*self.direction))

    def signed_distance(self, points: np.ndarray) -> np.ndarray:
        """Distance in pixels from the infinite line, positive on the ``in`` side."""
        rel = np.asarray(points, dtype=np.float64).reshape(-1, 2) - self.start
        return (self.direction[0] * rel[:, 1] - self.direction[1] * rel[:, 0]) / self.length

    def position(self, points: np.ndarray) -> np.ndarray:
        """Where each point projects along the segment: 0 at ``start``, 1 at ``end``."""
        rel = np.asarray(points, dtype=np.float64).reshape(-1, 2) - self.start
        return rel @ self.direction / (self.length * self.length)

    def reach_in_frame(self, width: float, height: float) -> tuple[float, float]:
        """How far the frame extends on the ``out`` and the ``in`` side, beside the segment.

        Only the part of the frame beside the segment (between the
        perpendiculars through its end points) is considered, since no crossing
        can count elsewhere. A line along the frame edge has a reach near 0 on
        the outer side.
        """
        polygon = np.array([[0.0, 0.0], [width, 0.0], [width, height], [0.0, height]])
        along = self.direction / self.length
        polygon = _clip(polygon, -along, -float(self.start @ along))
        polygon = _clip(polygon, along, float(self.end @ along))
        if len(polygon) == 0:
            return 0.0, 0.0
        distance = self.signed_distance(polygon)
        return max(0.0, -float(distance.min())), max(0.0, float(distance.max()))

    def share_in_frame(self, width: float, height: float) -> float:
        """The share of the segment's length inside the frame ``[0, width] x [0, height]``
        (Liang-Barsky clipping): 0 for a line drawn for another picture size."""
        low, high = 0.0, 1.0
        dx, dy = self.direction
        x, y = self.start
        for p, q in ((-dx, x), (dx, width - x), (-dy, y), (dy, height - y)):
            if p == 0:
                if q < 0:
                    return 0.0
            elif p < 0:
                low = max(low, q / p)
            else:
                high = min(high, q / p)
        return max(0.0, high - low)


def _clip(polygon: np.ndarray, normal: np.ndarray, offset: float) -> np.ndarray:
    """The part of a convex polygon where ``p . normal <= offset`` (Sutherland-Hodgman)."""
    out: list[np.ndarray] = []
    values = polygon @ normal - offset
    for i in range(len(polygon)):
        a, b = polygon[i], polygon[(i + 1) % len(polygon)]
        va, vb = values[i], values[(i + 1) % len(polygon)]
        if va <= 0:
            out.append(a)
        if (va < 0 < vb) or (vb < 0 < va):
            out.append(a + (b - a) * (va / (va - vb)))
    return np.array(out).reshape(-1, 2)


class Polygon:
    """A closed polygon: inside test (even-odd rule) and distance to the border."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        self.points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        # What every test below reuses, computed once, each edge's x and y apart as (1, E)
        # rows: a zone is tested every frame of every stream with a handful of points, where
        # numpy's cost is its calls (and a sum over a trailing axis of two costs more than
        # the one addition it makes).
        start, end = self.points.T[:, None, :], np.roll(self.points, -1, axis=0).T[:, None, :]
        self._ax, self._ay = start
        self._by = end[1]
        self._ex, self._ey = end - start
        self._length2 = np.maximum(self._ex * self._ex + self._ey * self._ey, 1e-12)
        # A horizontal edge (ey 0) never straddles a ray, so its ey is taken as 1 where the
        # inside test divides by it: no division by zero, and no edge that counts changed.
        self._ey_divisor = np.where(self._ey == 0.0, 1.0, self._ey)

    def contains(self, points: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: whether each point is inside (a ray to the right crosses an odd count)."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        x, y = p[:, 0:1], p[:, 1:2]
        straddles = (self._ay > y) != (self._by > y)
        crossing_x = self._ax + (y - self._ay) * self._ex / self._ey_divisor
        return np.logical_xor.reduce(straddles & (x < crossing_x), axis=1)

    def share_in_frame(self, width: float, height: float) -> float:
        """The share of the polygon's area inside the frame ``[0, width] x [0, height]``.

        Clipped edge by edge (Sutherland-Hodgman): against a convex window that
        gives the right area for any simple polygon, concave ones included.
        """
        clipped = self.points
        for normal, offset in (((-1.0, 0.0), 0.0), ((1.0, 0.0), width), ((0.0, -1.0), 0.0),
                               ((0.0, 1.0), height)):  # fmt: skip
            if len(clipped):
                clipped = _clip(clipped, np.asarray(normal), offset)
        whole = polygon_area([tuple(p) for p in self.points])
        inside = polygon_area([tuple(p) for p in clipped]) if len(clipped) > 2 else 0.0
        return min(1.0, inside / whole) if whole > 0 else 0.0

    def border_distance(self, points: np.ndarray, edges: np.ndarray | None = None) -> np.ndarray:
        """``(N,)`` distance in pixels from each point to the nearest edge; of ``edges`` only
        (``(E,)`` bool, edge ``i`` from corner ``i`` to the next) where given, infinite
        where that is none."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        x, y = p[:, 0:1], p[:, 1:2]
        ax, ay, ex, ey = self._ax, self._ay, self._ex, self._ey
        t = ((x - ax) * ex + (y - ay) * ey) / self._length2
        t = np.minimum(np.maximum(t, 0.0), 1.0)  # np.clip's own overhead is most of its cost
        dx, dy = x - (ax + t * ex), y - (ay + t * ey)
        squared = dx * dx + dy * dy
        if edges is not None:
            squared = np.where(edges, squared, np.inf)
        return np.sqrt(squared.min(axis=1))

    def edges_off_frame(self, width: float, height: float) -> np.ndarray:
        """``(E,)`` bool: the edges (edge ``i`` from corner ``i`` to the next) with no part
        strictly inside the frame ``[0, width] x [0, height]``: along its edge, beyond it,
        or cutting past one of its corners outside it."""
        a, b = self.points, np.roll(self.points, -1, axis=0)
        off = (
            ((a[:, 0] >= width) & (b[:, 0] >= width))
            | ((a[:, 0] <= 0) & (b[:, 0] <= 0))
            | ((a[:, 1] >= height) & (b[:, 1] >= height))
            | ((a[:, 1] <= 0) & (b[:, 1] <= 0))
        )
        outside = [
            Segment((x1, y1), (x2, y2)).share_in_frame(width, height) == 0.0
            for (x1, y1), (x2, y2) in zip(a.tolist(), b.tolist(), strict=True)
        ]
        return off | np.array(outside, dtype=bool)


def rotated_iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(N, M)`` IoU of the areas of ``(N, 5)`` and ``(M, 5)`` ``cx, cy, w, h, angle`` boxes.

    The exact overlap of the two rectangles (one clipped by the other's four edges), not
    the probabilistic IoU NMS uses: how far apart two oriented boxes really are.
    """
    first, second = rotated_corners(a), rotated_corners(b)
    area_a = np.abs(np.asarray(a, dtype=np.float64).reshape(-1, 5)[:, 2:4].prod(axis=1))
    area_b = np.abs(np.asarray(b, dtype=np.float64).reshape(-1, 5)[:, 2:4].prod(axis=1))
    result = np.zeros((len(first), len(second)))
    for j, corners in enumerate(second):
        edges = np.roll(corners, -1, axis=0) - corners
        # Outward normals of the edges, whichever way round the corners go.
        turn = 1.0 if _signed_area(corners) > 0 else -1.0
        normals = turn * np.stack([edges[:, 1], -edges[:, 0]], axis=1)
        offsets = (normals * corners).sum(axis=1)
        for i, polygon in enumerate(first):
            for normal, offset in zip(normals, offsets, strict=True):
                polygon = _clip(polygon, normal, float(offset))
                if len(polygon) == 0:
                    break
            inter = abs(_signed_area(polygon)) if len(polygon) > 2 else 0.0
            union = area_a[i] + area_b[j] - inter
            result[i, j] = inter / union if union > 0 else 0.0
    return result


def _signed_area(polygon: np.ndarray) -> float:
    """Shoelace area, positive when the corners turn from x towards y."""
    x, y = polygon[:, 0], polygon[:, 1]
    return float((x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2)
