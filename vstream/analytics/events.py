"""Events: what happened to a tracked object on a line or in a zone, as frame records carry them.

Four types, all with ``track_id``, ``class_id``, ``label`` and ``pts`` (stream
seconds):

- ``line_crossing``: ``line``, ``direction`` (``in`` or ``out``). ``pts`` is
  when the object was first seen beyond the dead band on the new side; the
  event comes ``min_seconds_on_side`` later, once the crossing is certain, or,
  when the track ends sooner (the object left the frame), when the tracker
  forgets the track (:mod:`vstream.analytics.lines`).
- ``zone_enter``: ``zone``; ``pts`` as for crossings.
- ``zone_exit``: ``zone``, ``dwell_seconds`` (from entry to exit). When the
  object's track ends inside the zone (it left the frame or was lost for good)
  the exit is emitted when the tracker forgets the track, at the ``pts`` it
  was last seen.
- ``loitering``: ``zone``, ``dwell_seconds`` so far; once per visit.

With a cascade (:mod:`vstream.cascade`), every event also carries the object's
``attributes``: each secondary classifier's last reading of the track, by
model name (``{"colour": "red"}``; a multi-label model gives a list).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

EventType = Literal["line_crossing", "zone_enter", "zone_exit", "loitering"]
Direction = Literal["in", "out"]

Reading = str | tuple[str, ...]
"""One classifier's reading of a track: its label (a tuple of labels for a multi-label model)."""

TrackAttributes = Mapping[str, Reading]
"""A track's readings by secondary model name: ``{"colour": "red"}``."""

AttributesOf = Callable[[int], TrackAttributes]
"""The readings of a track id so far (empty when none): what lines and zones filter on."""

NO_ATTRIBUTES: TrackAttributes = MappingProxyType({})
"""No readings (read-only, so that it can be every default)."""


def attributes_match(wanted: Mapping[str, list[str]] | None, attributes: TrackAttributes) -> bool:
    """Whether ``attributes`` pass a line's or zone's ``attributes`` filter: for every
    attribute listed, the track was read as one of its labels (an unread track fails)."""
    if not wanted:
        return True
    for name, labels in wanted.items():
        reading = attributes.get(name)
        read = (reading,) if isinstance(reading, str) else reading or ()
        if not any(label in labels for label in read):
            return False
    return True


@dataclass(frozen=True)
class Event:
    """One event; fields that do not apply to its type are None and left out of the record."""

    type: EventType
    track_id: int
    class_id: int
    label: str
    pts: float
    line: str | None = None
    direction: Direction | None = None
    zone: str | None = None
    dwell_seconds: float | None = None
    attributes: TrackAttributes = field(default_factory=lambda: NO_ATTRIBUTES, hash=False)

    def to_record(self) -> dict[str, Any]:
        """The JSON form, e.g. ``{"type": "line_crossing", "line": "gate", "direction": "in",
        "track_id": 7, "class_id": 0, "label": "person", "pts": 12.4}``."""
        record: dict[str, Any] = {"type": self.type}
        if self.line is not None:
            record["line"] = self.line
            record["direction"] = self.direction
        if self.zone is not None:
            record["zone"] = self.zone
        record.update(
            track_id=self.track_id, class_id=self.class_id, label=self.label, pts=round(self.pts, 6)
        )
        if self.dwell_seconds is not None:
            record["dwell_seconds"] = round(self.dwell_seconds, 6)
        if self.attributes:
            record["attributes"] = {
                name: reading if isinstance(reading, str) else list(reading)
                for name, reading in self.attributes.items()
            }
        return record
