"""Overlapped stages: preprocessing, the model and postprocessing, each on its own thread.

While the model runs batch n, batch n+1 is being gathered and letterboxed
and batch n-1 is being postprocessed and delivered. Each batch travels in
one of the engine's buffers (:class:`~vstream.inference.buckets.BatchBuffer`),
so the stages never share a tensor: the number of buffers bounds how many
batches are in flight, and a stage that finds no free buffer, or no room in
the next stage's queue, waits (backpressure all the way back to the readers).

Frames are gathered across streams from an :class:`~vstream.pipeline.intake.Intake`
(round-robin), up to the detector's batch size: a batch leaves when it is
full or ``batch_timeout`` seconds after its first frame arrived, so a slow
stream never holds the others back for longer than that.

Every batch leaves through ``deliver``, in the order batches were gathered,
with its results or with the error that stopped it; nothing is dropped
silently. ONNX Runtime releases the GIL while it runs and torch does inside
its kernels, so on a CPU the stages really run in parallel.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from vstream.frame import Frame
from vstream.pipeline.intake import Arrival, Intake
from vstream.preprocess.letterbox import LetterboxGeometry
from vstream.results import FrameResult
from vstream.sources.options import FreshnessPolicy
from vstream.sources.queue import FrameQueue

if TYPE_CHECKING:
    from vstream.pipeline.detector import Detector

log = logging.getLogger("vstream")

DEFAULT_BATCH_TIMEOUT = 0.04
"""Seconds a partly filled batch waits for more frames: one frame interval at 25 fps."""

_POLL_SECONDS = 0.1
"""How often an idle stage looks at its stop flags."""


@dataclass(eq=False)
class Batch:
    """Frames travelling through the stages together, in one of the engine's buffers."""

    buffer: int
    arrivals: list[Arrival] = field(default_factory=list)
    geometries: list[LetterboxGeometry] = field(default_factory=list)
    results: list[FrameResult] = field(default_factory=list)
    error: Exception | None = None
    """What stopped this batch; its frames then have no results."""
    raw: torch.Tensor | None = None
    """The model's detector output, from inference until postprocessing."""
    preprocess_seconds: float = 0.0
    inference_seconds: float = 0.0
    postprocess_seconds: float = 0.0

    @property
    def frames(self) -> list[Frame]:
        return [a.frame for a in self.arrivals]


Deliver = Callable[[Batch], object]
"""Receives every finished batch on the postprocessing thread; its return value is ignored."""


class OverlappedStages:
    """Three threads between an intake and a ``deliver`` callback, sharing one detector.

    ``torch_threads`` is the intra-op thread count of torch in the stage
    threads: preprocessing and postprocessing tensors are small, and on a
    small CPU their parallel sections would fight the model's threads, so the
    default is one; the parallelism comes from the stages themselves.
    """

    def __init__(
        self,
        detector: Detector,
        intake: Intake,
        deliver: Deliver,
        *,
        batch_timeout: float = DEFAULT_BATCH_TIMEOUT,
        torch_threads: int = 1,
        on_end: Callable[[], object] | None = None,
        name: str = "pipeline",
    ) -> None:
        if batch_timeout < 0:
            raise ValueError(f"the batch timeout must not be negative, got {batch_timeout}")
        self.detector = detector
        self.intake = intake
        self.batch_timeout = batch_timeout
        self.torch_threads = torch_threads
        self._deliver = deliver
        self._on_end = on_end
        depth = len(detector.engine.buffers)
        self._free: FrameQueue[int] = FrameQueue(depth, FreshnessPolicy.BLOCK)
        for index in range(depth):
            self._free.put(index)
        self._to_infer: FrameQueue[Batch] = FrameQueue(depth, FreshnessPolicy.BLOCK)
        self._to_post: FrameQueue[Batch] = FrameQueue(depth, FreshnessPolicy.BLOCK)
        self._draining = threading.Event()
        self._aborted = threading.Event()
        self.failure: Exception | None = None
        """The bug that stopped a stage thread, if one did (it is logged as well)."""
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
        torch.set_num_threads(self.torch_threads)
        stream = self.detector.engine.cuda_stream
        # On CUDA every stage queues its work on the stream ONNX Runtime runs on, so the
        # stream orders preprocessing, the model and postprocessing without a device sync.
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            self._run_stage(stage)

    def _run_stage(self, stage: str) -> None:
        try:
            if stage == "preprocess":
                self._preprocess_loop()
            elif stage == "inference":
                self._inference_loop()
            else:
                self._postprocess_loop()
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
                batch = self._gather(Batch(index))
                if batch is None or not self._to_infer.put(batch):
                    return
        finally:
            self._to_infer.close()

    def _gather(self, batch: Batch) -> Batch | None:
        """Letterbox frames into ``batch`` until it is full or its time is up; None at the end."""
        capacity = self.detector.batch_size
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
                slot = len(batch.arrivals)
                batch.arrivals.append(arrival)
                if batch.error is None:
                    try:
                        batch.geometries.append(
                            self.detector.preprocess(batch.buffer, slot, arrival.frame)
                        )
                    except Exception as exc:  # the batch fails as a whole, visibly
                        batch.error = exc
            batch.preprocess_seconds += time.perf_counter() - started
        if self._aborted.is_set() or not batch.arrivals:
            return None
        return batch

    def _inference_loop(self) -> None:
        try:
            while (batch := self._to_infer.get()) is not None:
                if batch.error is None:
                    started = time.perf_counter()
                    try:
                        batch.raw = self.detector.infer(batch.buffer, len(batch.arrivals))
                    except Exception as exc:
                        batch.error = exc
                    batch.inference_seconds = time.perf_counter() - started
                if not self._to_post.put(batch):
                    return
        finally:
            self._to_post.close()

    def _postprocess_loop(self) -> None:
        while (batch := self._to_post.get()) is not None:
            if batch.error is None and batch.raw is not None:
                started = time.perf_counter()
                try:
                    batch.results = self.detector.postprocess(
                        batch.raw, batch.geometries, batch.frames
                    )
                except Exception as exc:
                    batch.error = exc
                batch.postprocess_seconds = time.perf_counter() - started
            batch.raw = None
            self._free.put(batch.buffer)
            self._deliver(batch)
