"""Counting lines, zones and events on top of per-stream tracking.

- :class:`StreamAnalytics`: one per stream; tracker, lines and zones, fed
  frame by frame, returning track ids, events and counts (:class:`AnalyticsUpdate`);
  :mod:`~vstream.analytics.placing` places several streams' tracks against their
  shared lines and zones in one pass, as the pipeline does with a batch;
- :class:`Event`: ``line_crossing``, ``zone_enter``, ``zone_exit``, ``loitering``;
- :class:`AnalyticsConfig`, :class:`LineConfig`, :class:`ZoneConfig`,
  :class:`TrackingConfig`, :class:`Anchor`, :func:`parse_line_spec` and
  :func:`parse_zone_spec`: the options.

Which way is ``in``: see :class:`LineConfig` (from the left of the line to
its right, looking from ``start`` to ``end``).

Everything here is numpy, scipy and pydantic: importing it loads no model stack.
"""

from vstream.lazy import lazy_exports

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
    "parse_zone_spec",
]

# Lazy: configs read the options; only a running pipeline needs the tracker (scipy).
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AnalyticsConfig": "vstream.config.analytics",
        "Anchor": "vstream.config.analytics",
        "LineConfig": "vstream.config.analytics",
        "TrackingConfig": "vstream.config.analytics",
        "ZoneConfig": "vstream.config.analytics",
        "parse_line_spec": "vstream.config.analytics",
        "parse_zone_spec": "vstream.config.analytics",
        "Event": "vstream.analytics.events",
        "AnalyticsUpdate": "vstream.analytics.stream",
        "StreamAnalytics": "vstream.analytics.stream",
    },
)
