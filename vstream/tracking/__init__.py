"""Multi-object tracking on host-side detections: boxes in, track ids out.

Tracking runs after the detections have crossed to the host; boxes are a few
numbers each, so nothing else leaves the device. One tracker per stream.
Everything here is numpy and scipy: importing it loads no model stack.

- :class:`Tracker`: the interface (``update``, ``track_classes``,
  ``live_track_ids``, ``reset``);
- :class:`ByteTracker`: the ByteTrack-style implementation, configured by
  :class:`TrackingConfig`; :func:`update_together` steps several streams' trackers
  in one pass (:mod:`~vstream.tracking.stacked`), each getting what it would alone;
- :mod:`~vstream.tracking.appearance`: an embedding's cosine distance blended into the
  IoU cost, and each track's smoothed vector (:class:`AppearanceBank`).
"""

from vstream.lazy import lazy_exports

__all__ = [
    "NO_TRACK",
    "AppearanceBank",
    "ByteTracker",
    "Tracker",
    "TrackingConfig",
    "iou_matrix",
    "update_together",
]

# Lazy: the tracker needs scipy; its options live in vstream.config.tracking.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "NO_TRACK": "vstream.results",
        "AppearanceBank": "vstream.tracking.appearance",
        "Tracker": "vstream.tracking.base",
        "iou_matrix": "vstream.tracking.base",
        "ByteTracker": "vstream.tracking.bytetrack",
        "update_together": "vstream.tracking.bytetrack",
        "TrackingConfig": "vstream.config.tracking",
    },
)
