"""The annotator: boxes, labels, track ids, counting lines, zones and a status line.

Everything is drawn in place on an RGB ``uint8`` ``(H, W, 3)`` tensor on the
frame's device (CPU or CUDA, the same code and the same pixels on both). Per
frame the host sends the device only box metadata: corner coordinates become
slice bounds, and all of a frame's label text goes over as one small tensor of
glyph-column indices. Static geometry (lines, zones) is rasterised once per
picture size and device; per-frame shapes (an OBB model's rotated boxes, a
pose model's skeletons) are rasterised into pixel indices on the host and
painted with one indexed store.

Sizes follow the picture: outlines are ``max(2, min(H, W) / 270)`` pixels
thick and text is about ``H / 36`` pixels high (at least 12), times ``scale``.
"""

from __future__ import annotations

import colorsys
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from vstream import transfer
from vstream.annotate import draw
from vstream.annotate.convert import frame_to_rgb
from vstream.annotate.font import GlyphAtlas, glyph_atlas
from vstream.frame import Frame
from vstream.postprocess.masks import mask_pixels
from vstream.postprocess.tasks import COCO_KEYPOINTS, COCO_SKELETON, VISIBLE
from vstream.results import (
    ATTRIBUTES,
    KEYPOINTS,
    MASKS,
    NO_TRACK,
    OBB,
    Detections,
    label_for,
    rotated_corners,
)

if TYPE_CHECKING:
    from vstream.results import FrameResult

PALETTE_SIZE = 20


def _palette(size: int) -> list[tuple[int, int, int]]:
    """``size`` saturated colours, hues spread by the golden ratio so neighbours differ."""
    colours = []
    for i in range(size):
        hue = (0.05 + i * 0.618033988749895) % 1.0
        value = 0.95 if i % 2 == 0 else 0.8
        r, g, b = colorsys.hsv_to_rgb(hue, 0.8, value)
        colours.append((round(r * 255), round(g * 255), round(b * 255)))
    return colours


CLASS_COLOURS: tuple[tuple[int, int, int], ...] = tuple(_palette(PALETTE_SIZE))
"""Colour of class (or track) ``k``: ``CLASS_COLOURS[k % PALETTE_SIZE]``."""

STATUS_BACKGROUND = (24, 24, 24)
LINE_COLOUR = (255, 214, 0)
LINE_HIGHLIGHT = (255, 255, 255)
ZONE_COLOUR = (0, 200, 255)
ZONE_HIGHLIGHT = (255, 64, 160)

# Rows of the device colour table after the class palette.
_STATUS, _LINE, _LINE_HOT, _ZONE, _ZONE_HOT = range(PALETTE_SIZE, PALETTE_SIZE + 5)
_EXTRA_COLOURS = (STATUS_BACKGROUND, LINE_COLOUR, LINE_HIGHLIGHT, ZONE_COLOUR, ZONE_HIGHLIGHT)
MAX_SCENES = 16
"""Picture sizes (with devices) whose scenes an annotator keeps: more than its streams'."""


def class_colour(key: int) -> tuple[int, int, int]:
    """The stable colour of class or track ``key``."""
    return CLASS_COLOURS[key % PALETTE_SIZE]


def _text_colour(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black on light backgrounds, white on dark ones."""
    r, g, b = rgb
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


@dataclass(frozen=True)
class LineOverlay:
    """A counting line from ``start`` to ``end``, in pixels of the frame."""

    name: str
    start: tuple[float, float]
    end: tuple[float, float]


@dataclass(frozen=True)
class ZoneOverlay:
    """A zone polygon (at least three vertices), in pixels of the frame."""

    name: str
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if len(self.points) < 3:
            raise ValueError(f"zone {self.name!r} needs at least 3 points, got {len(self.points)}")


@dataclass
class _Label:
    x: int
    y: int
    text: str
    colour: int
    """Row of the colour table for the background."""


@dataclass(eq=False)
class _Scene:
    """What the annotator keeps per (device, width, height)."""

    thickness: int
    pad: int
    atlas: GlyphAtlas
    glyphs: torch.Tensor
    """Glyph columns padded to the label height: ``(columns + 1, label_height)`` ``uint8``."""
    colours: torch.Tensor
    """``(rows, 3)`` ``uint8``: the class palette, then the fixed colours."""
    blends: torch.Tensor
    """``(rows * 256, 3)`` ``uint8``: at ``r * 256 + a``, text of ink ``a`` on colour ``r``."""
    lines: list[torch.Tensor]
    zone_outlines: list[torch.Tensor]
    zone_fills: list[torch.Tensor]
    line_anchors: list[tuple[int, int]]
    zone_anchors: list[tuple[int, int]]

    @property
    def label_height(self) -> int:
        return self.glyphs.shape[1]


def _format_time(seconds: float) -> str:
    seconds = max(0.0, seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{int(hours):02d}:{int(minutes):02d}:{secs:05.2f}"


def _attribute_text(attribute: dict[str, Any] | None) -> str:
    """A detection's cascade labels after its class (`` blue``), as its record has them.

    Only the labels: scores and embeddings would crowd the box; a multi-label
    model shows each of its labels.
    """
    words: list[str] = []
    for value in (attribute or {}).values():
        words += [value["label"]] if "label" in value else value.get("labels", [])
    return "".join(f" {word}" for word in words)


def _counts_text(counts: Any) -> str:
    """``in 3 out 5`` from ``{"in": 3, "out": 5}`` or ``(3, 5)``; anything else as it is."""
    if isinstance(counts, Mapping):
        return " ".join(f"{key} {value}" for key, value in counts.items())
    if isinstance(counts, Sequence) and not isinstance(counts, str) and len(counts) == 2:
        return f"in {counts[0]} out {counts[1]}"
    return str(counts)


class _Strokes:
    """The rotated boxes and skeletons of one frame: rasterised on the host into flat pixel
    indices (as the lines and zones are), then painted with one indexed store."""

    def __init__(self, width: int, height: int, thickness: int) -> None:
        self.width, self.height, self.thickness = width, height, thickness
        self._pixels: list[np.ndarray] = []
        self._rows: list[int] = []

    def _add(self, pixels: np.ndarray, row: int) -> None:
        self._pixels.append(pixels)
        self._rows.append(row)

    def outline(self, corners: list[list[float]], row: int) -> None:
        """A rotated box's four sides."""
        points = [(x, y) for x, y in corners]
        pixels = draw.polyline_pixels(points, self.thickness, self.width, self.height, closed=True)
        self._add(pixels, row)

    def skeletons(
        self, keypoints: np.ndarray, rows: np.ndarray, limbs: Sequence[tuple[int, int]]
    ) -> None:
        """Each object's visible keypoints as dots, and its limbs whose two ends are visible."""
        points = np.asarray(keypoints, dtype=np.float64)
        if points.shape[-1] > 2:
            visible = points[..., 2] >= VISIBLE
        else:
            visible = np.ones(points.shape[:2], dtype=bool)
        dot = self.thickness * 2 + 1
        for kpts, seen, row in zip(points.tolist(), visible.tolist(), rows.tolist(), strict=True):
            for a, b in limbs:
                if seen[a] and seen[b]:
                    start, end = (kpts[a][0], kpts[a][1]), (kpts[b][0], kpts[b][1])
                    self._add(
                        draw.segment_pixels(start, end, self.thickness, self.width, self.height),
                        row,
                    )
            for (x, y, *_), shown in zip(kpts, seen, strict=True):
                if shown:
                    self._add(
                        draw.segment_pixels((x, y), (x, y), dot, self.width, self.height), row
                    )

    def paint(self, image: torch.Tensor, colours: torch.Tensor) -> None:
        """Every stroke in its colour, in one store; where strokes cross, the first drawn wins."""
        if not self._pixels:
            return
        pixels = np.concatenate(self._pixels)
        rows = np.repeat(self._rows, [len(p) for p in self._pixels])
        pixels, first = np.unique(pixels, return_index=True)
        index = transfer.upload(torch.from_numpy(np.stack([pixels, rows[first]])), image.device)
        image.view(-1, 3)[index[0]] = colours[index[1]]


class Annotator:
    """Draws detection results on pictures, on the picture's device.

    ``lines`` and ``zones`` are drawn on every frame with the counts passed to
    :meth:`draw`. ``colour_by`` picks box colours by class or, where a
    detection has a ``track_id``, by track. ``zone_fill_alpha`` (0..1) tints
    the inside of zones (0, the default, draws outlines only, the cheapest).
    A pose model's visible keypoints are dotted and joined by ``skeleton``'s
    limbs; an OBB model's rotated boxes are outlined instead of their boxes.
    ``mask_alpha`` (0..1) is the opacity of a segmentation model's masks, filled
    in the box's colour (0 leaves them out).

    One annotator may serve many streams and sizes; it is safe to call from
    one thread at a time per picture (the caches are shared and locked).
    """

    def __init__(
        self,
        lines: Iterable[LineOverlay] = (),
        zones: Iterable[ZoneOverlay] = (),
        *,
        colour_by: Literal["class", "track"] = "class",
        show_labels: bool = True,
        show_status: bool = True,
        zone_fill_alpha: float = 0.0,
        mask_alpha: float = 0.45,
        scale: float = 1.0,
        skeleton: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        if colour_by not in ("class", "track"):
            raise ValueError(f"colour_by must be 'class' or 'track', got {colour_by!r}")
        if not 0.0 <= zone_fill_alpha <= 1.0:
            raise ValueError(f"zone_fill_alpha must be in [0, 1], got {zone_fill_alpha!r}")
        if not 0.0 <= mask_alpha <= 1.0:
            raise ValueError(f"mask_alpha must be in [0, 1], got {mask_alpha!r}")
        if not 0.25 <= scale <= 8.0:
            raise ValueError(f"scale must be in [0.25, 8], got {scale!r}")
        self.lines = tuple(lines)
        self.zones = tuple(zones)
        self.colour_by = colour_by
        self.show_labels = show_labels
        self.show_status = show_status
        self.zone_fill_alpha = zone_fill_alpha
        self.mask_alpha = mask_alpha
        self.scale = scale
        self.skeleton = None if skeleton is None else tuple((int(a), int(b)) for a, b in skeleton)
        """Keypoint pairs drawn as limbs; None: COCO's skeleton for 17 keypoints, else none."""
        self._scenes: dict[tuple[str, int, int], _Scene] = {}
        self._lock = threading.Lock()

    # -- sizes -------------------------------------------------------------------------

    def thickness_for(self, width: int, height: int) -> int:
        """Outline thickness in pixels for a picture of this size."""
        return max(2, round(min(width, height) * self.scale / 270))

    def font_size_for(self, width: int, height: int) -> int:
        """Nominal text size in pixels for a picture of this size."""
        return max(12, round(height * self.scale / 36))

    def _scene(self, device: torch.device, width: int, height: int) -> _Scene:
        """The scene of pictures of this size, the :data:`MAX_SCENES` used last kept: an
        annotator lives as long as its pipeline, and each size's scene holds whole-picture
        tensors (a zone's fill), so streams of ever new sizes grew it without end."""
        key = (str(device), width, height)
        with self._lock:
            scene = self._scenes.pop(key, None) or self._build_scene(device, width, height)
            self._scenes[key] = scene  # the most recently used last
            while len(self._scenes) > MAX_SCENES:
                del self._scenes[next(iter(self._scenes))]
        return scene

    def _build_scene(self, device: torch.device, width: int, height: int) -> _Scene:
        thickness = self.thickness_for(width, height)
        atlas = glyph_atlas(self.font_size_for(width, height))
        pad = max(1, atlas.height // 8)
        glyphs = torch.nn.functional.pad(atlas.columns(device), (pad, pad))
        rgb = [*CLASS_COLOURS, *_EXTRA_COLOURS]
        colours = torch.tensor(rgb, dtype=torch.uint8, device=device)
        background = np.array(rgb, np.int32)[:, None, :]
        text = np.array([_text_colour(c) for c in rgb], np.int32)[:, None, :]
        coverage = np.arange(256, dtype=np.int32)[None, :, None]
        blends = (background * (255 - coverage) + text * coverage + 127) // 255
        blends = torch.from_numpy(blends.astype(np.uint8).reshape(-1, 3)).to(device)

        def upload(index: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(index).to(device)

        lines = [
            upload(draw.segment_pixels(line.start, line.end, thickness, width, height))
            for line in self.lines
        ]
        outlines = [
            upload(draw.polyline_pixels(zone.points, thickness, width, height, closed=True))
            for zone in self.zones
        ]
        fills = [
            upload(draw.polygon_pixels(zone.points, width, height)) if self.zone_fill_alpha else
            torch.zeros(0, dtype=torch.int64, device=device)
            for zone in self.zones
        ]  # fmt: skip
        line_anchors = [
            (round(min(line.start[0], line.end[0])), round(min(line.start[1], line.end[1])))
            for line in self.lines
        ]
        zone_anchors = [
            (round(min(p[0] for p in zone.points)), round(min(p[1] for p in zone.points)))
            for zone in self.zones
        ]
        return _Scene(
            thickness=thickness,
            pad=pad,
            atlas=atlas,
            glyphs=glyphs,
            colours=colours,
            blends=blends,
            lines=lines,
            zone_outlines=outlines,
            zone_fills=fills,
            line_anchors=line_anchors,
            zone_anchors=zone_anchors,
        )

    # -- drawing -----------------------------------------------------------------------

    def annotate(
        self,
        frame: Frame,
        result: FrameResult | None = None,
        *,
        line_counts: Mapping[str, Any] | None = None,
        zone_occupancy: Mapping[str, Any] | None = None,
        fps: float | None = None,
        status: str | None = None,
    ) -> torch.Tensor:
        """``frame`` as a new RGB ``uint8`` ``(H, W, 3)`` tensor on its device, ``result`` drawn.

        The frame's own buffer is left untouched. See :meth:`draw` for the rest.
        """
        image = frame_to_rgb(frame)
        return self.draw(
            image,
            result,
            stream_id=frame.stream_id,
            pts_seconds=frame.pts_seconds,
            line_counts=line_counts,
            zone_occupancy=zone_occupancy,
            fps=fps,
            status=status,
        )

    def draw(
        self,
        image: torch.Tensor,
        result: FrameResult | None = None,
        *,
        stream_id: str | None = None,
        pts_seconds: float | None = None,
        line_counts: Mapping[str, Any] | None = None,
        zone_occupancy: Mapping[str, Any] | None = None,
        fps: float | None = None,
        status: str | None = None,
    ) -> torch.Tensor:
        """Draw on ``image`` (contiguous RGB ``uint8`` ``(H, W, 3)``, any device); return it.

        ``result`` is a :class:`vstream.results.FrameResult` (or None): its
        detections are boxed and labelled ``label score #track_id`` (the track
        where there is one), and its ``events``, ``line_counts`` and
        ``zone_occupancy`` are drawn where analytics ran. ``line_counts`` maps a line's name to
        ``{"in": n, "out": m}`` (or ``(n, m)``) and ``zone_occupancy`` a zone's
        name to its count; both override the result's. A line crossed in this
        frame (a ``line_crossing`` event) and a zone entered or left flash in a
        highlight colour. The status line says ``status`` or, by default, the
        stream, the time stamp and ``fps``.
        """
        if image.dim() != 3 or image.shape[2] != 3 or image.dtype != torch.uint8:
            raise ValueError(
                f"expected RGB uint8 (H, W, 3), got {tuple(image.shape)} {image.dtype}"
            )
        if not image.is_contiguous():
            raise ValueError("the picture to draw on must be contiguous")
        height, width = image.shape[0], image.shape[1]
        scene = self._scene(image.device, width, height)
        events: Sequence[Mapping[str, Any]] = ()
        if result is not None:
            stream_id = stream_id if stream_id is not None else result.stream_id
            if pts_seconds is None:
                pts_seconds = result.pts_seconds
            if line_counts is None:
                line_counts = result.line_counts
            if zone_occupancy is None:
                zone_occupancy = result.zone_occupancy
            events = result.events or ()
        hot_lines = {
            e.get("line")
            for e in events
            if isinstance(e, Mapping) and e.get("type") == "line_crossing"
        }
        hot_zones = {
            e.get("zone")
            for e in events
            if isinstance(e, Mapping) and e.get("type") in ("zone_enter", "zone_exit")
        }
        # Labels are placed in order, each over the ones before: the boxes' first, so that
        # a box passing a line or zone never hides its name and counts.
        labels: list[_Label] = []
        overlays: list[_Label] = []
        self._draw_zones(image, scene, zone_occupancy, hot_zones, overlays)
        self._draw_lines(image, scene, line_counts, hot_lines, overlays)
        if result is not None:
            self._draw_masks(image, scene, result.detections)
            self._draw_boxes(image, scene, result.detections, labels)
        labels += overlays
        if self.show_status:
            text = status if status is not None else self._status_text(stream_id, pts_seconds, fps)
            if text:
                labels.append(_Label(0, 0, text, _STATUS))
        self._draw_labels(image, scene, labels)
        return image

    @staticmethod
    def _status_text(stream_id: str | None, pts_seconds: float | None, fps: float | None) -> str:
        parts = []
        if stream_id is not None:
            parts.append(str(stream_id))
        if pts_seconds is not None and math.isfinite(pts_seconds):
            parts.append(_format_time(pts_seconds))
        if fps is not None and math.isfinite(fps):
            parts.append(f"{fps:.1f} fps")
        return "  ".join(parts)

    def _draw_zones(
        self,
        image: torch.Tensor,
        scene: _Scene,
        occupancy: Mapping[str, Any] | None,
        hot: set[Any],
        labels: list[_Label],
    ) -> None:
        alpha = round(self.zone_fill_alpha * 256)
        for i, zone in enumerate(self.zones):
            row = _ZONE_HOT if zone.name in hot else _ZONE
            if alpha:
                draw.blend(image, scene.zone_fills[i], scene.colours[row], alpha)
            draw.paint(image, scene.zone_outlines[i], scene.colours[row])
            text = zone.name
            if occupancy is not None and zone.name in occupancy:
                text = f"{zone.name}: {occupancy[zone.name]}"
            x, y = scene.zone_anchors[i]
            labels.append(_Label(x, y, text, row))

    def _draw_lines(
        self,
        image: torch.Tensor,
        scene: _Scene,
        counts: Mapping[str, Any] | None,
        hot: set[Any],
        labels: list[_Label],
    ) -> None:
        for i, line in enumerate(self.lines):
            row = _LINE_HOT if line.name in hot else _LINE
            draw.paint(image, scene.lines[i], scene.colours[row])
            text = line.name
            if counts is not None and line.name in counts:
                text = f"{line.name}  {_counts_text(counts[line.name])}"
            x, y = scene.line_anchors[i]
            labels.append(_Label(x, y - scene.label_height, text, row))

    def _colour_key(self, class_id: int, track_id: int) -> int:
        """The palette row of a detection: by track where asked and tracked, else by class."""
        tracked = track_id != NO_TRACK
        return (track_id if self.colour_by == "track" and tracked else class_id) % PALETTE_SIZE

    def _draw_masks(self, image: torch.Tensor, scene: _Scene, detections: Detections) -> None:
        """Each mask blended over the picture in its box's colour: its window's bits go up
        packed and are spread to pixels on the picture's device."""
        column = detections.data.get(MASKS)
        alpha = round(self.mask_alpha * 256)
        if column is None or not alpha:
            return
        height, width = image.shape[0], image.shape[1]
        drawn = [
            (mask, self._colour_key(c, t))
            for mask, c, t in zip(
                column.tolist(),
                detections.class_id.tolist(),
                detections.tracker_id.tolist(),
                strict=True,
            )
            if mask is not None and mask.fits(width, height) and mask.area
        ]
        if not drawn:
            return
        masks = [m for m, _ in drawn]
        index, on, owner = mask_pixels(masks, width, image.device)
        # The set pixels first, as many as the host counted: no wait for the device.
        chosen = torch.argsort((~on).to(torch.uint8), stable=True)[: sum(m.area for m in masks)]
        rows = transfer.upload(torch.tensor([row for _, row in drawn]), image.device)
        draw.blend(image, index[chosen], scene.colours[rows[owner[chosen]]], alpha)

    def _draw_boxes(
        self, image: torch.Tensor, scene: _Scene, detections: Detections, labels: list[_Label]
    ) -> None:
        height, width = image.shape[0], image.shape[1]
        t = scene.thickness
        finite = np.isfinite(detections.xyxy).all(axis=1)
        # Rounded (half to even, as Python's round) and clamped to the picture, in numpy.
        limits = np.array([width, height, width, height], dtype=np.float64)
        boxes = np.clip(np.round(detections.xyxy[finite]), 0, limits).astype(np.int64)
        read = detections.data.get(ATTRIBUTES)
        attributes = read[finite].tolist() if read is not None else [None] * len(boxes)
        rotated = detections.data.get(OBB)
        corners = rotated_corners(rotated[finite]).tolist() if rotated is not None else None
        shapes = _Strokes(width, height, t)
        for index, ((x1, y1, x2, y2), score, class_id, track_id, attribute) in enumerate(
            zip(
                boxes.tolist(),
                detections.confidence[finite].tolist(),
                detections.class_id[finite].tolist(),
                detections.tracker_id[finite].tolist(),
                attributes,
                strict=True,
            )
        ):
            if x2 <= x1 or y2 <= y1:
                continue
            tracked = track_id != NO_TRACK
            row = self._colour_key(class_id, track_id)
            if corners is not None:
                shapes.outline(corners[index], row)
            else:
                draw.box_outline(image, x1, y1, x2, y2, t, scene.colours[row])
            if self.show_labels:
                text = f"{label_for(class_id, detections.class_names)} {score:.2f}"
                text += _attribute_text(attribute)
                if tracked:
                    text += f" #{track_id}"
                above = y1 - scene.label_height
                labels.append(_Label(x1, above if above >= 0 else y1, text, row))
        keypoints = detections.data.get(KEYPOINTS)
        if keypoints is not None and len(keypoints):
            rows = np.where(
                (detections.tracker_id != NO_TRACK) & (self.colour_by == "track"),
                detections.tracker_id,
                detections.class_id,
            )[finite]
            shapes.skeletons(
                keypoints[finite], rows % PALETTE_SIZE, self._limbs(keypoints.shape[1])
            )
        shapes.paint(image, scene.colours)

    def _limbs(self, count: int) -> tuple[tuple[int, int], ...]:
        """The keypoint pairs drawn as limbs for a model with ``count`` keypoints."""
        if self.skeleton is not None:
            return tuple((a, b) for a, b in self.skeleton if a < count and b < count)
        return COCO_SKELETON if count == len(COCO_KEYPOINTS) else ()

    def _draw_labels(self, image: torch.Tensor, scene: _Scene, labels: list[_Label]) -> None:
        """All labels of the frame: one gather builds every patch, one store places each."""
        if not labels:
            return
        atlas, pad = scene.atlas, scene.pad
        blank = atlas.blank_column
        columns: list[int] = []
        rows: list[int] = []
        spans: list[tuple[int, int]] = []
        for label in labels:
            cols = atlas.column_indices(label.text)
            start = len(columns)
            columns.extend([blank] * pad + cols + [blank] * pad)
            rows.extend([label.colour] * (len(columns) - start))
            spans.append((start, len(columns) - start))
        index = transfer.upload(torch.tensor([columns, rows], dtype=torch.int64), image.device)
        # Each pixel of each label: its coverage by the text, blended through a lookup table.
        lookup = scene.glyphs[index[0]].to(torch.int64).add_(index[1].unsqueeze(1) * 256)
        patches = scene.blends[lookup].transpose(0, 1)  # (h, columns, 3)
        height, width = image.shape[0], image.shape[1]
        label_height = scene.label_height
        for label, (start, span) in zip(labels, spans, strict=True):
            x = min(max(0, label.x), max(0, width - span))
            y = min(max(0, label.y), max(0, height - label_height))
            w, h = min(span, width - x), min(label_height, height - y)
            if w > 0 and h > 0:
                image[y : y + h, x : x + w] = patches[:h, start : start + w]
