"""Where a pipeline's readers hand frames to its stages: one small queue per stream.

The preprocessing stage takes frames round-robin across streams, so a fast
file cannot starve a camera. Each stream's queue applies its freshness
policy when it is full: ``block`` makes the reader wait (files: nothing is
lost), ``latest`` drops the oldest queued frame and counts it (live: results
never lag). This is the only place a frame waits between its decoder and the
model, so a live stream's lag is bounded by its ``queue_size`` plus the two
batches the stages hold (one being gathered, one waiting for the model; see
:mod:`vstream.engine.stages`). Frames of one stream come out in the order
they went in.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from vstream.config.sources import FreshnessPolicy
from vstream.frame import Frame


@dataclass(frozen=True)
class Arrival:
    """A frame, the stream (reader) it came through, and when it reached the pipeline."""

    frame: Frame
    stream: str
    received_at: float
    detect: bool = True
    """Whether the detector sees this frame; the tracker predicts the others
    (decided as the batch is gathered: :mod:`vstream.engine.cadence`)."""
    still: bool = False
    """Not detected because the picture has not changed since the last detection."""
    lane: Lane | None = None
    """The lane it came through: which reader of ``stream`` (None: built outside an intake)."""

    @property
    def captured_at(self) -> float:
        """When the frame was captured, if the source says; otherwise when it arrived."""
        return self.frame.capture_time or self.received_at


@dataclass(eq=False)
class Lane:
    """One stream's queue, the handle its reader puts through: a stream removed and added
    again under the same id gets a new lane, which the old reader's frames never reach."""

    stream: str
    capacity: int
    policy: FreshnessPolicy
    frames: deque[Arrival]
    room: threading.Condition
    """Where this stream's reader waits for room (``block``); woken only for this lane."""
    dropped: int = 0
    """Frames the ``latest`` policy dropped (final once the lane is out: no more puts)."""
    taken: int = 0
    """Frames the stages took, which they must account for."""


class Intake:
    """Per-stream bounded queues behind one lock; every drop counted.

    Wake-ups are per lane: a frame put wakes the one taker (the
    preprocessing stage), and frames taken from a lane wake that lane's
    reader alone, so 64 streams cost what one does (one condition for all
    woke every reader at every put and take).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        """Where the taker waits for a frame."""
        self._lanes: dict[str, Lane] = {}
        self._queued = 0
        """Frames in every lane together."""
        self._next = 0

    def register(self, stream_id: str, capacity: int, policy: FreshnessPolicy) -> Lane:
        """A new lane for ``stream_id``; ValueError while another has it (its owner must
        :meth:`unregister` it first: two readers of one id would mix their frames)."""
        with self._lock:
            if stream_id in self._lanes:
                raise ValueError(f"stream {stream_id!r} is in the intake already")
            room = threading.Condition(self._lock)
            lane = Lane(stream_id, capacity, FreshnessPolicy(policy), deque(), room)
            self._lanes[stream_id] = lane
            return lane

    def unregister(self, lane: Lane) -> int:
        """Take ``lane`` out; return how many of its frames were still queued (0 once out)."""
        with self._lock:
            if self._lanes.get(lane.stream) is not lane:
                return 0
            del self._lanes[lane.stream]
            queued = len(lane.frames)
            lane.frames.clear()
            self._queued -= queued
            lane.room.notify_all()  # its reader sees the stream is gone
            return queued

    def put(self, lane: Lane, frame: Frame, stop: threading.Event) -> bool:
        """Queue ``frame`` by the lane's policy; False once ``stop`` is set or it is out."""
        with self._lock:
            while True:
                if self._lanes.get(lane.stream) is not lane or stop.is_set():
                    return False
                if len(lane.frames) < lane.capacity:
                    break
                if lane.policy is FreshnessPolicy.LATEST:
                    lane.frames.popleft()
                    lane.dropped += 1
                    self._queued -= 1
                    break
                lane.room.wait(0.5)
            lane.frames.append(Arrival(frame, lane.stream, time.time(), lane=lane))
            self._queued += 1
            self._arrived.notify()
            return True

    def take(self, limit: int, timeout: float) -> list[Arrival]:
        """Up to ``limit`` frames, round-robin over streams; waits up to ``timeout`` for one."""
        with self._lock:
            if not self._arrived.wait_for(self._has_frames, timeout):
                return []
            batch: list[Arrival] = []
            lanes = list(self._lanes.values())
            start = self._next % len(lanes)
            order = lanes[start:] + lanes[:start]
            emptied: set[int] = set()
            while len(batch) < limit:
                before = len(batch)
                for lane in order:
                    if lane.frames and len(batch) < limit:
                        batch.append(lane.frames.popleft())
                        lane.taken += 1
                        emptied.add(id(lane))
                if len(batch) == before:  # every lane empty
                    break
            self._queued -= len(batch)
            self._next = start + 1
            for lane in order:
                if id(lane) in emptied:
                    lane.room.notify()
            return batch

    def _has_frames(self) -> bool:
        return self._queued > 0

    def queued(self, lane: Lane | None = None) -> int:
        """Frames waiting, in one lane (none once it is out) or in all."""
        with self._lock:
            return len(lane.frames) if lane is not None else self._queued

    def wake(self) -> None:
        """Wake every waiting reader and the taker, e.g. so that they see a stop flag."""
        with self._lock:
            for lane in self._lanes.values():
                lane.room.notify_all()
            self._arrived.notify_all()
