"""How far behind its camera a live stream is being read.

A camera sends a picture every frame period whether or not it is read. When
decoding is slower than the camera (many cameras on a small CPU), the packets
wait in the socket and in FFmpeg's buffers, and each is read later than the
last: the stream falls behind by seconds while every packet, once read, looks
fresh. The stream's own clock shows it. A packet's read time minus its time
stamp is constant while the stream keeps up (up to network jitter), and grows
by what it falls behind; the smallest value over the last
:data:`WINDOW_SECONDS` is the stream's offset when it kept up, so the backlog
of a packet is how far its value lies above that.

The window forgets the past on purpose: a camera's clock drifts against
ours (100 ppm is 6 ms a minute), and a stream that stopped keeping up more
than a window ago shows a backlog of what it lost within the window, at
least. A time stamp going back by more than :data:`STEP_BACK_SECONDS` is the
camera's clock restarting, not a delay: the window starts again.
"""

from __future__ import annotations

from collections import deque

WINDOW_SECONDS = 60.0
"""How long the offset of a stream keeping up is remembered."""

STEP_BACK_SECONDS = 1.0
"""A time stamp this far before the latest is a restarted clock, not a packet read late."""

WARN_SECONDS = 1.0
"""Behind by this much, for :data:`WARN_AFTER_SECONDS` of reading: the log says so."""

WARN_AFTER_SECONDS = 3.0
"""How long a backlog lasts before it is told: a camera that sends the pictures it holds
when a client connects (a burst, caught up within a second) is not falling behind."""


class Backlog:
    """The backlog of a live stream's packets, one connection's worth (the module's docstring).

    :meth:`behind` takes each picture's packet read time (``time.time()``) and time stamp
    (seconds, the stream's clock), in the order the pictures come.
    """

    def __init__(self, window_seconds: float = WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._offsets: deque[tuple[float, float]] = deque()
        """``(read time, read time - time stamp)`` with offsets rising from the front: the
        front is the smallest offset within the window."""
        self._latest_pts = -float("inf")
        self._latest_read = -float("inf")
        """The latest read time seen (B-frames come out of the decoder in another order)."""

    def behind(self, read_time: float, pts_seconds: float) -> float:
        """Seconds this packet was read later than the stream's pace allows (0 when in step)."""
        if pts_seconds < self._latest_pts - STEP_BACK_SECONDS:
            self._offsets.clear()  # the camera's clock started again
            self._latest_pts = pts_seconds
        else:
            self._latest_pts = max(self._latest_pts, pts_seconds)
        self._latest_read = max(self._latest_read, read_time)
        offset = read_time - pts_seconds
        offsets = self._offsets
        while offsets and offsets[-1][1] >= offset:
            offsets.pop()
        offsets.append((read_time, offset))
        while offsets[0][0] < self._latest_read - self.window_seconds and len(offsets) > 1:
            offsets.popleft()
        return offset - offsets[0][1]
