"""Overlapped stages: preprocessing, the model and postprocessing, each on its own thread.

While the model runs batch n, batch n+1 is being gathered and letterboxed
and batch n-1 is being postprocessed and delivered. Each batch travels in
one of the model's buffers, so the stages never share a tensor: the number
of buffers bounds how many batches are in flight, and a stage that finds no
free buffer, or no room in the next stage's queue, waits (backpressure all
the way back to the readers).

Freshness: preprocessing starts gathering a batch only once the model has
taken the previous one, so at most two batches hold frames that have not
reached the model (one being gathered, one waiting); everything else waits
in the intake, whose ``latest`` policy drops old frames of live streams.

Frames are gathered across streams from an :class:`~vstream.engine.intake.Intake`
(round-robin), up to the batch size: a batch leaves when it is full or
``batch_timeout`` seconds after its first frame arrived, so a slow stream
never holds the others back for longer than that.

Failures stay with the streams whose frames caused them. A frame that cannot
be preprocessed fails its stream. When the model or postprocessing fails on a
batch that holds several streams, the batch is run again stream by stream, so
the other streams still get their records and only the offending stream's
frames fail. A failed stream's later frames fail without running (the stream
is over: the pipeline marks it ``failed``). Every batch leaves through
``deliver``, in the order batches were gathered, with its results and its
failures: nothing is dropped silently.

ONNX Runtime releases the GIL while it runs and torch does inside its
kernels, so on a CPU the stages really run in parallel. On CUDA every stage
queues its work on the model's stream.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vstream.config.sources import FreshnessPolicy
from vstream.engine.intake import Arrival, Intake
from vstream.engine.queue import FrameQueue
from vstream.frame import Frame
from vstream.results import FrameResult

log = logging.getLogger("vstream.engine")

_POLL_SECONDS = 0.1
"""How often an idle stage looks at its stop flags."""


class BatchModel(Protocol):
    """What the stages need of a detector: its three steps, batch size and buffers."""

    @property
    def batch_size(self) -> int: ...

    @property
    def buffers(self) -> int: ...

    @property
    def cuda_stream(self) -> Any: ...

    def preprocess(self, buffer: int, slot: int, frame: Frame) -> Any: ...

    def infer(self, buffer: int, frames: int) -> Any: ...

    def postprocess(
        self, raw: Any, geometries: Sequence[Any], frames: Sequence[Frame]
    ) -> list[FrameResult]: ...


@dataclass(eq=False)
class Batch:
    """Frames travelling through the stages together, in one of the model's buffers."""

    buffer: int
    arrivals: list[Arrival] = field(default_factory=list)
    geometries: list[Any] = field(default_factory=list)
    results: list[FrameResult] = field(default_factory=list)
    failures: list[tuple[Arrival, Exception]] = field(default_factory=list)
    """Frames that have no result, each with the error that stopped it."""
    raw: Any = None
    """The model's detector output, from inference until postprocessing."""
    done: bool = False
    """Results are final (the batch was run again stream by stream)."""
    preprocess_seconds: float = 0.0
    inference_seconds: float = 0.0
    postprocess_seconds: float = 0.0

    @property
    def frames(self) -> list[Frame]:
        return [a.frame for a in self.arrivals]


Deliver = Callable[[Batch], object]
"""Receives every finished batch on the postprocessing thread; its return value is ignored."""


class OverlappedStages:
    """Three threads between an intake and a ``deliver`` callback, sharing one model."""

    def __init__(
        self,
        model: BatchModel,
        intake: Intake,
        deliver: Deliver,
        *,
        batch_timeout: float,
        on_end: Callable[[], object] | None = None,
        name: str = "pipeline",
    ) -> None:
        self.model = model
        self.intake = intake
        self.batch_timeout = batch_timeout
        self._deliver = deliver
        self._on_end = on_end
        depth = model.buffers
        self._free: FrameQueue[int] = FrameQueue(depth, FreshnessPolicy.BLOCK)
        for index in range(depth):
            self._free.put(index)
        self._to_infer: FrameQueue[Batch] = FrameQueue(1, FreshnessPolicy.BLOCK)
        self._to_post: FrameQueue[Batch] = FrameQueue(depth, FreshnessPolicy.BLOCK)
        self._draining = threading.Event()
        self._aborted = threading.Event()
        self.failure: Exception | None = None
        """The bug that stopped a stage thread, if one did (it is logged as well)."""
        self._failed_streams: dict[str, Exception] = {}
        """Streams with a failed frame, and why: their later frames fail without running."""
        self._failed_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(stage,), name=f"{stage}-{name}", daemon=True)
            for stage in ("preprocess", "inference", "postprocess")
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def alive(self) -> bool:
        """Whether any stage thread still runs."""
        return any(t.is_alive() for t in self._threads)

    def finish(self) -> None:
        """No more frames will come: process what the intake holds, then end."""
        self._draining.set()
        self.intake.wake()

    def abort(self) -> None:
        """Stop now: batches in flight are abandoned (the caller no longer wants them)."""
        self._aborted.set()
        for queue in (self._free, self._to_infer, self._to_post):
            queue.close()
            queue.clear()
        self.intake.wake()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every stage thread; True if all ended."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        return not self.alive

    def _run(self, stage: str) -> None:
        stream = self.model.cuda_stream
        with contextlib.ExitStack() as context:
            if stream is not None:
                import torch

                context.enter_context(torch.cuda.stream(stream))
            try:
                {
                    "preprocess": self._preprocess_loop,
                    "inference": self._inference_loop,
                    "postprocess": self._postprocess_loop,
                }[stage]()
            except Exception as exc:
                # A bug in a stage must not leave the others waiting for it forever.
                log.exception("the %s stage failed; stopping the pipeline", stage)
                self.failure = exc
                self.abort()
            finally:
                if stage == "postprocess" and self._on_end is not None:
                    self._on_end()

    def _preprocess_loop(self) -> None:
        try:
            while (index := self._free.get()) is not None:
                # Gather only once the model has taken the previous batch: frames wait in
                # the intake (where a live stream drops old ones), not in a stale batch.
                if not self._to_infer.wait_until_empty():
                    return
                batch = self._gather(Batch(index))
                if batch is None or not self._to_infer.put(batch):
                    return
        finally:
            self._to_infer.close()

    def _gather(self, batch: Batch) -> Batch | None:
        """Letterbox frames into ``batch`` until it is full or its time is up; None at the end."""
        capacity = self.model.batch_size
        deadline: float | None = None
        while len(batch.arrivals) < capacity and not self._aborted.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            wait = _POLL_SECONDS if deadline is None else min(deadline - now, _POLL_SECONDS)
            arrivals = self.intake.take(capacity - len(batch.arrivals), wait)
            if not arrivals:
                if self._draining.is_set() and self.intake.queued() == 0:
                    break
                continue
            if deadline is None:
                deadline = time.monotonic() + self.batch_timeout
            started = time.perf_counter()
            for arrival in arrivals:
                if self._already_failed(batch, arrival):
                    continue
                try:
                    geometry = self.model.preprocess(
                        batch.buffer, len(batch.arrivals), arrival.frame
                    )
                except Exception as exc:  # this frame fails alone; its slot is reused
                    self._fail(batch, [arrival], exc)
                    continue
                batch.arrivals.append(arrival)
                batch.geometries.append(geometry)
            batch.preprocess_seconds += time.perf_counter() - started
        if self._aborted.is_set() or not (batch.arrivals or batch.failures):
            return None
        return batch

    def _inference_loop(self) -> None:
        try:
            while (batch := self._to_infer.get()) is not None:
                self._drop_failed_streams(batch)
                if batch.arrivals:
                    started = time.perf_counter()
                    try:
                        batch.raw = self.model.infer(batch.buffer, len(batch.arrivals))
                    except Exception as exc:
                        self._rerun_by_stream(batch, exc)
                    batch.inference_seconds = time.perf_counter() - started
                if not self._to_post.put(batch):
                    return
        finally:
            self._to_post.close()

    def _postprocess_loop(self) -> None:
        while (batch := self._to_post.get()) is not None:
            if batch.arrivals and not batch.done:
                started = time.perf_counter()
                try:
                    batch.results = self.model.postprocess(
                        batch.raw, batch.geometries, batch.frames
                    )
                except Exception as exc:
                    self._rerun_by_stream(batch, exc)
                batch.postprocess_seconds = time.perf_counter() - started
            batch.raw = None
            self._free.put(batch.buffer)
            self._deliver(batch)

    def _rerun_by_stream(self, batch: Batch, error: Exception) -> None:
        """Run ``batch`` again one stream at a time; only the streams that still fail lose frames.

        Each stream's frames are letterboxed again into the first slots of the
        batch's own buffer, so no other batch is disturbed.
        """
        groups: dict[str, list[Arrival]] = {}
        for arrival in batch.arrivals:
            groups.setdefault(arrival.stream, []).append(arrival)
        results: list[FrameResult] = []
        kept: list[Arrival] = []
        if len(groups) == 1:
            self._fail(batch, batch.arrivals, error)
        else:
            for arrivals in groups.values():
                try:
                    frames = [a.frame for a in arrivals]
                    geometries = [
                        self.model.preprocess(batch.buffer, slot, f)
                        for slot, f in enumerate(frames)
                    ]
                    raw = self.model.infer(batch.buffer, len(frames))
                    results += self.model.postprocess(raw, geometries, frames)
                    kept += arrivals
                except Exception as exc:
                    self._fail(batch, arrivals, exc)
        batch.arrivals = kept
        batch.results = results
        batch.raw = None
        batch.done = True

    def _fail(self, batch: Batch, arrivals: Sequence[Arrival], error: Exception) -> None:
        """``arrivals`` fail with ``error``, and so do their streams' later frames."""
        batch.failures += [(a, error) for a in arrivals]
        with self._failed_lock:
            for arrival in arrivals:
                self._failed_streams.setdefault(arrival.stream, error)

    def _already_failed(self, batch: Batch, arrival: Arrival) -> bool:
        """Whether ``arrival``'s stream has failed; if so the frame fails too, counted."""
        with self._failed_lock:
            error = self._failed_streams.get(arrival.stream)
        if error is not None:
            batch.failures.append((arrival, error))
        return error is not None

    def _drop_failed_streams(self, batch: Batch) -> None:
        """Take out of a gathered batch the frames of streams that failed since it was gathered.

        Dropping a slot from the middle would leave a hole in the buffer, so
        the survivors are letterboxed again into the first slots.
        """
        with self._failed_lock:
            if not any(a.stream in self._failed_streams for a in batch.arrivals):
                return
        kept = [a for a in batch.arrivals if not self._already_failed(batch, a)]
        batch.arrivals = []
        batch.geometries = []
        for arrival in kept:
            try:
                geometry = self.model.preprocess(batch.buffer, len(batch.arrivals), arrival.frame)
            except Exception as exc:
                self._fail(batch, [arrival], exc)
                continue
            batch.arrivals.append(arrival)
            batch.geometries.append(geometry)
