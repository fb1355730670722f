"""The driver: an engine whose streams run on the workers of a Ray cluster.

:class:`ClusterEngine` offers what the CLI and the HTTP API use of
:class:`~vstream.engine.engine.Engine` (start, wait, stop, add and remove
streams, states, metrics, summary, failures), so ``vstream run``, ``vstream
serve`` and the API run on a cluster unchanged. It wires these together:

- **Workers** (:mod:`vstream.cluster.worker`): one Ray actor each, with the
  pipelines' detectors on its device and its streams' trackers, lines and
  zones, in a slot that a replacement takes
  over (:mod:`vstream.cluster.slots`); the driver places streams on them by
  capacity (:mod:`vstream.cluster.placement`, :mod:`vstream.cluster.roster`).
- **Records** come back by pull (:mod:`vstream.cluster.collect`): one
  ``take`` in flight per worker, the next asked for only once the last batch
  is in the sinks; workers hold at most ``cluster.max_buffered_records``
  each, so memory is bounded everywhere and a slow sink slows the workers
  down (files) or makes live streams drop by their policy (counted).
- **Sinks run here** (:mod:`vstream.cluster.deliver`), on each stream's
  records in order: the driver is the one place that knows which records
  were delivered, so it is where a stream resumes from after a worker is
  lost, with the tracks and counts as they stood after its last delivered
  record, which the worker sent with it (:mod:`vstream.cluster.stream`);
  each sink keeps one connection; workers stay replaceable. Tracking runs
  on the workers, beside their detectors, so it grows with them.
- **Faults**: a worker whose process dies (killed, out of memory, node
  lost) is detected by its pending call failing; its streams move to the
  workers with room at once (files after their last delivered frame, live
  streams after a counted gap) and a replacement is started, which Ray
  places when capacity returns. Bounded: at most
  ``cluster.max_worker_restarts`` replacements, and a stream moved more than
  ``cluster.max_stream_moves`` times fails. A worker that cannot load its
  model, or a bug in a worker, fails once, loudly, never retried.

- **Stuck workers**: a stream its worker reports as reading, whose records
  stop coming while the driver asks for them (a hung pipeline answers pulls
  with empty reports) and whose frames the worker stops taking, is moved
  after ``cluster.stall_timeout_seconds`` to another worker (one it never stalled
  on; with none left, it fails), after its last delivered frame, and counted
  (:meth:`ClusterStream.pulled <vstream.cluster.stream.ClusterStream.pulled>`).

Two threads. The *control* thread (:class:`~vstream.cluster.collect.Collector`)
talks to the workers: it waits on their calls, notices losses and stalls,
places and moves streams, and accepts each record for delivery (the stream's
resume point moves to it there, so a move never repeats nor skips a record).
The *delivery* thread (:class:`~vstream.cluster.deliver.Deliverer`) writes
the records to the sinks, outside the engine lock,
from a bounded queue: a sink that blocks holds back the pulls (at most
:data:`DELIVERY_DEPTH` batches of a worker wait), never loss detection,
placement or the API. API calls add and remove streams under the same lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vstream.cluster.collect import TAKE_RECORDS, TAKE_WAIT_SECONDS, Collector
from vstream.cluster.connect import RayConnection
from vstream.cluster.deliver import DELIVERY_DEPTH, Deliverer, Delivery, build_sinks
from vstream.cluster.roster import Roster
from vstream.cluster.slots import WORKER_CONCURRENCY, WorkerSlot, WorkerSlots, gpus_per_worker
from vstream.cluster.stream import ClusterStream, PipelineFigures
from vstream.cluster.worker import ClusterWorker, worker_config
from vstream.config.pipelines import VstreamConfig
from vstream.config.sources import SourceConfig
from vstream.engine.errors import PipelineNotFound, StreamNotFound
from vstream.engine.interface import STARTING, EngineBase
from vstream.engine.pipeline import sink_samples
from vstream.engine.status import StreamStatus, stream_sample
from vstream.errors import LimitExceeded
from vstream.metrics import ClusterSample, LimitSample, Metrics, SinkSample, StreamSample
from vstream.sources.base import SourceState

if TYPE_CHECKING:
    from vstream.clips.catalogue import Catalogue
    from vstream.engine.outputs import Preview
    from vstream.sinks.video.writer import VideoWriterStats

log = logging.getLogger("vstream.cluster")


class ClusterEngine(EngineBase):
    """Every pipeline of a config, its streams placed on the workers of a Ray cluster."""

    def __init__(
        self,
        config: VstreamConfig,
        *,
        base_dir: Path | None = None,
        worker_class: type = ClusterWorker,
    ) -> None:
        """Connect to Ray, start the workers and wait until they have loaded their models.

        ``worker_class`` is what each worker runs: :class:`ClusterWorker`,
        or a stand-in with its methods (benchmarks/cluster.py measures the
        driver with workers that make records without a model).
        """
        if config.cluster is None:
            raise ValueError("ClusterEngine needs a config with a cluster: section")
        self.config = config
        self.cluster = config.cluster
        self.base_dir = base_dir or Path.cwd()
        self.metrics = Metrics()
        self.stopping = threading.Event()
        self.pipelines = {p.name: p for p in config.pipelines}
        self.sinks: dict[str, list[Any]] = {}
        self._lock = threading.RLock()
        self._started_at: float | None = None
        self._started = False
        self._stopped = False
        self._halt = threading.Event()
        self._connection = RayConnection(self.cluster)
        self._ray = self._connection.ray
        torch_threads = config.pipelines[0].runtime.torch_threads
        self._slots = WorkerSlots(self._connection, self.cluster, torch_threads)
        self._roster = Roster(self.cluster, self._slots, self.stopping)
        self._deliverer = Deliverer(
            roster=self._roster,
            sinks=self.sinks,
            pipelines=self.pipelines,
            metrics=self.metrics,
            lock=self._lock,
            halt=self._halt,
            slots=self.cluster.workers + self.cluster.max_worker_restarts,
        )
        self._collector = Collector(
            roster=self._roster,
            deliverer=self._deliverer,
            ray=self._ray,
            lock=self._lock,
            halt=self._halt,
        )
        try:
            build_sinks(config, self.sinks)
            actor_class = self._ray.remote(worker_class)
            gpus = gpus_per_worker(
                self.cluster, config.pipelines, self._connection.resources().get("GPU", 0.0)
            )
            specs = [worker_config(p) for p in config.pipelines]
            self._slots.open(actor_class, specs, gpus)
        except BaseException:
            self._release(timeout=5.0)
            raise
        self.metrics.watch(self._samples)
        self.metrics.watch_cluster(self._cluster_sample)
        self._figures = [
            PipelineFigures(p.name, self._roster.streams, self._lock)
            for p in config.pipelines
            if p.secondary
        ]
        for figures in self._figures:
            self.metrics.watch_cascade(figures.pipeline, figures)

    @property
    def failure(self) -> BaseException | None:
        """A bug in a worker, or every worker lost: the run fails with it."""
        return self._roster.failure

    # -- the Engine interface --------------------------------------------------------------

    def start(self) -> None:
        """Place every source of the config and start taking records."""
        self._started_at = time.monotonic()
        self._stop_at_exit()
        with self._lock:
            for pipeline in self.config.pipelines:
                for source in pipeline.sources:
                    self._roster.streams[source.id] = ClusterStream(pipeline.name, source)
            self._roster.place_waiting()
        self._collector.start()
        self._deliverer.start()
        self._started = True

    @property
    def device(self) -> str:
        """Where the models run, for the summary line."""
        with self._lock:
            devices = sorted({s.info.device for s in self._slots if s.info is not None})
            return f"{len(self._slots)} Ray workers ({', '.join(devices) or 'none ready'})"

    @property
    def records_received(self) -> int:
        """Records taken from the workers so far (delivered, or dropped and counted)."""
        with self._lock:
            return self._collector.received

    def readers(self) -> list[ClusterStream]:
        """Every stream (the summary reads their line counts)."""
        with self._lock:
            return list(self._roster.streams.values())

    def workers(self) -> list[dict[str, Any]]:
        """Each worker slot: state, process, device, streams held."""
        with self._lock:
            return [
                {
                    "worker": s.slot,
                    "state": s.state,
                    "pid": s.info.pid if s.info else None,
                    "host": s.info.host if s.info else None,
                    "device": s.info.device if s.info else None,
                    "streams": sorted(s.streams),
                }
                for s in self._slots
            ]

    def worker_pid(self, slot: int) -> int:
        """The process id of a worker (tests kill it to play a lost worker)."""
        with self._lock:
            actor = self._slots[slot].actor
        return int(self._ray.get(actor.pid.remote(), timeout=30))

    def attach_preview(self, hub: Preview) -> None:
        """No previews: they need the frames, which stay on the workers."""

    def clips(self) -> Catalogue:
        """No clips: they need the frames, which stay on the workers."""
        from vstream.clips.catalogue import Catalogue

        return Catalogue([])

    def finished_videos(self) -> dict[str, VideoWriterStats]:
        """No annotated videos: they need the frames, which stay on the workers."""
        return {}

    def add_stream(self, pipeline: str, source: SourceConfig) -> StreamStatus:
        """Place ``source`` of ``pipeline`` on a worker with room, as :meth:`Engine.add_stream`."""
        if pipeline not in self.pipelines:
            raise PipelineNotFound(f"no pipeline {pipeline!r}")
        with self._lock:
            self._admit(pipeline, source)
            live = sum(s.state in ("starting", "ready") for s in self._slots)
            active = sum(not s.terminal for s in self._roster.streams.values())
            if active >= live * self.cluster.max_streams_per_worker:
                raise LimitExceeded(
                    f"every worker holds cluster.max_streams_per_worker "
                    f"({self.cluster.max_streams_per_worker}) streams"
                )
            stream = self._roster.streams[source.id] = ClusterStream(pipeline, source)
            self._roster.place_waiting()
            log.info("stream %s: added to pipeline %s", source.id, pipeline)
            return stream.status()

    def remove_stream(self, stream_id: str) -> StreamStatus:
        """Stop a stream at once on its worker; its final counters."""
        with self._lock:
            stream = self._roster.streams.pop(stream_id, None)
            if stream is None:
                raise StreamNotFound(f"no stream {stream_id!r}")
            for figures in self._figures:
                figures.removed(stream)
            stream.removed = True
            accepted = self._deliverer.accepted
            self._roster.placed.pop(stream.worker_id or "", None)
            slot = self._slots[stream.slot] if stream.slot is not None else None
            call = None
            if slot is not None and slot.state == "ready":
                slot.streams.discard(stream_id)
                call = slot.actor.remove.remote(stream.worker_id)
        final = None
        if call is not None:
            try:
                final = self._ray.get(call, timeout=10.0)
            except Exception as exc:  # the worker went away: its counters went with it
                log.warning("stream %s: no final counters from its worker: %s", stream_id, exc)
        with self._lock:
            # Its records accepted before the removal reach the sinks first (unless a sink
            # blocks them): frames_processed then counts what was written.
            self._deliverer.wait_written(accepted, timeout=10.0)
            if final is not None:
                stream.report(final)
            stream.done = True
            self._roster.place_waiting()
        self.metrics.forget_stream(stream.pipeline, stream_id)
        log.info("stream %s: removed", stream_id)
        return stream.status()

    def not_ready(self) -> list[str]:
        """Reasons the cluster is not ready: workers down or starting, streams not running."""
        if self.stopping.is_set():
            return ["shutting down"]
        if not self._started:
            return [STARTING]
        with self._lock:
            reasons = [f"worker {s.slot} is {s.state}" for s in self._slots if s.state != "ready"]
            for stream in self._roster.streams.values():
                state = stream.state
                if state not in (SourceState.STREAMING, SourceState.FINISHED):
                    waiting = " (waiting for a worker)" if stream.slot is None else ""
                    reasons.append(f"stream {stream.id} is {state.value}{waiting}")
        reasons += [
            f"{s.label} has failed"
            for sinks in self.sinks.values()
            for s in sinks
            if getattr(s, "error", None) is not None
        ]
        return reasons

    def files_done(self) -> bool:
        """Every stream has ended and its records are delivered (or every sink has failed)."""
        with self._lock:
            streams = list(self._roster.streams.values())
        for name, sinks in self.sinks.items():
            failed = bool(sinks) and all(getattr(s, "error", None) for s in sinks)
            if not failed and not all(s.terminal for s in streams if s.pipeline == name):
                return False
        return True

    def _stop(self, timeout: float) -> None:
        """Stop intake everywhere, take every record in flight, flush the sinks, let Ray go."""
        with self._lock:
            log.debug("stopping: finishing frames in flight on the workers")
            for slot in self._slots:
                if slot.state == "ready":
                    slot.actor.stop_taking_frames.remote()
                    slot.finishing = slot.actor.finish.remote(timeout)
        deadline = time.monotonic() + timeout
        collector = self._collector.thread
        if collector is not None:
            while time.monotonic() < deadline and collector.is_alive() and not self._drained():
                time.sleep(0.05)
            if not self._drained():
                log.error("the workers did not finish within %.0f s", timeout)
        self._release(max(1.0, deadline - time.monotonic()))

    def _drained(self) -> bool:
        with self._lock:
            return all(s.state != "ready" or s.ended for s in self._slots)

    def _release(self, timeout: float) -> None:
        """Stop the collector, flush and close the sinks, end the workers and the connection."""
        self._halt.set()
        deadline = time.monotonic() + timeout
        collector, deliverer = self._collector.thread, self._deliverer.thread
        for thread in (collector, deliverer):  # delivery writes what is queued
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        if deliverer is not None and deliverer.is_alive():
            log.error("a sink still blocks the delivery of %d batches", self._deliverer.backlog)
        for sinks in self.sinks.values():
            for sink in sinks:
                sink.start_flush()
        for sinks in self.sinks.values():
            for sink in sinks:
                sink.close()
        with self._lock:
            for slot in self._slots:
                if slot.state in ("starting", "ready"):
                    slot.state = "stopped"
                self._slots.kill(slot)
        self._connection.close()

    def _own_failures(self) -> list[BaseException]:
        return [self.failure] if self.failure is not None else []

    def _record_sinks(self) -> list[Any]:
        return [s for sinks in self.sinks.values() for s in sinks]

    # -- metrics ---------------------------------------------------------------------------

    def _samples(self) -> tuple[list[StreamSample], list[SinkSample], list[LimitSample]]:
        with self._lock:
            streams = list(self._roster.streams.values())
        samples = [stream_sample(s) for s in streams]
        sinks = [k for name, group in self.sinks.items() for k in sink_samples(name, group)]
        per_pipeline = {name: sum(s.pipeline == name for s in streams) for name in self.pipelines}
        return samples, sinks, self._limit_samples(per_pipeline)

    def _cluster_sample(self) -> ClusterSample:
        roster = self._roster
        with self._lock:
            states = Counter(s.state for s in self._slots)
            streams = roster.streams.values()
            return ClusterSample(
                workers=dict(states),
                worker_failures=roster.losses,
                worker_restarts=self._slots.restarts,
                stream_moves=roster.moves,
                stream_stalls=roster.stalls,
                streams_waiting=sum(s.slot is None and not s.terminal for s in streams),
                records_received=self._collector.received,
                records_dropped=dict(self._collector.dropped),
                gap_seconds=[(s.pipeline, s.id, s.gap_seconds) for s in streams if s.endless],
            )


__all__ = [
    "DELIVERY_DEPTH",
    "TAKE_RECORDS",
    "TAKE_WAIT_SECONDS",
    "WORKER_CONCURRENCY",
    "ClusterEngine",
    "ClusterWorker",
    "Delivery",
    "WorkerSlot",
]
