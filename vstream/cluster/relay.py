"""Where a worker's records wait for the driver: the one sink of a worker's pipelines.

The driver pulls: it keeps one :meth:`Relay.take` call in flight per worker
and asks for the next only once it has handed the last batch to its sinks.
The relay is bounded, so when the driver (or a sink behind it) is slower
than the workers, :meth:`Relay.write` waits, the worker's stages wait, and
its readers wait (files) or drop frames by their freshness policy (live,
counted): memory stays bounded on both sides, and nothing is lost silently.

Records of one stream enter in the order the pipeline delivers them, which
is the stream's frame order, and leave in that order.

A pipeline's write is one batch, and leaves whole: with it go, for each
stream in it, its tracks, counts and readings as they stood after its last
record there (:mod:`vstream.engine.carry`), so that whatever the driver has
delivered, it holds the state that goes with it.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    states: dict[str, bytes] = field(default_factory=dict)
    """Per stream among the records: its state right after its last record here."""


StateOf = Callable[[str], bytes | None]
"""A stream's state (:mod:`vstream.engine.carry`) as it stands now; None: it has none."""


@dataclass
class _Entry:
    record: FrameResult
    write: int
    """Which write brought it: a take never splits one."""
    state: bytes | None = None
    """On a stream's last record of its write: the stream's state after it."""


class Relay:
    """A bounded, closable queue of records between a worker's pipelines and the driver."""

    name = "relay"
    label = "the relay to the driver"
    error = None

    def __init__(self, capacity: int, state_of: StateOf | None = None) -> None:
        """``capacity``: records held at most (a write larger than that waits for an empty
        relay); ``state_of``: each stream's state, read when its records are written."""
        if capacity < 1:
            raise ValueError(f"relay capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.stats = SinkStats()
        self._state_of = state_of
        self._writes = 0
        self._cond = threading.Condition()
        self._records: deque[_Entry] = deque()
        self._received: Counter[str] = Counter()
        self._queued: Counter[str] = Counter()
        self._closed = False

    @property
    def buffered(self) -> int:
        return len(self._records)

    def write(self, results: Sequence[FrameResult]) -> None:
        """Queue ``results`` in order, as one write, waiting until they fit (backpressure).

        Called by a pipeline's postprocessing thread right after it analysed
        these records, so each stream's state is read as it stands after its
        last one.
        """
        last = {result.stream_id: i for i, result in enumerate(results)}
        states = {}
        if self._state_of is not None:
            states = {last[stream]: self._state_of(stream) for stream in last}
        with self._cond:
            self.stats.produced += len(results)
            while (
                self._records
                and len(self._records) + len(results) > self.capacity
                and not self._closed
            ):
                self._cond.notify_all()  # a taker waiting for records must see these first
                self._cond.wait()
            if self._closed:  # the pipeline outlived its finish: nobody takes these
                self.stats.dropped += len(results)
                return
            self._writes += 1
            for i, result in enumerate(results):
                self._records.append(_Entry(result, self._writes, states.get(i)))
                self._received[result.stream_id] += 1
                self._queued[result.stream_id] += 1
            self.stats.delivered += len(results)
            self._cond.notify_all()

    def take(self, limit: int, wait: float) -> Taken:
        """About ``limit`` records, oldest first, and whole writes (the last one taken is
        finished); waits up to ``wait`` seconds for the first."""
        with self._cond:
            self._cond.wait_for(lambda: self._records or self._closed, wait)
            taken: list[_Entry] = []
            queue = self._records
            while queue and (len(taken) < limit or (taken and queue[0].write == taken[-1].write)):
                taken.append(queue.popleft())
            self._queued.subtract(e.record.stream_id for e in taken)
            self._cond.notify_all()
            return Taken(
                records=[e.record for e in taken],
                received=dict(self._received),
                waiting=frozenset(stream for stream, n in self._queued.items() if n > 0),
                ended=self._closed and not self._records,
                states={e.record.stream_id: e.state for e in taken if e.state is not None},
            )

    def start_flush(self) -> None:
        """Nothing to flush: the driver takes what is left after :meth:`close`."""

    def close(self) -> None:
        """No more records will come; those queued stay until the driver takes them."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
