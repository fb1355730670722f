"""Analytics options: the tracker, counting lines, zones, and how objects are placed on them.

These models are what a pipeline's ``analytics:`` section (``tracking``,
``lines``, ``zones``) and the ``--track``, ``--line`` and ``--anchor`` flags are read
through. Coordinates are pixels of the original frame, ``x`` to the right and
``y`` down, the same as the detections' ``bbox``.

Degenerate geometry is refused when the config is read, not discovered when
nothing is ever counted: a line needs two distinct points, a zone at least
three points enclosing some area, with edges that never cross or touch each
other (a "bow tie" has no one inside), and names are unique. Against the dead
band, which hides an object from a line or a zone border it is that close to:
a line must be at least twice as long as the band is wide, and a zone must
have some point farther than the band from its border (no object is ever
clear of it otherwise: a zone 10 px wide with the default 5 px band). The zone
test is exact for a convex zone; a concave one is refused when even its convex
hull has no such point, so a thin concave zone may pass. A zone along the
frame's edge, which is no border there (:mod:`vstream.analytics.zones`), is
judged as drawn: drawn past the edge, it has the room it needs.

Which classes a line or zone counts can only be checked against the model
(:func:`unknown_classes`), when the pipeline is built or validated.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, TypeAlias

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from vstream.config.base import NAME_PATTERN, Cli, Name, Number, StrictModel
from vstream.config.model import ClassIds, ClassName, absent_classes, describe_classes
from vstream.config.tracking import MAX_TRACK_SECONDS, TrackingConfig

MAX_COORDINATE = 100_000.0
"""Largest absolute coordinate, in pixels; points may lie outside the frame."""

Coordinate: TypeAlias = Number(-MAX_COORDINATE, MAX_COORDINATE)
Point = tuple[Coordinate, Coordinate]


def _distinct_labels(labels: list[str]) -> list[str]:
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels are listed more than once: {labels}")
    return labels


AttributeFilter = Annotated[
    dict[
        Name,
        Annotated[
            list[ClassName], Field(min_length=1, max_length=1000), AfterValidator(_distinct_labels)
        ],
    ],
    Field(min_length=1, max_length=8),
]
"""``{attribute: [labels]}``: only objects whose secondary classifier ``attribute`` reads one of
``labels`` (every attribute listed must match). Names and labels are checked against the
pipeline's ``secondary`` models (:func:`check_attribute_filters`)."""

ATTRIBUTE_FILTER_HELP = (
    "count only objects a secondary classifier reads as one of these labels, e.g. "
    "{colour: [red, white]} (every attribute listed must match); decided with the track's "
    "last reading when the crossing or entry happens: an object not read by then is not "
    "counted (in a zone, it enters once it is read); null: every object"
)


class Anchor(str, enum.Enum):
    """The point of a box that stands for the object on lines and in zones."""

    CENTER = "center"
    BOTTOM_CENTER = "bottom_center"
    """Where a person or a vehicle touches the ground: the usual choice for counting."""
    TOP_CENTER = "top_center"
    CENTER_LEFT = "center_left"
    CENTER_RIGHT = "center_right"
    TOP_LEFT = "top_left"
    TOP_RIGHT = "top_right"
    BOTTOM_LEFT = "bottom_left"
    BOTTOM_RIGHT = "bottom_right"


class LineConfig(StrictModel):
    """A counting line: the segment from ``start`` to ``end``.

    Direction (the one place it is defined): looking along the line from
    ``start`` to ``end`` on the screen, ``in`` is a crossing from its left side
    to its right side, ``out`` the opposite. Swapping ``start`` and ``end``
    swaps them. A line drawn left to right counts downward movement as ``in``::

                   left side
        start ●──────────────────────▶● end
                   right side

        left -> right: "in"        right -> left: "out"
    """

    name: Name = Field(description="name in events, counts and metrics")
    start: Point = Field(description="first end point [x, y], pixels")
    end: Point = Field(
        description="second end point [x, y], pixels; looking from start to end, "
        "crossing from left to right is 'in'"
    )
    classes: ClassIds | None = Field(
        None, description="class ids this line counts; null: every class"
    )
    attributes: AttributeFilter | None = Field(None, description=ATTRIBUTE_FILTER_HELP)

    @model_validator(mode="after")
    def _has_length(self) -> LineConfig:
        if self.start == self.end:
            raise ValueError(f"line {self.name!r}: start and end are the same point {self.start}")
        return self


def polygon_area(points: list[tuple[float, float]]) -> float:
    """Unsigned area of a simple polygon (shoelace formula)."""
    total = 0.0
    for (x1, y1), (x2, y2) in zip(points, points[1:] + points[:1], strict=True):
        total += x1 * y2 - x2 * y1
    return abs(total) / 2.0


def _orientation(a: Point, b: Point, c: Point) -> float:
    """Positive, negative or zero as ``c`` lies on one side of ``a -> b``, the other, or on it."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def _within(a: Point, b: Point, c: Point) -> bool:
    """Whether ``c``, known to be on the line through ``a`` and ``b``, lies on the segment."""
    return min(a[0], b[0]) <= c[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= c[1] <= max(a[1], b[1])


def _segments_meet(a: Point, b: Point, c: Point, d: Point) -> bool:
    """Whether segments ``a-b`` and ``c-d`` have a point in common (touching counts)."""
    if max(a[0], b[0]) < min(c[0], d[0]) or max(c[0], d[0]) < min(a[0], b[0]):
        return False
    if max(a[1], b[1]) < min(c[1], d[1]) or max(c[1], d[1]) < min(a[1], b[1]):
        return False
    o1, o2 = _orientation(a, b, c), _orientation(a, b, d)
    o3, o4 = _orientation(c, d, a), _orientation(c, d, b)
    if o1 * o2 < 0 and o3 * o4 < 0:
        return True
    return (
        (o1 == 0 and _within(a, b, c))
        or (o2 == 0 and _within(a, b, d))
        or (o3 == 0 and _within(c, d, a))
        or (o4 == 0 and _within(c, d, b))
    )


def _crossing(points: list[Point]) -> tuple[int, int] | None:
    """The first two edges (by their first corner) that are not neighbours yet meet, or None.

    Edge ``i`` runs from corner ``i`` to the next, the last one back to the first.
    """
    n = len(points)
    for i in range(n):
        a, b = points[i], points[(i + 1) % n]
        for j in range(i + 2, n if i else n - 1):
            if _segments_meet(a, b, points[j], points[(j + 1) % n]):
                return i, j
    return None


def _shown(point: Point) -> str:
    return f"({point[0]:g}, {point[1]:g})"


def _convex_hull(points: list[Point]) -> list[Point]:
    """The corners of the convex hull of ``points``, counter-clockwise: the inside is where
    :func:`_orientation` is positive for every edge (Andrew's monotone chain)."""
    ordered = sorted(set(points))
    chains: list[list[Point]] = []
    for run in (ordered, ordered[::-1]):
        chain: list[Point] = []
        for point in run:
            while len(chain) > 1 and _orientation(chain[-2], chain[-1], point) <= 0:
                chain.pop()
            chain.append(point)
        chains.append(chain[:-1])
    return chains[0] + chains[1]


def _depths(hull: list[Point], point: Point) -> list[float]:
    """How far ``point`` is inside each edge's line of a counter-clockwise convex polygon
    (negative: outside it)."""
    return [
        _orientation(a, b, point) / math.dist(a, b)
        for a, b in zip(hull, hull[1:] + hull[:1], strict=True)
    ]


def _eroded(hull: list[Point], distance: float) -> list[Point]:
    """The part of a counter-clockwise convex polygon at least ``distance`` inside every edge
    (clipped by each edge's line moved inwards; Sutherland-Hodgman)."""
    region = hull
    for a, b in zip(hull, hull[1:] + hull[:1], strict=True):
        length = math.dist(a, b)
        depth = [_orientation(a, b, p) / length - distance for p in region]
        kept: list[Point] = []
        for i, p in enumerate(region):
            j = (i + 1) % len(region)
            if depth[i] >= 0:
                kept.append(p)
            if depth[i] * depth[j] < 0:
                q, share = region[j], depth[i] / (depth[i] - depth[j])
                kept.append((p[0] + share * (q[0] - p[0]), p[1] + share * (q[1] - p[1])))
        region = kept
        if len(region) < 3:
            return []
    return region


def _room(points: list[Point], distance: float) -> float | None:
    """None where some point of the polygon's convex hull is farther than ``distance`` from
    the hull's border, else the farthest any is (found to 0.1 %); a polygon's own points
    are never farther from its border than from its hull's."""
    hull = _convex_hull(points)
    middle = (sum(p[0] for p in hull) / len(hull), sum(p[1] for p in hull) / len(hull))
    if min(_depths(hull, middle)) > distance:
        return None  # the usual zone, wide around its middle: no clipping needed
    if polygon_area(_eroded(hull, distance)) > 1e-6:
        return None
    low, high = 0.0, distance
    while high - low > 1e-3 * distance:
        middle_distance = (low + high) / 2
        if polygon_area(_eroded(hull, middle_distance)) > 1e-6:
            low = middle_distance
        else:
            high = middle_distance
    return high


class ZoneConfig(StrictModel):
    """A zone: a polygon objects enter, stay in, and leave."""

    name: Name = Field(description="name in events, occupancy and metrics")
    points: Annotated[list[Point], Field(min_length=3, max_length=1000)] = Field(
        description="polygon corners [[x, y], ...] in order, pixels; closed automatically"
    )
    classes: ClassIds | None = Field(
        None, description="class ids this zone watches; null: every class"
    )
    attributes: AttributeFilter | None = Field(None, description=ATTRIBUTE_FILTER_HELP)
    loiter_seconds: Number(0.0, MAX_TRACK_SECONDS, open_low=True) | None = Field(
        None,
        description="emit one loitering event per visit once an object has been inside this "
        "long; null: no loitering events",
    )
    count_by: Literal["anchor", "mask"] = Field(
        "anchor",
        description="an object is inside when its anchor point is (anchor), or when at least "
        "min_overlap of its mask's pixels are (mask: a segmentation model's objects; an "
        "object without a mask is placed by its anchor)",
    )
    min_overlap: Number(0.0, 1.0, open_low=True) = Field(
        0.5,
        description="with count_by: mask, the share of the mask inside the zone that puts "
        "the object inside",
    )

    @model_validator(mode="after")
    def _simple_with_area(self) -> ZoneConfig:
        # A polygon that crosses itself has no inside both ways of drawing it would agree
        # on (its signed lobes cancel or not, and the even-odd test counts both as in).
        points = list(self.points)
        for index, point in enumerate(points[1:], start=1):
            if point == points[index - 1]:
                raise ValueError(
                    f"zone {self.name!r}: point {index} {_shown(point)} repeats the one before"
                )
        crossing = _crossing(points) if len(points) > 3 else None
        if crossing is not None:
            edges = [
                f"{_shown(points[i])} -> {_shown(points[(i + 1) % len(points)])}" for i in crossing
            ]
            raise ValueError(
                f"zone {self.name!r}: the polygon crosses itself: edge {edges[0]} meets edge "
                f"{edges[1]}; list the corners in order around the zone"
            )
        if polygon_area(points) <= 1e-6:
            raise ValueError(f"zone {self.name!r}: the polygon encloses no area")
        return self


class AnalyticsConfig(StrictModel):
    """Tracking plus the lines and zones of one pipeline's streams."""

    tracking: TrackingConfig | None = Field(
        None,
        description="tracker settings; null: no tracking unless there are lines or zones, "
        "which need tracks and then use the default settings",
    )
    lines: Annotated[list[LineConfig], Field(max_length=1000)] = Field(
        default_factory=list, description="counting lines"
    )
    zones: Annotated[list[ZoneConfig], Field(max_length=1000)] = Field(
        default_factory=list, description="zones"
    )
    anchor: Annotated[Anchor, Cli("--anchor")] = Field(
        Anchor.BOTTOM_CENTER, description="the point of each box placed on lines and in zones"
    )
    anchor_keypoints: Annotated[list[Name], Field(min_length=1, max_length=2)] | None = Field(
        None,
        description="with a pose model: the keypoint (its name or number) that stands for "
        "each object on lines and zones instead of its box's anchor, or two whose midpoint "
        "does, e.g. [left_ankle, right_ankle]; only keypoints scoring 0.5 or more count "
        "(one of two alone stands in); an object with none of them stands where they last were "
        "from its box's anchor (at the anchor until they are first seen)",
    )
    dead_band_pixels: Annotated[Number(0.0, 10_000.0), Cli("--dead-band")] = Field(
        5.0,
        description="an anchor closer than this to a line or a zone border is on neither side, "
        "so jitter on the line never counts; narrowed where the frame edge is closer",
    )
    min_seconds_on_side: Annotated[Number(0.0, MAX_TRACK_SECONDS), Cli("--min-side-seconds")] = (
        Field(
            0.1,
            description="an object must stay this long beyond the dead band on the new side of "
            "a line (or of a zone border) before the crossing (or entry, exit) counts",
        )
    )

    @model_validator(mode="after")
    def _room_to_count(self) -> AnalyticsConfig:
        # A line or zone the dead band hides every object from counts nothing, silently.
        band = self.dead_band_pixels
        problems = []
        for line in self.lines:
            length = math.dist(line.start, line.end)
            if length < 2 * band:
                problems.append(
                    f"line {line.name!r} is {length:.3g} px long, shorter than twice the dead "
                    f"band around it (2 x {band:g} px); draw it longer or lower dead_band_pixels"
                )
        for zone in self.zones:
            widest = _room(list(zone.points), band) if band > 0 else None
            if widest is not None:
                problems.append(
                    f"zone {zone.name!r}: no point of it is farther than the dead band "
                    f"({band:g} px) from its border (at most {widest:.3g} px), so no object is "
                    "ever inside; draw it wider (along the frame's edge it may extend past it) "
                    "or lower dead_band_pixels"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("lines", "zones")
    @classmethod
    def _unique_names(
        cls, items: list[LineConfig] | list[ZoneConfig]
    ) -> list[LineConfig] | list[ZoneConfig]:
        names = [item.name for item in items]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"names must be unique, repeated: {', '.join(repeated)}")
        return items

    @property
    def enabled(self) -> bool:
        """Whether streams need a tracker at all."""
        return self.tracking is not None or bool(self.lines) or bool(self.zones)

    @property
    def effective_tracking(self) -> TrackingConfig:
        """The tracker settings in force: ``tracking``, or the defaults."""
        return self.tracking or TrackingConfig()

    def candidate_conf(self, conf: float) -> float:
        """The score the detector keeps boxes from, for records asked at ``conf``.

        With tracking on, ByteTrack's second stage matches boxes scoring from
        ``low_score`` up: a detector cut at ``conf`` would never hand it one.
        The detector then keeps boxes down to ``low_score``; after tracking, the
        records keep only those above ``conf`` (:func:`vstream.engine.outputs.analyze`).
        """
        return min(conf, self.effective_tracking.low_score) if self.enabled else conf


def unknown_classes(
    analytics: AnalyticsConfig, class_names: Mapping[int, str] | Sequence[str]
) -> list[tuple[str, str]]:
    """The lines and zones whose ``classes`` list ids the model does not have (they would
    count nothing of them, silently): ``(where, message)``, ``where`` as ``lines[0]``.

    ``class_names`` is the model's (``Detector.class_names``, or its metadata's), so this
    runs when the pipeline is built or validated, not when the YAML is parsed. A model that
    names no classes cannot be checked and is accepted.
    """
    found = []
    places: list[tuple[str, str, list[LineConfig | ZoneConfig]]] = [
        ("lines", "line", [*analytics.lines]),
        ("zones", "zone", [*analytics.zones]),
    ]
    for section, kind, items in places:
        for index, place in enumerate(items):
            wanted: list[int] = place.classes or []
            unknown = absent_classes(wanted, class_names)
            if unknown:
                found.append(
                    (
                        f"{section}[{index}]",
                        f"{kind} {place.name!r}: classes {unknown} are not classes of the "
                        f"model, which has {describe_classes(class_names)}",
                    )
                )
    return found


_SPEC = re.compile(r"^(?P<name>[^=]*)=(?P<coords>.*)$")


def _spec_numbers(spec: str, what: str, form: str, example: str) -> tuple[str, list[float]]:
    """The name and the numbers of ``NAME=N,N,...`` (the ``--line`` and ``--zone`` flags)."""
    match = _SPEC.match(spec.strip())
    if match is None:
        raise ValueError(f"{what} {spec!r}: expected {form}, e.g. {example}")
    name = match["name"].strip()
    if not re.match(NAME_PATTERN, name):
        raise ValueError(
            f"{what} {spec!r}: name {name!r} must start with a letter or digit and have at most "
            "64 letters, digits, '_', '.' or '-'"
        )
    parts = [part.strip() for part in match["coords"].split(",")]
    try:
        return name, [float(part) for part in parts]
    except ValueError:
        raise ValueError(f"{what} {spec!r}: {form.partition('=')[2]} must be numbers") from None


def _reasons(exc: ValidationError) -> str:
    return "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())


def parse_line_spec(spec: str) -> LineConfig:
    """``NAME=X1,Y1,X2,Y2`` (the ``--line`` flag) as a :class:`LineConfig`.

    Raises ValueError with a message that names the problem.
    """
    name, numbers = _spec_numbers(spec, "line", "NAME=X1,Y1,X2,Y2", "gate=10,200,630,200")
    if len(numbers) != 4:
        raise ValueError(f"line {spec!r}: expected 4 numbers X1,Y1,X2,Y2, got {len(numbers)}")
    x1, y1, x2, y2 = numbers
    try:
        return LineConfig(name=name, start=(x1, y1), end=(x2, y2))
    except ValidationError as exc:
        raise ValueError(f"line {spec!r}: {_reasons(exc)}") from None


def parse_zone_spec(spec: str) -> ZoneConfig:
    """``NAME=X1,Y1,X2,Y2,X3,Y3,...`` (the ``--zone`` flag): a polygon's corners in order.

    Raises ValueError with a message that names the problem.
    """
    name, numbers = _spec_numbers(
        spec, "zone", "NAME=X1,Y1,X2,Y2,X3,Y3,...", "dock=0,0,200,0,200,150,0,150"
    )
    if len(numbers) < 6 or len(numbers) % 2:
        raise ValueError(
            f"zone {spec!r}: expected an even count of numbers, at least 6 (3 corners x, y), "
            f"got {len(numbers)}"
        )
    points = list(zip(numbers[::2], numbers[1::2], strict=True))
    try:
        return ZoneConfig(name=name, points=points)
    except ValidationError as exc:
        raise ValueError(f"zone {spec!r}: {_reasons(exc)}") from None


__all__ = [
    "NAME_PATTERN",
    "AnalyticsConfig",
    "Anchor",
    "LineConfig",
    "TrackingConfig",
    "ZoneConfig",
    "parse_line_spec",
    "parse_zone_spec",
    "unknown_classes",
]
