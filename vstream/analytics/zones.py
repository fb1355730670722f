"""Zones: entries, exits with dwell time, occupancy and loitering, with hysteresis.

A track's anchor is inside or outside a zone only when it is farther than
the dead band from the zone's border; near the border it keeps its previous
state. A change (entry or exit) happens once the anchor has stayed clear of
the border on the new side for ``min_seconds_on_side``: an object flickering
on the border produces no enter/exit storm, at any frame rate.

A track first seen inside a zone enters it (after the same wait); one first
seen outside is simply outside. When the tracker forgets a track that is
inside (it left the frame, or was lost for longer than the track buffer), the
zone emits its exit at the time the object was last seen. So occupancy is
always entries minus exits, and a briefly hidden object is still inside.

The tracker's predicted boxes (``detect_every``: frames the detector does not
see) may start or end the wait, as lines' do (:mod:`~vstream.analytics.lines`),
but only a detection settles an entry or exit: a prediction carries an object
on at its last velocity, into a zone it stopped short of. Seen means detected:
the time an object was last seen, and the dwell that loitering is judged by,
come from detections, so a track hidden (lost, not yet forgotten) does not go
on loitering.

A zone drawn along the frame's edge (or past it) has no border there: an
object the frame cuts off has its box, and so its anchor, clipped onto that
edge, never clear of it, and would never be counted. With the frame size known
(:meth:`ZoneMonitor.set_frame_size`) the zone's edges with no part strictly
inside the frame are left out of the border, and a point on the frame's far
edge (``x == width``, ``y == height``) is taken just inside the frame, as one
on its near edge is by the inside test. A truck parked in a dock drawn on the
bottom of the picture, its rear cut off, is inside.

The class filter is applied on entry, with the track's majority class then: a
track that entered is followed to its exit even if its class changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from vstream.analytics.events import (
    NO_ATTRIBUTES,
    AttributesOf,
    Event,
    EventType,
    TrackAttributes,
    attributes_match,
)
from vstream.analytics.geometry import Polygon
from vstream.config.analytics import ZoneConfig
from vstream.masks import Mask, mask_overlap

INSIDE, OUTSIDE, UNKNOWN = 1, -1, 0


@dataclass(slots=True)
class _TrackState:
    """What one zone remembers about one track."""

    state: int = UNKNOWN
    pending_since: float | None = None
    entered_at: float = 0.0
    loitered: bool = False
    last_seen: float = 0.0
    """pts of its last detection."""
    class_id: int = -1
    attributes: TrackAttributes = field(default_factory=lambda: NO_ATTRIBUTES)
    """The track's last secondary readings (kept here: the cascade forgets them with the track)."""


class ZoneMonitor:
    """One zone: per-track membership, events and occupancy."""

    def __init__(self, config: ZoneConfig, dead_band: float, min_seconds: float) -> None:
        self.config = config
        self.polygon = Polygon(list(config.points))
        self.dead_band = dead_band
        self.min_seconds = min_seconds
        self._classes = frozenset(config.classes) if config.classes is not None else None
        self._frame_size: tuple[int, int] | None = None
        self._border: np.ndarray | None = None
        """``(E,)`` bool: the edges that are border at the frame size set; None: all of them."""
        self._tracks: dict[int, _TrackState] = {}
        self.occupancy = 0
        """Tracks inside now: entries minus exits."""
        self.entries = 0
        """Entries so far."""

    @property
    def num_track_states(self) -> int:
        return len(self._tracks)

    def place(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether each of ``(N, 2)`` points is inside, and whether it is clear of the border
        (farther than the dead band): what :meth:`observe` steps the tracks by
        (:mod:`~vstream.analytics.placing`)."""
        return self.polygon.contains(points), self.polygon.border_distance(points) > self.dead_band

    def set_frame_size(self, width: int, height: int) -> None:
        """Leave the edges along or past the frame's edge out of the border (module doc)."""
        if self._frame_size == (width, height):
            return
        self._frame_size = (width, height)
        off = self.polygon.edges_off_frame(width, height)
        self._border = ~off if off.any() else None

    def in_frame(
        self, points: np.ndarray, inside: np.ndarray, clear: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``inside`` and ``clear`` of ``(N, 2)`` ``points`` (:meth:`place`, which knows no
        frame: the placement of several streams' frames) at the frame size set: the same
        where the zone does not reach the frame's edge, the usual case."""
        border, size = self._border, self._frame_size
        if border is None or size is None or not len(points):
            return inside, clear
        inside, clear = inside.copy(), clear.copy()  # the placement's are shared
        edge = np.asarray(size, dtype=np.float64)
        on_edge = points == edge  # on the frame's far edge: a box it cuts off
        far = on_edge.any(axis=1)
        if far.any():
            just_inside = np.where(on_edge[far], np.nextafter(edge, 0.0), points[far])
            inside[far] = self.polygon.contains(just_inside)
        near = ~clear  # leaving edges out of the border only takes points farther from it
        if near.any():
            clear[near] = self.polygon.border_distance(points[near], border) > self.dead_band
        return inside, clear

    def observe(
        self,
        track_ids: np.ndarray,
        inside: np.ndarray,
        clear: np.ndarray,
        class_ids: np.ndarray,
        pts: float,
        label_of: Callable[[int], str],
        attributes_of: AttributesOf | None = None,
        masks: Sequence[Mask | None] | None = None,
        *,
        predicted: bool = False,
    ) -> list[Event]:
        """Step this frame's confirmed tracks by where their anchors are (``inside`` and
        ``clear``, :meth:`place`); return entries, exits and loitering.

        ``attributes_of`` gives a track's secondary readings so far (a cascade), which the
        zone's ``attributes`` filter and its events use. ``masks`` (one per track, or None)
        place the tracks that have one where the zone counts by mask: inside when at least
        ``min_overlap`` of the mask is, with no dead band (the side must still be held
        ``min_seconds``). ``predicted``: the tracker's boxes, on a frame the detector did not
        see, which settle nothing (module doc)."""
        if self.config.count_by == "mask" and masks is not None:
            inside, clear = inside.copy(), clear.copy()  # the placement's are shared
            for i, mask in enumerate(masks):
                if mask is not None:
                    inside[i] = mask_overlap(mask, self.polygon) >= self.config.min_overlap
                    clear[i] = True
        events = []
        for track_id, is_inside, is_clear, class_id in zip(
            track_ids.tolist(), inside.tolist(), clear.tolist(), class_ids.tolist(), strict=True
        ):
            state = self._tracks.get(track_id)
            if state is None:
                state = self._tracks[track_id] = _TrackState()
            if not predicted:
                state.last_seen = pts
            if state.state != INSIDE:
                state.class_id = class_id
            if attributes_of is not None:
                state.attributes = attributes_of(track_id) or state.attributes
            if not is_clear:
                state.pending_since = None  # on the border: the new side must be held anew
            else:
                change = self._step(state, INSIDE if is_inside else OUTSIDE, pts, predicted)
                if change is not None:
                    events.append(self._event(change[0], track_id, state, change[1], label_of))
        if not predicted:
            events.extend(self._loitering(pts, label_of))
        return events

    def _step(
        self, state: _TrackState, side: int, pts: float, predicted: bool
    ) -> tuple[EventType, float] | None:
        """Advance one track that is clear of the border (``predicted``: by the tracker's box,
        not the detector's); an entry or exit returns (type, pts)."""
        if side == state.state:
            state.pending_since = None
            return None
        if state.state == UNKNOWN and side == OUTSIDE:
            state.state = OUTSIDE
            return None
        if state.pending_since is None:
            state.pending_since = pts
        since = state.pending_since
        if predicted or pts - since < self.min_seconds:
            return None
        state.pending_since = None
        if side == OUTSIDE:
            state.state = OUTSIDE
            self.occupancy -= 1
            return "zone_exit", since
        watched = self._classes is None or state.class_id in self._classes
        if not watched or not attributes_match(self.config.attributes, state.attributes):
            state.state = OUTSIDE  # not watched: followed as outside, never counted
            return None
        state.state, state.entered_at, state.loitered = INSIDE, since, False
        self.occupancy += 1
        self.entries += 1
        return "zone_enter", since

    def _event(
        self,
        kind: EventType,
        track_id: int,
        state: _TrackState,
        pts: float,
        label_of: Callable[[int], str],
    ) -> Event:
        dwell = None if kind == "zone_enter" else pts - state.entered_at
        return Event(
            kind,
            track_id,
            state.class_id,
            label_of(state.class_id),
            pts,
            zone=self.config.name,
            dwell_seconds=dwell,
            attributes=state.attributes,
        )

    def _loitering(self, pts: float, label_of: Callable[[int], str]) -> list[Event]:
        limit = self.config.loiter_seconds
        if limit is None:
            return []
        events = []
        for track_id, state in self._tracks.items():
            if state.last_seen != pts:  # not detected in this frame: hidden, or gone
                continue
            if state.state == INSIDE and not state.loitered and pts - state.entered_at >= limit:
                state.loitered = True
                events.append(self._event("loitering", track_id, state, pts, label_of))
        return events

    def forget(self, live_track_ids: frozenset[int], label_of: Callable[[int], str]) -> list[Event]:
        """Drop tracks the tracker no longer holds; one inside exits when it was last seen."""
        events = []
        for track_id in [t for t in self._tracks if t not in live_track_ids]:
            state = self._tracks.pop(track_id)
            if state.state == INSIDE:
                self.occupancy -= 1
                events.append(self._event("zone_exit", track_id, state, state.last_seen, label_of))
        return events
