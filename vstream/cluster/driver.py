"""The driver: an engine whose streams run on the workers of a Ray cluster.

:class:`ClusterEngine` offers what the CLI and the HTTP API use of
:class:`~vstream.engine.engine.Engine` (start, wait, stop, add and remove
streams, states, metrics, summary, failures), so ``vstream run``, ``vstream
serve`` and the API run on a cluster unchanged. Inside:

- **Workers** (:mod:`vstream.cluster.worker`): one Ray actor each, with the
  pipelines' detectors on its device; the driver places streams on them by
  capacity (:mod:`vstream.cluster.placement`).
- **Records** come back by pull: one ``take`` in flight per worker, the next
  asked for only once the last batch is in the sinks; workers hold at most
  ``cluster.max_buffered_records`` each, so memory is bounded everywhere and
  a slow sink slows the workers down (files) or makes live streams drop by
  their policy (counted).
- **Sinks, tracking and counting run here**, on each stream's records in
  order: the driver is the one place that knows which records were
  delivered, so it is where a stream resumes from after a worker is lost
  (:mod:`vstream.cluster.stream`); each sink keeps one connection; workers
  stay stateless and replaceable.
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
  with empty reports), is moved after ``cluster.stall_timeout_seconds`` to
  another worker, after its last delivered frame, and counted.

Two threads. The *control* thread talks to the workers: it waits on their
calls, notices losses and stalls, places and moves streams, and accepts each
record for delivery (the stream's resume point moves to it there, so a move
never repeats nor skips a record). The *delivery* thread runs tracking, lines
and zones and writes to the sinks, outside the engine lock, from a bounded
queue: a sink that blocks holds back the pulls (at most
:data:`DELIVERY_DEPTH` batches of a worker wait), never loss detection,
placement or the API. API calls add and remove streams under the same lock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vstream.cluster.connect import RayConnection
from vstream.cluster.placement import WorkerLoad, choose_worker
from vstream.cluster.stream import ClusterStream, StreamLost, analytics_for
from vstream.cluster.worker import ClusterWorker, WorkerInfo, WorkerPipeline, WorkerReport
from vstream.config.pipelines import VstreamConfig
from vstream.config.sinks import FRAME_SINK_TYPES
from vstream.config.sources import SourceConfig
from vstream.engine.errors import PipelineNotFound, StreamNotFound
from vstream.engine.interface import EngineBase
from vstream.engine.outputs import analyze
from vstream.engine.pipeline import sink_samples
from vstream.engine.status import StreamStatus, stream_sample
from vstream.errors import LimitExceeded, VstreamError, describe, first_line
from vstream.metrics import ClusterSample, LimitSample, Metrics, SinkSample, StreamSample
from vstream.results import FrameResult
from vstream.sources.base import SourceState

if TYPE_CHECKING:
    from vstream.clips.catalogue import Catalogue
    from vstream.engine.outputs import Preview
    from vstream.sinks.video.writer import VideoWriterStats

log = logging.getLogger("vstream.cluster")

TAKE_RECORDS = 512
"""Most records one pull brings back."""

TAKE_WAIT_SECONDS = 0.25
"""How long a worker holds a pull open while it has no record."""

_POLL_SECONDS = 0.2

WORKER_CONCURRENCY = 8
"""Calls a worker runs at once: the pull, adds and removals, the finish."""

DELIVERY_DEPTH = 2
"""Batches of one worker accepted and not yet in the sinks, at most: one being written, one
taken meanwhile. Past it no pull is asked of that worker, so a slow sink slows it down."""


@dataclass(eq=False)
class WorkerSlot:
    """One worker as the driver sees it; a replacement takes over the slot of a lost one."""

    slot: int
    actor: Any
    opening: Any
    """The pending ``open`` call, until the worker has loaded its models."""
    state: str = "starting"
    """starting (placed or waiting for resources, loading), ready, failed, lost, stopped."""
    info: WorkerInfo | None = None
    taking: Any = None
    finishing: Any = None
    ended: bool = False
    """Finished and emptied (after :meth:`ClusterEngine.stop`)."""
    streams: set[str] = field(default_factory=set)
    adding: dict[Any, str] = field(default_factory=dict)
    """Pending ``add`` calls and their stream ids: a failure fails that stream."""
    removing: set[Any] = field(default_factory=set)
    """Pending ``remove`` calls of streams moved off this worker because they stalled."""
    asked_at: float = 0.0
    """When the pending pull was asked (monotonic): how long it was open, for stalls."""
    pending: int = 0
    """Its batches accepted and not yet in the sinks (up to :data:`DELIVERY_DEPTH`)."""
    pinging: Any = None
    """While no pull is asked (the sinks are behind): a ``pid`` call, whose failure is how a
    loss is noticed then."""
    pinged_at: float = 0.0

    @property
    def name(self) -> str:
        where = f" (pid {self.info.pid} on {self.info.host})" if self.info else ""
        return f"worker {self.slot}{where}"


@dataclass(frozen=True)
class Delivery:
    """One pull's records, accepted for the sinks in order, and its streams' states after them."""

    slot: WorkerSlot
    records: list[tuple[ClusterStream, FrameResult]]
    statuses: dict[str, dict[str, Any]]


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
        self.failure: BaseException | None = None
        """A bug in a worker, or every worker lost: the run fails with it."""
        self.pipelines = {p.name: p for p in config.pipelines}
        self.sinks: dict[str, list[Any]] = {}
        self._lock = threading.RLock()
        self._streams: dict[str, ClusterStream] = {}
        self._placed: dict[str, ClusterStream] = {}
        """Each placed stream by the id its worker knows (``ClusterStream.worker_id``)."""
        self._placements = 0
        self._slots: list[WorkerSlot] = []
        self._restarts = 0
        self._losses = 0
        self._moves = 0
        self._received = 0
        self._dropped: Counter[str] = Counter()
        self._started_at: float | None = None
        self._stopped = False
        self._stalls = 0
        self._halt = threading.Event()
        self._collector: threading.Thread | None = None
        self._deliverer: threading.Thread | None = None
        # Each worker slot ever started has at most DELIVERY_DEPTH batches in it.
        slots = self.cluster.workers + self.cluster.max_worker_restarts
        self._deliveries: queue.Queue[Delivery] = queue.Queue(DELIVERY_DEPTH * slots)
        self._accepted = 0
        """Batches put on the delivery queue so far; with ``_written``, what is still to write."""
        self._written = 0
        self._written_cond = threading.Condition(self._lock)
        self._connection = RayConnection(self.cluster)
        self._ray = self._connection.ray
        try:
            self._build_sinks()
            self._actor_class = self._ray.remote(worker_class)
            self._gpus = self._gpus_per_worker()
            self._specs = [
                WorkerPipeline(p.name, p.model, p.detector_postprocess(), p.runtime)
                for p in config.pipelines
            ]
            self._slots = [self._spawn(slot) for slot in range(self.cluster.workers)]
            self._await_workers()
        except BaseException:
            self._release(timeout=5.0)
            raise
        self.metrics.watch(self._samples)
        self.metrics.watch_cluster(self._cluster_sample)

    # -- workers ---------------------------------------------------------------------------

    def _build_sinks(self) -> None:
        from vstream.sinks.factory import build_sink

        for pipeline in self.config.pipelines:
            self.sinks[pipeline.name] = [
                build_sink(sink, pipeline.name)
                for sink in pipeline.sinks
                if sink.type not in FRAME_SINK_TYPES
            ]

    def _gpus_per_worker(self) -> float:
        """The GPUs each worker reserves: as configured, else 1 where CUDA may run and exists."""
        have = self._connection.resources().get("GPU", 0.0)
        wanted = self.cluster.gpus_per_worker
        if wanted is None:
            cuda = any(p.runtime.device != "cpu" for p in self.config.pipelines)
            return 1.0 if cuda and have >= 1 else 0.0
        if self.cluster.address is None and wanted * self.cluster.workers > have:
            raise VstreamError(
                f"cluster.workers ({self.cluster.workers}) x cluster.gpus_per_worker ({wanted:g}) "
                f"needs more GPUs than this machine's {have:g}"
            )
        return wanted

    def _spawn(self, slot: int) -> WorkerSlot:
        actor = self._actor_class.options(
            num_cpus=self.cluster.cpus_per_worker,
            num_gpus=self._gpus,
            max_concurrency=WORKER_CONCURRENCY,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        ).remote(self.config.pipelines[0].runtime.torch_threads)
        opening = actor.open.remote(self._specs, self.cluster.max_buffered_records)
        return WorkerSlot(slot, actor, opening)

    def _await_workers(self) -> None:
        """Wait for the first workers to load their models; fail with the first reason not to."""
        deadline = time.monotonic() + self.cluster.start_timeout_seconds
        waiting = {slot.opening: slot for slot in self._slots}
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise VstreamError(
                    f"{len(waiting)} of {len(self._slots)} Ray workers did not start within "
                    f"cluster.start_timeout_seconds ({self.cluster.start_timeout_seconds:g} s): "
                    f"each asks for {self.cluster.cpus_per_worker:g} CPU and {self._gpus:g} GPU; "
                    f"the cluster has {self._connection.resources()}"
                )
            ready, _ = self._ray.wait(list(waiting), num_returns=1, timeout=min(left, 1.0))
            for ref in ready:
                slot = waiting.pop(ref)
                try:
                    self._opened(slot, self._ray.get(ref))
                except self._ray.exceptions.RayActorError as exc:
                    raise VstreamError(
                        f"{slot.name} died while loading its models: {first_line(exc)}"
                    ) from None
                except self._ray.exceptions.RayTaskError as exc:
                    raise _cause(exc) from None

    def _opened(self, slot: WorkerSlot, info: WorkerInfo) -> None:
        slot.info, slot.state, slot.opening = info, "ready", None
        log.info(
            "%s ready: %s, %.0f frames/s on a blank batch", slot.name, info.device, info.throughput
        )

    def _loads(self) -> dict[int, WorkerLoad]:
        loads = {}
        for slot in self._slots:
            if slot.state != "ready" or slot.info is None:
                continue
            active = [self._streams[s] for s in slot.streams if s in self._streams]
            active = [s for s in active if not s.terminal]
            loads[slot.slot] = WorkerLoad(
                slot=slot.slot,
                throughput=slot.info.throughput,
                streams=len(active),
                nvdec_streams=sum(s.nvdec for s in active),
                gpu=slot.info.gpu,
            )
        return loads

    def _place_waiting(self) -> None:
        """Place every stream that waits for a worker, where there is room (under the lock)."""
        if self.stopping.is_set():
            return
        waiting = [s for s in self._streams.values() if s.slot is None and not s.terminal]
        if not waiting:
            return
        loads = self._loads()
        for stream in waiting:
            placement = choose_worker(
                [w for w in loads.values() if self._slots[w.slot] is not stream.stalled_on],
                stream.config.decoder,
                max_streams=self.cluster.max_streams_per_worker,
                nvdec_sessions=self.cluster.nvdec_sessions_per_worker,
            )
            if placement is None:
                continue
            slot = self._slots[placement.slot]
            self._placements += 1
            worker_id = stream.placed(slot.slot, placement.nvdec, self._placements)
            self._placed[worker_id] = stream
            source = stream.config.model_copy(
                update={"id": worker_id, "decoder": placement.decoder}
            )
            ref = slot.actor.add.remote(stream.pipeline, source, stream.resume)
            slot.adding[ref] = stream.id
            slot.streams.add(stream.id)
            load = loads[slot.slot]
            loads[slot.slot] = WorkerLoad(
                load.slot,
                load.throughput,
                load.streams + 1,
                load.nvdec_streams + placement.nvdec,
                load.gpu,
            )
            how = f"resumes after frame {stream.resume.index}" if stream.resume else "starts"
            log.info("stream %s %s on %s", stream.id, how, slot.name)

    def _lost(self, slot: WorkerSlot, error: BaseException) -> None:
        """A worker's process is gone: move its streams, start a replacement (under the lock)."""
        if slot.state not in ("starting", "ready"):
            return
        slot.state = "lost"
        self._losses += 1
        self._kill(slot)
        moved = 0
        for stream_id in sorted(slot.streams):
            stream = self._streams.get(stream_id)
            if stream is None or stream.terminal:
                continue
            self._placed.pop(stream.worker_id or "", None)
            if stream.error is not None:  # failed there: its last records went with the worker
                stream.done = True
                continue
            stream.lost_worker()
            self._moved(stream)
            moved += 1
        ended = len(slot.streams) - moved
        slot.streams.clear()
        if slot.info is None:  # a replacement lost while it started: it held no streams yet
            log.error("%s lost before it was ready: %s", slot.name, first_line(error))
        else:
            log.error(
                "%s lost: %s; moving %d streams%s",
                slot.name,
                first_line(error),
                moved,
                f" ({ended} others had ended there)" if ended else "",
            )
        if self.stopping.is_set():
            return
        if self._restarts < self.cluster.max_worker_restarts:
            self._restarts += 1
            self._slots[slot.slot] = self._spawn(slot.slot)
            log.info(
                "worker %d: starting a replacement (%d of cluster.max_worker_restarts %d)",
                slot.slot,
                self._restarts,
                self.cluster.max_worker_restarts,
            )
        else:
            slot.state = "failed"
            log.error(
                "worker %d: not replaced, cluster.max_worker_restarts (%d) reached",
                slot.slot,
                self.cluster.max_worker_restarts,
            )
        self._place_waiting()
        self._check_workers_left()

    def _moved(self, stream: ClusterStream) -> None:
        """``stream`` left its worker (under the lock): count the move; past the bound, fail it."""
        self._moves += 1
        if stream.moves > self.cluster.max_stream_moves:
            stream.fail(
                StreamLost(
                    f"it left its worker (lost or stuck) {stream.moves} times, more than "
                    f"cluster.max_stream_moves ({self.cluster.max_stream_moves})"
                )
            )

    def _stalled(self, slot: WorkerSlot, stream: ClusterStream) -> None:
        """``stream`` reads on ``slot`` but gives no records: move it (under the lock).

        The worker answers its pulls, so it is not lost; its pipeline (or this
        stream's reader) is stuck. The stream is stopped there, whatever that
        incarnation still sends is dropped (counted as ``removed``), and it is
        placed on another worker after its last delivered frame, as after a loss.
        """
        log.error(
            "stream %s: no record from %s for %.0f s while it reads "
            "(cluster.stall_timeout_seconds); moving it",
            stream.id,
            slot.name,
            stream.idle_seconds,
        )
        self._stalls += 1
        self._placed.pop(stream.worker_id or "", None)
        slot.streams.discard(stream.id)
        slot.removing.add(slot.actor.remove.remote(stream.worker_id))
        stream.stalled(slot)
        self._moved(stream)

    def _broken(self, slot: WorkerSlot, error: BaseException) -> None:
        """A replacement could not load its models: that fails once, it is not retried."""
        slot.state = "failed"
        self._kill(slot)
        log.error("%s could not start: %s; not replaced", slot.name, describe(error))
        self._check_workers_left()

    def _check_workers_left(self) -> None:
        if any(s.state in ("starting", "ready") for s in self._slots):
            return
        lost = VstreamError("every cluster worker was lost, and none can be started in its place")
        if self.failure is None:
            self.failure = lost
        for stream in self._streams.values():
            if not stream.terminal:
                stream.fail(lost)

    def _fatal(self, error: BaseException) -> None:
        """A bug (in a worker, or in the driver's collector): the run fails with it, once."""
        if self.failure is None:
            self.failure = error
            log.error("the cluster failed: %s", describe(error))
        for stream in self._streams.values():
            if not stream.terminal:
                stream.fail(error)

    def _kill(self, slot: WorkerSlot) -> None:
        try:
            self._ray.kill(slot.actor, no_restart=True)
        except Exception as exc:  # already gone, or the cluster is: nothing left to stop
            log.debug("%s: kill: %s", slot.name, exc)

    # -- control: the calls to the workers ---------------------------------------------------

    def _calls(self) -> dict[Any, tuple[WorkerSlot, str, str | None]]:
        """Every pending call to a worker, asking each ready worker for records (under the lock).

        A worker whose batches wait for the sinks is not asked for more; a
        ``pid`` call is kept in flight to it instead, now and then, so that its
        loss is still noticed at once.
        """
        now = time.monotonic()
        calls: dict[Any, tuple[WorkerSlot, str, str | None]] = {}
        for slot in self._slots:
            if slot.state == "starting":
                calls[slot.opening] = (slot, "open", None)
                continue
            if slot.state != "ready":
                continue
            behind = slot.pending >= DELIVERY_DEPTH
            if slot.taking is None and not slot.ended and not behind:
                slot.taking = slot.actor.take.remote(TAKE_RECORDS, TAKE_WAIT_SECONDS)
                slot.asked_at = now
            if slot.taking is not None:
                calls[slot.taking] = (slot, "take", None)
            elif behind and slot.pinging is None and now - slot.pinged_at >= _POLL_SECONDS:
                slot.pinging, slot.pinged_at = slot.actor.pid.remote(), now
            if slot.pinging is not None:
                calls[slot.pinging] = (slot, "ping", None)
            if slot.finishing is not None:
                calls[slot.finishing] = (slot, "finish", None)
            for ref, stream_id in slot.adding.items():
                calls[ref] = (slot, "add", stream_id)
            for ref in slot.removing:
                calls[ref] = (slot, "remove", None)
        return calls

    def _collect(self) -> None:
        try:
            self._collect_until_halted()
        except Exception as exc:  # a bug here would stall every stream: fail them, loudly
            with self._lock:
                self._fatal(exc)

    def _collect_until_halted(self) -> None:
        ray = self._ray
        while not self._halt.is_set():
            with self._lock:
                calls = self._calls()
            if not calls:
                self._halt.wait(_POLL_SECONDS)
                continue
            refs = list(calls)
            ready, rest = ray.wait(refs, num_returns=1, timeout=_POLL_SECONDS)
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                self._answered(ref, *calls[ref])

    def _answered(self, ref: Any, slot: WorkerSlot, kind: str, stream_id: str | None) -> None:
        errors = self._ray.exceptions
        if kind == "remove":
            with self._lock:
                slot.removing.discard(ref)
        try:
            value = self._ray.get(ref)
        except errors.RayTaskError as exc:
            with self._lock:
                self._refused(slot, kind, stream_id, _cause(exc))
            return
        except errors.RayError as exc:  # the process or its node is gone
            with self._lock:
                self._lost(slot, exc)
            return
        with self._lock:
            if kind == "take":
                self._accept(slot, value)
            elif kind == "ping":
                slot.pinging = None
            elif kind == "open":
                if slot.state == "starting":
                    self._opened(slot, value)
                    self._place_waiting()
            elif kind == "add":
                slot.adding.pop(ref, None)
            elif kind == "finish":
                slot.finishing = None

    def _refused(
        self, slot: WorkerSlot, kind: str, stream_id: str | None, error: Exception
    ) -> None:
        """A worker's method raised (under the lock): who fails depends on which."""
        if kind == "add":
            slot.adding = {r: s for r, s in slot.adding.items() if s != stream_id}
            stream = self._streams.get(stream_id or "")
            if stream is not None:
                stream.fail(error)
        elif kind == "open":
            self._broken(slot, error)
        elif kind == "remove":  # a stalled stream that ended there meanwhile: nothing to stop
            log.debug("%s: removing a stalled stream: %s", slot.name, error)
        else:
            slot.taking = slot.pinging = None
            self._fatal(error)

    def _accept(self, slot: WorkerSlot, report: WorkerReport) -> None:
        """A pull's records, each once and in order, onto the delivery queue (under the lock).

        Each record accepted moves its stream's resume point: from here on, a
        move of the stream starts after it, and the delivery thread writes it.
        Streams that read but got none of their records are checked for a stall.
        """
        now, wall = time.monotonic(), time.time()
        slot.taking = None
        self._received += len(report.records)
        accepted: list[tuple[ClusterStream, FrameResult]] = []
        got: Counter[str] = Counter()
        for result in report.records:
            # Named by the worker id: a removed or moved stream's records, and an earlier
            # incarnation's of a stream added again with the same id, find no stream.
            stream = self._placed.get(result.stream_id)
            if stream is None or stream.removed or not self._runs_on(stream, slot):
                self._dropped["removed"] += 1
                continue
            result = replace(result, stream_id=stream.id)
            if stream.resume is not None and result.frame_index <= stream.resume.index:
                self._dropped["duplicate"] += 1
                log.error(
                    "stream %s: frame %d came again after frame %d; dropped",
                    stream.id,
                    result.frame_index,
                    stream.resume.index,
                )
                continue
            stream.delivered(result, wall)
            got[stream.id] += 1
            accepted.append((stream, result))
        if report.ended:
            slot.ended = True
        if accepted or report.streams:
            slot.pending += 1
            self._accepted += 1
            self._deliveries.put_nowait(Delivery(slot, accepted, report.streams or {}))
        if slot.state == "ready":
            self._watch_stalls(slot, now - slot.asked_at, got)

    def _watch_stalls(self, slot: WorkerSlot, seconds: float, got: Counter[str]) -> None:
        """Count a pull open ``seconds`` against the streams of ``slot`` it brought nothing of."""
        for stream_id in sorted(slot.streams):
            stream = self._streams.get(stream_id)
            if stream is None or stream.terminal or not self._runs_on(stream, slot):
                continue
            if stream.pulled(seconds, got[stream_id]) >= self.cluster.stall_timeout_seconds:
                self._stalled(slot, stream)
        self._place_waiting()

    # -- delivery: analytics and sinks, off the lock -----------------------------------------

    def _deliver_until_halted(self) -> None:
        """Write each accepted batch, in order; after a halt, what is queued is written too."""
        try:
            while not (self._halt.is_set() and self._deliveries.empty()):
                try:
                    delivery = self._deliveries.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    continue
                self._deliver(delivery)
        except Exception as exc:  # a bug here would lose records: fail the run, loudly
            with self._lock:
                self._fatal(exc)

    def _deliver(self, delivery: Delivery) -> None:
        """Records through tracking, lines and zones and to the sinks; then the streams' states.

        Only this thread touches a stream's analytics, in the order its
        records were accepted; the lock is taken only for the states, so that
        a sink that blocks here holds back nothing but the pulls.
        """
        slot = delivery.slot
        batches: dict[str, list[FrameResult]] = defaultdict(list)
        for stream, result in delivery.records:
            batches[stream.pipeline].append(self._analyzed(stream, slot, result))
        for pipeline, results in batches.items():
            for sink in self.sinks[pipeline]:
                sink.write(results)
        with self._lock:
            for worker_id, status in delivery.statuses.items():
                stream = self._placed.get(worker_id)
                if stream is not None and not stream.removed and self._runs_on(stream, slot):
                    stream.report(status)
            slot.pending -= 1
            self._written += 1
            self._written_cond.notify_all()
            self._place_waiting()

    def _runs_on(self, stream: ClusterStream, slot: WorkerSlot) -> bool:
        """``stream`` is placed on this very worker (not on a replacement in its slot)."""
        return stream.slot is not None and self._slots[stream.slot] is slot

    def _analyzed(self, stream: ClusterStream, slot: WorkerSlot, result: FrameResult) -> Any:
        pipeline = self.pipelines[stream.pipeline]
        if not pipeline.analytics.enabled:
            return result
        if stream.analytics is None and slot.info is not None:
            names = slot.info.class_names[stream.pipeline]
            stream.analytics = analytics_for(pipeline.analytics, names, pipeline.postprocess.conf)
        result = analyze(stream.analytics, result)
        self.metrics.observe_analytics(stream.pipeline, stream.id, result)
        return result

    # -- the Engine interface --------------------------------------------------------------

    def start(self) -> None:
        """Place every source of the config and start taking records."""
        self._started_at = time.monotonic()
        with self._lock:
            for pipeline in self.config.pipelines:
                for source in pipeline.sources:
                    self._streams[source.id] = ClusterStream(pipeline.name, source)
            self._place_waiting()
        self._collector = threading.Thread(target=self._collect, name="cluster", daemon=True)
        self._deliverer = threading.Thread(
            target=self._deliver_until_halted, name="cluster-delivery", daemon=True
        )
        self._collector.start()
        self._deliverer.start()

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
            return self._received

    def readers(self) -> list[ClusterStream]:
        """Every stream (the summary reads their line counts)."""
        with self._lock:
            return list(self._streams.values())

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
        if source.cadence_on:
            raise VstreamError(
                f"stream {source.id}: a detection cadence (detect_every, detect_fps, motion) "
                "is not run in cluster mode yet"
            )
        with self._lock:
            self._admit(pipeline, source)
            live = sum(s.state in ("starting", "ready") for s in self._slots)
            active = sum(not s.terminal for s in self._streams.values())
            if active >= live * self.cluster.max_streams_per_worker:
                raise LimitExceeded(
                    f"every worker holds cluster.max_streams_per_worker "
                    f"({self.cluster.max_streams_per_worker}) streams"
                )
            stream = self._streams[source.id] = ClusterStream(pipeline, source)
            self._place_waiting()
            log.info("stream %s: added to pipeline %s", source.id, pipeline)
            return stream.status()

    def remove_stream(self, stream_id: str) -> StreamStatus:
        """Stop a stream at once on its worker; its final counters."""
        with self._lock:
            stream = self._streams.pop(stream_id, None)
            if stream is None:
                raise StreamNotFound(f"no stream {stream_id!r}")
            stream.removed = True
            accepted = self._accepted
            self._placed.pop(stream.worker_id or "", None)
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
            self._written_cond.wait_for(lambda: self._written >= accepted, timeout=10.0)
            if final is not None:
                stream.report(final)
            stream.done = True
            self._place_waiting()
        self.metrics.forget_stream(stream.pipeline, stream_id)
        log.info("stream %s: removed", stream_id)
        return stream.status()

    def not_ready(self) -> list[str]:
        """Reasons the cluster is not ready: workers down or starting, streams not running."""
        if self.stopping.is_set():
            return ["shutting down"]
        with self._lock:
            reasons = [f"worker {s.slot} is {s.state}" for s in self._slots if s.state != "ready"]
            for stream in self._streams.values():
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
            streams = list(self._streams.values())
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
        collector = self._collector
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
        for thread in (self._collector, self._deliverer):  # delivery writes what is queued
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        if self._deliverer is not None and self._deliverer.is_alive():
            log.error("a sink still blocks the delivery of %d batches", self._deliveries.qsize())
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
                self._kill(slot)
        self._connection.close()

    def _own_failures(self) -> list[BaseException]:
        return [self.failure] if self.failure is not None else []

    def _record_sinks(self) -> list[Any]:
        return [s for sinks in self.sinks.values() for s in sinks]

    # -- metrics ---------------------------------------------------------------------------

    def _samples(self) -> tuple[list[StreamSample], list[SinkSample], list[LimitSample]]:
        with self._lock:
            streams = list(self._streams.values())
        samples = [stream_sample(s) for s in streams]
        sinks = [k for name, group in self.sinks.items() for k in sink_samples(name, group)]
        per_pipeline = {name: sum(s.pipeline == name for s in streams) for name in self.pipelines}
        return samples, sinks, self._limit_samples(per_pipeline)

    def _cluster_sample(self) -> ClusterSample:
        with self._lock:
            states = Counter(s.state for s in self._slots)
            return ClusterSample(
                workers=dict(states),
                worker_failures=self._losses,
                worker_restarts=self._restarts,
                stream_moves=self._moves,
                stream_stalls=self._stalls,
                streams_waiting=sum(
                    s.slot is None and not s.terminal for s in self._streams.values()
                ),
                records_received=self._received,
                records_dropped=dict(self._dropped),
                gap_seconds=[
                    (s.pipeline, s.id, s.gap_seconds) for s in self._streams.values() if s.endless
                ],
            )


def _cause(exc: Exception) -> Exception:
    """The exception a worker's method raised, out of Ray's wrapper."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc
