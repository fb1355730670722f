"""Event clips and snapshots: a ring of compressed packets per stream, remuxed on events.

Importing this package loads neither PyAV nor torch; they load when a ring
opens a stream or a clip is written.
"""

from vstream.clips.index import ClipIndex, ClipInfo, Retention
from vstream.clips.recorder import ClipRecorder, ClipStats
from vstream.clips.ring import Capture, PacketRing, StoredPacket, Template

__all__ = [
    "Capture",
    "ClipIndex",
    "ClipInfo",
    "ClipRecorder",
    "ClipStats",
    "PacketRing",
    "Retention",
    "StoredPacket",
    "Template",
]
