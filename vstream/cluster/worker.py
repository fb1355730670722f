"""A cluster worker: the pipelines of a config in a Ray actor, reading the streams placed on it.

Each worker runs the same :class:`~vstream.engine.pipeline.Pipeline` code as
a single process (readers, intake, overlapped stages, one detector per
pipeline on the worker's device, each stream's tracker, lines and zones,
the secondary models), with one difference: its only sink is a
:class:`~vstream.cluster.relay.Relay`, from which the driver pulls records.
Frames never leave the worker; records (boxes, tracks, events, readings),
counters, states and each stream's tracks, counts and readings as bytes
(:mod:`vstream.engine.carry`) do. A worker keeps no state the driver needs
to recover it: when it is lost, the driver opens its streams elsewhere after
the last record it delivered, from the state that goes with that record.

The class is plain Python: the driver makes it an actor with ``ray.remote``,
so that importing this module needs no Ray. Every method is called through
Ray; they may run concurrently (the actor is threaded), which the pipelines
allow: streams are added and removed while they run.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from vstream.cluster.relay import Relay
from vstream.config.pipelines import PipelineConfig
from vstream.config.sources import SourceConfig
from vstream.engine import carry
from vstream.errors import VstreamError
from vstream.results import FrameResult
from vstream.sources.base import ResumePoint

log = logging.getLogger("vstream.cluster")

STATUS_SECONDS = 0.25
"""How often a worker's reply carries its streams' states (and at once when a stream ends)."""

_THROUGHPUT_SECONDS = 0.3
"""About how long a worker times its model at start, for its throughput estimate."""


def worker_config(pipeline: PipelineConfig) -> PipelineConfig:
    """A pipeline as its workers get it: everything but its sinks (which run on the driver,
    and whose secrets stay there) and its sources (placed one by one)."""
    return pipeline.model_copy(update={"sinks": [], "sources": []})


@dataclass(frozen=True)
class WorkerInfo:
    """Who a worker is and what it can do, sent once when it has loaded its models."""

    pid: int
    host: str
    node_ip: str
    device: str
    throughput: float
    """Frames per second its model ran at, on a blank batch, when it started."""

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")


@dataclass(frozen=True)
class WorkerReport:
    """One reply to the driver's pull: records in order, and now and then the streams' states."""

    records: list[FrameResult]
    streams: dict[str, dict[str, Any]] | None
    """Per stream placed here: its description, ``done`` and ``error_kind``; None between."""
    ended: bool
    """The worker has finished (after :meth:`ClusterWorker.finish`) and nothing is left."""
    states: dict[str, bytes] = field(default_factory=dict)
    """Per stream among the records: its state (:mod:`vstream.engine.carry`) right after its
    last record here."""


class ClusterWorker:
    """The pipelines of one worker; created empty (quick to place), loaded by :meth:`open`."""

    def __init__(self, torch_threads: int) -> None:
        import torch

        # Process-wide, and only from the main thread (where Ray runs the constructor of
        # a threaded actor); the methods run on Ray's threads.
        torch.set_num_threads(torch_threads)
        self.pipelines: dict[str, Any] = {}
        self.relay: Relay | None = None
        self._status_at = 0.0
        self._running: dict[str, bool] = {}

    def open(self, pipelines: list[PipelineConfig], buffered_records: int) -> WorkerInfo:
        """Load every pipeline (:func:`worker_config`) on this worker's device and start it.

        A model that cannot be loaded raises here, and the driver fails the
        run with it, once: a worker that cannot load its model would fail
        again anywhere.
        """
        from vstream.engine.pipeline import Pipeline

        self.relay = Relay(buffered_records, state_of=self._state_of)
        throughput = []
        for config in pipelines:
            pipeline = Pipeline.from_config(config, sinks=[self.relay])
            throughput.append(_throughput(pipeline.detector))
            self.pipelines[config.name] = pipeline
            pipeline.start()
        device = str(next(iter(self.pipelines.values())).detector.device)
        return WorkerInfo(
            pid=os.getpid(),
            host=socket.gethostname(),
            node_ip=_node_ip(),
            device=device,
            throughput=sum(throughput) / len(throughput),
        )

    def pid(self) -> int:
        return os.getpid()

    def add(
        self,
        pipeline: str,
        source: SourceConfig,
        resume: ResumePoint | None,
        state: bytes | None = None,
    ) -> None:
        """Start reading ``source`` in ``pipeline``; when it moved here, after ``resume`` and
        from its ``state`` (:mod:`vstream.engine.carry`) as it stood after that frame."""
        carried = carry.loads(state) if state is not None else None
        self.pipelines[pipeline].add_stream(source, resume, carried)

    def _state_of(self, stream_id: str) -> bytes | None:
        """A stream's tracks, counts and readings as bytes; None where it has no tracker (the
        relay asks as it writes the stream's records)."""
        for pipeline in self.pipelines.values():
            reader = pipeline.streams.get(stream_id)
            if reader is not None and reader.analytics is not None:
                cascade = pipeline.cascade
                readings = cascade.readings(stream_id) if cascade is not None else None
                return carry.dumps(reader.analytics, readings)
        return None

    def remove(self, stream_id: str) -> dict[str, Any] | None:
        """Stop a stream at once (queued frames discarded, counted); its final description."""
        for pipeline in self.pipelines.values():
            if stream_id in pipeline.streams:
                return pipeline.remove_stream(stream_id).status().to_json()
        return None

    def take(self, limit: int, wait: float) -> WorkerReport:
        """Up to ``limit`` records (waiting up to ``wait`` seconds for one), and states when due."""
        assert self.relay is not None, "open() first"
        taken = self.relay.take(limit, wait)
        now = time.monotonic()
        readers = [r for p in self.pipelines.values() for r in list(p.streams.values())]
        ended = any(self._running.get(r.id, True) and not r.running for r in readers)
        statuses = None
        if ended or taken.ended or now - self._status_at >= STATUS_SECONDS:
            self._status_at = now
            self._running = {r.id: r.running for r in readers}
            statuses = {r.id: _status(r, taken.received, taken.waiting) for r in readers}
        return WorkerReport(taken.records, statuses, taken.ended, taken.states)

    def stop_taking_frames(self) -> None:
        """First step of a graceful stop: every reader stops; queued frames are still processed."""
        for pipeline in self.pipelines.values():
            pipeline.stop_taking_frames()

    def finish(self, timeout: float) -> None:
        """Process what is queued and join every thread; the driver then takes what is left."""
        deadline = time.monotonic() + timeout
        for pipeline in self.pipelines.values():
            pipeline.finish(max(0.0, deadline - time.monotonic()))
        if self.relay is not None:
            self.relay.close()


def _status(reader: Any, received: dict[str, int], waiting: frozenset[str]) -> dict[str, Any]:
    """A stream's description, plus whether all its records have left (``done``).

    ``received`` was counted before the reader's state was read, so a stream
    is never reported done while one of its records has yet to enter the
    relay: every frame the source gave either has a record the driver took,
    or failed, or was discarded.
    """
    counters = reader.counters
    accounted = received.get(reader.id, 0) + counters.frames_failed + counters.frames_discarded
    through = accounted >= reader.source_stats.frames_delivered
    idle = not reader.running and reader.id not in waiting
    error = reader.error
    kind = None if error is None else "input" if isinstance(error, VstreamError) else "bug"
    return {
        **reader.status().to_json(),
        "done": idle and (through or kind is not None),
        "error_kind": kind,
    }


def _throughput(detector: Any) -> float:
    """Frames per second of ``detector`` on blank full batches: a relative capacity weight."""
    import torch

    from vstream.frame import Frame, PixelFormat

    data = torch.zeros((360, 640, 3), dtype=torch.uint8, device=detector.device)
    batch = [Frame(data, PixelFormat.RGB24, 640, 360)] * detector.batch_size
    detector.detect(batch)  # the first run pays for allocation and warm-up
    runs, started = 0, time.perf_counter()
    while runs < 3 or (time.perf_counter() - started < _THROUGHPUT_SECONDS and runs < 50):
        detector.detect(batch)
        runs += 1
    return runs * len(batch) / (time.perf_counter() - started)


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()
