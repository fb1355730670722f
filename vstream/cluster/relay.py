"""Where a worker's records wait for the driver: the one sink of a worker's pipelines.

The driver pulls: it keeps one :meth:`Relay.take` call in flight per worker
and asks for the next only once it has handed the last batch to its sinks.
The relay is bounded, so when the driver (or a sink behind it) is slower
than the workers, :meth:`Relay.write` waits, the worker's stages wait, and
its readers wait (files) or drop frames by their freshness policy (live,
counted): memory stays bounded on both sides, and nothing is lost silently.

Records of one stream enter in the order the pipeline delivers them, which
is the stream's frame order, and leave in that order.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from vstream.results import FrameResult
from vstream.sinks.buffered import SinkStats


@dataclass(frozen=True)
class Taken:
    """What one :meth:`Relay.take` returns, read in one step under the relay's lock."""

    records: list[FrameResult]
    received: dict[str, int]
    """Records of each stream that ever entered the relay, counted when these were taken."""
    waiting: frozenset[str]
    """Streams with records still in the relay after this take."""
    ended: bool
    """The relay is closed and empty: the worker's pipelines have finished."""


class Relay:
    """A bounded, closable queue of records between a worker's pipelines and the driver."""

    name = "relay"
    label = "the relay to the driver"
    error = None

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"relay capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.stats = SinkStats()
        self._cond = threading.Condition()
        self._records: deque[FrameResult] = deque()
        self._received: Counter[str] = Counter()
        self._queued: Counter[str] = Counter()
        self._closed = False

    @property
    def buffered(self) -> int:
        return len(self._records)

    def write(self, results: Sequence[FrameResult]) -> None:
        """Queue ``results`` in order, waiting while the relay is full (backpressure)."""
        with self._cond:
            for result in results:
                self.stats.produced += 1
                while len(self._records) >= self.capacity and not self._closed:
                    self._cond.notify_all()  # a taker waiting for records must see these first
                    self._cond.wait()
                if self._closed:  # the pipeline outlived its finish: nobody takes these
                    self.stats.dropped += 1
                    continue
                self._records.append(result)
                self._received[result.stream_id] += 1
                self._queued[result.stream_id] += 1
                self.stats.delivered += 1
            self._cond.notify_all()

    def take(self, limit: int, wait: float) -> Taken:
        """Up to ``limit`` records, oldest first; waits up to ``wait`` seconds for the first."""
        with self._cond:
            self._cond.wait_for(lambda: self._records or self._closed, wait)
            count = min(limit, len(self._records))
            records = [self._records.popleft() for _ in range(count)]
            self._queued.subtract(r.stream_id for r in records)
            self._cond.notify_all()
            return Taken(
                records=records,
                received=dict(self._received),
                waiting=frozenset(stream for stream, n in self._queued.items() if n > 0),
                ended=self._closed and not self._records,
            )

    def start_flush(self) -> None:
        """Nothing to flush: the driver takes what is left after :meth:`close`."""

    def close(self) -> None:
        """No more records will come; those queued stay until the driver takes them."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
