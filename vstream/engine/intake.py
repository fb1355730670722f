"""Where a pipeline's readers hand frames to its inference loop.

Each stream has its own small bounded queue; the inference loop takes frames
round-robin across streams, so a fast file cannot starve a camera, and a
reader whose queue is full waits (backpressure) without holding up the others.
Frames of one stream come out in the order they went in.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from vstream.frame import Frame


@dataclass(frozen=True)
class Arrival:
    """A frame and the wall-clock time it reached the pipeline."""

    frame: Frame
    received_at: float

    @property
    def captured_at(self) -> float:
        """When the frame was captured, if the source says; otherwise when it arrived."""
        return self.frame.capture_time or self.received_at


class Intake:
    """Per-stream bounded queues behind one condition variable."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Arrival]] = {}
        self._capacity: dict[str, int] = {}
        self._next = 0

    def register(self, stream_id: str, capacity: int) -> None:
        with self._cond:
            self._queues[stream_id] = deque()
            self._capacity[stream_id] = capacity

    def unregister(self, stream_id: str) -> int:
        """Forget a stream; return how many of its frames were still queued."""
        with self._cond:
            left = len(self._queues.pop(stream_id, ()))
            self._capacity.pop(stream_id, None)
            self._cond.notify_all()
            return left

    def put(self, stream_id: str, frame: Frame, stop: threading.Event) -> bool:
        """Queue ``frame``, waiting while the stream's queue is full; False once ``stop`` is set."""
        with self._cond:
            while True:
                queue = self._queues.get(stream_id)
                if queue is None or stop.is_set():
                    return False
                if len(queue) < self._capacity[stream_id]:
                    queue.append(Arrival(frame, time.time()))
                    self._cond.notify_all()
                    return True
                self._cond.wait(0.5)

    def take(self, limit: int, timeout: float) -> list[Arrival]:
        """Up to ``limit`` frames, round-robin over streams; waits up to ``timeout`` for one."""
        with self._cond:
            if not self._cond.wait_for(self._has_frames, timeout):
                return []
            batch: list[Arrival] = []
            ids = list(self._queues)
            start = self._next % len(ids)
            order = ids[start:] + ids[:start]
            while len(batch) < limit and self._has_frames():
                for stream_id in order:
                    queue = self._queues[stream_id]
                    if queue and len(batch) < limit:
                        batch.append(queue.popleft())
            self._next = start + 1
            self._cond.notify_all()
            return batch

    def _has_frames(self) -> bool:
        return any(self._queues.values())

    def queued(self, stream_id: str | None = None) -> int:
        """Frames waiting, for one stream or all."""
        with self._cond:
            if stream_id is not None:
                return len(self._queues.get(stream_id, ()))
            return sum(len(q) for q in self._queues.values())

    def wake(self) -> None:
        """Wake every waiting reader, e.g. so it sees its stop flag."""
        with self._cond:
            self._cond.notify_all()

    def wait_drained(self, stream_id: str, timeout: float) -> bool:
        """Wait until the inference loop has taken every queued frame of ``stream_id``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queues.get(stream_id), timeout)
