"""The delivery thread: accepted records to the sinks, and their events to the metrics.

The records come tracked and counted by their workers. This thread writes
them outside the engine's lock, from a bounded queue, so a sink that blocks
holds back only the pulls (at most :data:`DELIVERY_DEPTH` batches of a
worker wait), never loss detection, placement or the API.
"""

from __future__ import annotations

import queue
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from vstream.cluster.roster import Roster
from vstream.cluster.slots import WorkerSlot
from vstream.cluster.stream import ClusterStream
from vstream.config.pipelines import PipelineConfig, VstreamConfig
from vstream.config.sinks import FRAME_SINK_TYPES
from vstream.metrics import Metrics
from vstream.results import FrameResult

DELIVERY_DEPTH = 2
"""Batches of one worker accepted and not yet in the sinks, at most: one being written, one
taken meanwhile. Past it no pull is asked of that worker, so a slow sink slows it down."""

_POLL_SECONDS = 0.2
"""How long the thread waits for a batch before it looks for a halt again."""


@dataclass(frozen=True)
class Delivery:
    """One pull's records, accepted for the sinks in order, and its streams' states after them."""

    slot: WorkerSlot
    records: list[tuple[ClusterStream, FrameResult]]
    statuses: dict[str, dict[str, Any]]


def build_sinks(config: VstreamConfig, sinks: dict[str, list[Any]]) -> None:
    """Each pipeline's record sinks into ``sinks``, one pipeline at a time, so that those built
    before a failure are there to close. Frame sinks are left out: the frames stay on the
    workers."""
    from vstream.sinks.factory import build_sink

    for pipeline in config.pipelines:
        sinks[pipeline.name] = [
            build_sink(sink, pipeline.name)
            for sink in pipeline.sinks
            if sink.type not in FRAME_SINK_TYPES
        ]


class Deliverer:
    """The queue of accepted batches, the thread that writes them, and how far it has got."""

    def __init__(
        self,
        *,
        roster: Roster,
        sinks: dict[str, list[Any]],
        pipelines: dict[str, PipelineConfig],
        metrics: Metrics,
        lock: threading.RLock,
        halt: threading.Event,
        slots: int,
    ) -> None:
        """``slots``: the workers that may ever be started, replacements included; each has at
        most :data:`DELIVERY_DEPTH` batches queued, so :meth:`submit` never blocks."""
        self.roster = roster
        self.sinks = sinks
        self.pipelines = pipelines
        self.metrics = metrics
        self.thread: threading.Thread | None = None
        self._lock = lock
        self._halt = halt
        self._queue: queue.Queue[Delivery] = queue.Queue(DELIVERY_DEPTH * slots)
        self.accepted = 0
        """Batches put on the queue so far; with ``written``, what is still to write."""
        self.written = 0
        self._written_cond = threading.Condition(lock)

    @property
    def backlog(self) -> int:
        """Batches queued and not yet taken by the thread."""
        return self._queue.qsize()

    def submit(self, delivery: Delivery) -> None:
        """Queue a pull's batch behind those accepted before it (under the lock)."""
        delivery.slot.pending += 1
        self.accepted += 1
        self._queue.put_nowait(delivery)

    def wait_written(self, accepted: int, timeout: float) -> None:
        """Wait (under the lock) until the first ``accepted`` batches are in the sinks."""
        self._written_cond.wait_for(lambda: self.written >= accepted, timeout=timeout)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="cluster-delivery", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        """Write each accepted batch, in order; after a halt, what is queued is written too."""
        try:
            while not (self._halt.is_set() and self._queue.empty()):
                try:
                    delivery = self._queue.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    continue
                self._deliver(delivery)
        except Exception as exc:  # a bug here would lose records: fail the run, loudly
            with self._lock:
                self.roster.fatal(exc)

    def _deliver(self, delivery: Delivery) -> None:
        """Records to the metrics and the sinks; then the streams' states.

        The lock is taken only for the states, so that a sink that blocks
        here holds back nothing but the pulls.
        """
        slot = delivery.slot
        batches: dict[str, list[FrameResult]] = defaultdict(list)
        for stream, result in delivery.records:
            if self.pipelines[stream.pipeline].analytics.enabled:
                self.metrics.observe_analytics(stream.pipeline, stream.id, result)
            batches[stream.pipeline].append(result)
        for pipeline, results in batches.items():
            for sink in self.sinks[pipeline]:
                sink.write(results)
        runs_on = self.roster.slots.runs_on
        with self._lock:
            for worker_id, status in delivery.statuses.items():
                stream = self.roster.placed.get(worker_id)
                if stream is not None and not stream.removed and runs_on(stream, slot):
                    stream.report(status)
            slot.pending -= 1
            self.written += 1
            self._written_cond.notify_all()
            self.roster.place_waiting()
