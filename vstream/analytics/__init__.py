"""Counting lines, zones and events on top of per-stream tracking.

- :class:`StreamAnalytics`: one per stream; tracker, lines and zones, fed
  frame by frame, returning track ids, events and counts (:class:`AnalyticsUpdate`);
- :class:`Event`: ``line_crossing``, ``zone_enter``, ``zone_exit``, ``loitering``;
- :class:`AnalyticsConfig`, :class:`LineConfig`, :class:`ZoneConfig`,
  :class:`TrackingConfig`, :class:`Anchor` and :func:`parse_line_spec`: the options.

Which way is ``in``: see :class:`LineConfig` (from the left of the line to
its right, looking from ``start`` to ``end``).

Everything here is numpy, scipy and pydantic: importing it loads no model stack.
"""

from vstream.analytics.config import (
    AnalyticsConfig,
    Anchor,
    LineConfig,
    TrackingConfig,
    ZoneConfig,
    parse_line_spec,
)
from vstream.analytics.events import Event
from vstream.analytics.stream import AnalyticsUpdate, StreamAnalytics

__all__ = [
    "AnalyticsConfig",
    "AnalyticsUpdate",
    "Anchor",
    "Event",
    "LineConfig",
    "StreamAnalytics",
    "TrackingConfig",
    "ZoneConfig",
    "parse_line_spec",
]
