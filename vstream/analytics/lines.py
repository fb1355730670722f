"""Counting line crossings without the usual failures of line counters.

Each confirmed track's anchor point has a side of the line: ``+1`` (right of
the line looking from start to end, the ``in`` side), ``-1`` (left, ``out``),
or none yet. A crossing counts when all of this holds:

- the anchor is seen beyond the dead band (``dead_band_pixels`` from the
  infinite line) on the other side of the line: jitter on the line is inside
  the band and never counts;
- it stays beyond the band on that side for ``min_seconds_on_side`` of stream
  time, measured with pts so it means the same at any frame rate; a spike
  that comes back into the band or across sooner does not count;
- the path crossed the drawn segment, not the infinite line beside it: where
  the anchor's path (straight between two observations, also across frames
  where the object was hidden) last passed through the line must lie between
  ``start`` and ``end``;
- the track is confirmed: detections without a track id never reach here;
- a detection settles it: the tracker's predicted boxes (``detect_every``,
  the frames the detector does not see) may start the wait, time stamped as
  the object moves, or end it, but the object is counted only where the
  detector finds it beyond the band, the wait past. A prediction carries an
  object on at its last velocity: a car braking to a stop before the line
  would be carried across it and counted.

A track that ends while its crossing is pending (the object left the frame,
or was hidden until the tracker forgot it, before ``min_seconds_on_side``
had passed) counts when the tracker forgets it, if its last detection was
still beyond the band on the new side: that is where the object was last
seen, and jitter on the line is inside the band, so it never counts this
way either. The event then comes ``track_buffer_seconds`` late, with the
``pts`` it was first seen across, like every crossing. A stream that ends
first (the end of a file) never forgets its tracks: such a crossing is not
counted.

Every crossing counts, each time, in each direction: an object that crosses
back is counted again. A track's first side is where it is first seen beyond
the band and is never a crossing. So when a track breaks and the object goes
on under a new id (the usual ID switch, e.g. in stop-and-go traffic), the new
track cannot add a count: a switch at the line can lose that crossing, never
count it twice. What this cannot catch is two tracks swapping objects that
stand on opposite sides of the line: each track then seems to cross back, and
counts.

Near the frame edge a dead band could leave no room on the outer side (an
object's clipped box never gets beyond it). With the frame size known the
band on each side is at most half of the frame's reach on that side, so a
line a few pixels from the edge still counts objects leaving through it. The
anchor should then be on the side objects leave by (``bottom_center`` for the
bottom edge, ``center_left`` for the left edge): that side of a box clipped by
the frame stays at the edge, beyond the line, while the object leaves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vstream.analytics.events import (
    NO_ATTRIBUTES,
    AttributesOf,
    Direction,
    Event,
    TrackAttributes,
    attributes_match,
)
from vstream.analytics.geometry import Segment
from vstream.config.analytics import LineConfig

IN_SIDE, OUT_SIDE = 1, -1


@dataclass(slots=True)
class _TrackState:
    """What one line remembers about one track."""

    side: int = 0
    """Settled side: IN_SIDE, OUT_SIDE, or 0 before the track is first seen beyond the band."""
    pending_since: float | None = None
    """pts at which the anchor was first seen beyond the band on the other side."""
    detected_across: bool = False
    """While pending: the last detection (not a prediction) saw the anchor beyond the band
    on the other side."""
    last_x: float = 0.0
    last_y: float = 0.0
    last_distance: float = 0.0
    """The last non-zero signed distance, at (last_x, last_y)."""
    crossed_at: float | None = None
    """Position along the segment (0..1 is on it) where the path last crossed the line."""
    class_id: int = -1
    """The track's class at its last observation."""
    attributes: TrackAttributes = field(default_factory=lambda: NO_ATTRIBUTES)
    """The track's last secondary readings (kept here: the cascade forgets them with the track)."""


class LineCounter:
    """One counting line: per-track sides, crossing events and running totals."""

    def __init__(self, config: LineConfig, dead_band: float, min_seconds: float) -> None:
        self.config = config
        self.segment = Segment(config.start, config.end)
        self.dead_band = dead_band
        self.min_seconds = min_seconds
        self._bands = {OUT_SIDE: dead_band, IN_SIDE: dead_band}
        self._frame_size: tuple[int, int] | None = None
        self._classes = frozenset(config.classes) if config.classes is not None else None
        self._tracks: dict[int, _TrackState] = {}
        self.totals: Counter[tuple[Direction, int]] = Counter()
        """Crossings so far by ``(direction, class_id)``."""

    @property
    def num_track_states(self) -> int:
        return len(self._tracks)

    def counts(self) -> dict[Direction, int]:
        """Crossings so far in each direction."""
        out: dict[Direction, int] = {"in": 0, "out": 0}
        for (direction, _), n in self.totals.items():
            out[direction] += n
        return out

    def set_frame_size(self, width: int, height: int) -> None:
        """Narrow the dead band where the frame edge leaves less room than it (see module doc)."""
        if self._frame_size == (width, height):
            return
        self._frame_size = (width, height)
        reach_out, reach_in = self.segment.reach_in_frame(width, height)
        self._bands = {
            OUT_SIDE: min(self.dead_band, reach_out / 2),
            IN_SIDE: min(self.dead_band, reach_in / 2),
        }

    def place(self, points: np.ndarray) -> np.ndarray:
        """``(N,)`` pixels from the line to each of ``(N, 2)`` points, positive on the ``in``
        side: what :meth:`observe` steps the tracks by (:mod:`~vstream.analytics.placing`)."""
        return self.segment.signed_distance(points)

    def observe(
        self,
        track_ids: np.ndarray,
        points: np.ndarray,
        distances: np.ndarray,
        class_ids: np.ndarray,
        pts: float,
        label_of: Callable[[int], str],
        attributes_of: AttributesOf | None = None,
        *,
        predicted: bool = False,
    ) -> list[Event]:
        """Step this frame's confirmed tracks by their anchor ``points`` and ``distances``
        (:meth:`place`); return the crossings this settles.

        ``attributes_of`` gives a track's secondary readings so far (a cascade), which the
        line's ``attributes`` filter and its events use. ``predicted``: the tracker's
        boxes, on a frame the detector did not see, which settle nothing (module doc)."""
        events = []
        for track_id, (x, y), distance, class_id in zip(
            track_ids.tolist(), points.tolist(), distances.tolist(), class_ids.tolist(), strict=True
        ):
            state = self._tracks.get(track_id)
            if state is None:
                state = self._tracks[track_id] = _TrackState()
            state.class_id = class_id
            if attributes_of is not None:
                state.attributes = attributes_of(track_id) or state.attributes
            direction, since = self._step(state, x, y, distance, pts, predicted)
            if direction is not None:
                events.extend(self._count(track_id, state, direction, since, label_of))
        return events

    def _count(
        self,
        track_id: int,
        state: _TrackState,
        direction: Direction,
        pts: float,
        label_of: Callable[[int], str],
    ) -> list[Event]:
        """The crossing's event (and its count), unless the line does not watch the class
        or the track's attributes."""
        class_id = state.class_id
        if self._classes is not None and class_id not in self._classes:
            return []
        if not attributes_match(self.config.attributes, state.attributes):
            return []
        self.totals[direction, class_id] += 1
        return [
            Event(
                "line_crossing",
                track_id,
                class_id,
                label_of(class_id),
                pts,
                self.config.name,
                direction,
                attributes=state.attributes,
            )
        ]

    def _step(
        self, state: _TrackState, x: float, y: float, distance: float, pts: float, predicted: bool
    ) -> tuple[Direction | None, float]:
        """Advance one track by one observation (``predicted``: the tracker's, not the
        detector's); a settled crossing returns its direction."""
        if distance != 0.0:
            if state.last_distance != 0.0 and (distance > 0) != (state.last_distance > 0):
                fraction = state.last_distance / (state.last_distance - distance)
                crossing = (
                    state.last_x + fraction * (x - state.last_x),
                    state.last_y + fraction * (y - state.last_y),
                )
                state.crossed_at = float(self.segment.position(np.asarray(crossing))[0])
            state.last_x, state.last_y, state.last_distance = x, y, distance
        side = IN_SIDE if distance > 0 else OUT_SIDE
        if abs(distance) <= self._bands[side]:
            state.pending_since, state.detected_across = None, False  # held anew from here
            return None, pts
        if state.side == 0:
            state.side = side
            return None, pts
        if side == state.side:
            state.pending_since, state.detected_across = None, False
            return None, pts
        if state.pending_since is None:
            state.pending_since = pts
        if not predicted:
            state.detected_across = True
        since = state.pending_since
        if predicted or pts - since < self.min_seconds:
            return None, pts
        return self._settle(state, side), since

    def _settle(self, state: _TrackState, side: int) -> Direction | None:
        """The track is now on ``side``: the direction, if its path crossed the segment."""
        state.side, state.pending_since, state.detected_across = side, None, False
        on_segment = state.crossed_at is not None and 0.0 <= state.crossed_at <= 1.0
        return ("in" if side == IN_SIDE else "out") if on_segment else None

    def forget(self, live_track_ids: frozenset[int], label_of: Callable[[int], str]) -> list[Event]:
        """Drop the state of tracks the tracker no longer holds; count their pending crossings
        that the track's last detection saw beyond the band on the new side (coming back
        into the band or to its side clears a pending crossing)."""
        events = []
        for track_id in [t for t in self._tracks if t not in live_track_ids]:
            state = self._tracks.pop(track_id)
            since = state.pending_since
            if since is not None and state.detected_across:
                direction = self._settle(state, -state.side)
                if direction is not None:
                    events.extend(self._count(track_id, state, direction, since, label_of))
        return events
