"""Multi-object tracking on host-side detections: boxes in, track ids out.

Tracking runs after the detections have crossed to the host; boxes are a few
numbers each, so nothing else leaves the device. One tracker per stream.
Everything here is numpy and scipy: importing it loads no model stack.

- :class:`Tracker`: the interface (``update``, ``track_classes``,
  ``live_track_ids``, ``reset``);
- :class:`ByteTracker`: the ByteTrack-style implementation, configured by
  :class:`TrackingConfig`.
"""

from vstream.tracking.base import NO_TRACK, Tracker, iou_matrix
from vstream.tracking.bytetrack import ByteTracker
from vstream.tracking.config import TrackingConfig

__all__ = ["NO_TRACK", "ByteTracker", "Tracker", "TrackingConfig", "iou_matrix"]
