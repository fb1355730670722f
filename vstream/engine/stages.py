"""Overlapped stages: preprocessing, the model and postprocessing, on threads of their own.

While the model runs batch n, batch n+1 is being gathered and letterboxed
and batch n-1 is being postprocessed and delivered. Each batch travels in
one of the model's buffers, so the stages never share a tensor: the number
of buffers bounds how many batches are in flight, and a stage that finds no
free buffer, or no room in the next stage's queue, waits (backpressure all
the way back to the readers).

Concurrent runs: the model stage is ``concurrent_runs`` threads (see
:mod:`vstream.inference.plan`), each taking the next gathered batch and running
it on that batch's own buffer and IO bindings (ONNX Runtime runs a session
from several threads at once, and its run releases the GIL). Runs finish in
any order; postprocessing takes batches back in the order they were gathered
(each batch carries its sequence number), so results leave in gathering
order overall and in order per stream.

Freshness: preprocessing starts gathering a batch only once the model has
taken the previous one, so at most two batches hold frames that have not
reached the model (one being gathered, one waiting), however many runs are
in flight; everything else waits in the intake, whose ``latest`` policy
drops old frames of live streams.

Frames are gathered across streams from an :class:`~vstream.engine.intake.Intake`
(round-robin), up to the batch size: a batch leaves when it is full or
``batch_timeout`` seconds after its first frame arrived, so a slow stream
never holds the others back for longer than that. A frame its stream's
cadence does not detect (``needs_detection`` says no: :mod:`vstream.engine.cadence`)
takes no model slot: it rides along in the batch, in order, with an empty
result the pipeline hands to the tracker. A batch is full when its model
slots are, or when it holds :data:`MAX_FRAMES_PER_SLOT` frames per slot (so
a still scene does not pile decoded frames into one batch).

Failures stay with the streams whose frames caused them. A frame that cannot
be preprocessed fails its stream. When the model or postprocessing fails on a
batch that holds several streams, the batch is run again stream by stream, so
the other streams still get their records and only the offending stream's
frames fail. A failed stream's later frames fail without being delivered:
those not yet in the model never run, and those already in another run when
the stream failed are discarded in postprocessing (the stream is over: the
pipeline marks it ``failed``). Every batch leaves through ``deliver``, in the
order batches were gathered, with its results and its failures: nothing is
dropped silently.

ONNX Runtime releases the GIL while it runs and torch does inside its
kernels, so on a CPU the stages really run in parallel. On CUDA every stage
queues its work on the model's stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from vstream.config.sources import FreshnessPolicy
from vstream.engine.cadence import Decision, undetected_result
from vstream.engine.intake import Arrival, Intake
from vstream.engine.queue import FrameQueue
from vstream.errors import describe
from vstream.frame import Frame
from vstream.logs import Tally
from vstream.results import FrameResult

if TYPE_CHECKING:
    import torch

    from vstream.preprocess.letterbox import LetterboxGeometry

log = logging.getLogger("vstream.engine")

_POLL_SECONDS = 0.1
"""How often an idle stage looks at its stop flags."""

MAX_FRAMES_PER_SLOT = 8
"""Most frames a batch holds per model slot, frames not detected included."""


class BatchModel(Protocol):
    """What the stages need of a detector: its three steps, batch size and buffers."""

    @property
    def batch_size(self) -> int: ...

    @property
    def buffers(self) -> int: ...

    @property
    def concurrent_runs(self) -> int: ...

    @property
    def cuda_stream(self) -> torch.cuda.Stream | None: ...

    def preprocess(self, buffer: int, slot: int, frame: Frame) -> LetterboxGeometry: ...

    def preprocess_batch(self, buffer: int, frames: Sequence[Frame]) -> list[LetterboxGeometry]: ...

    def infer(self, buffer: int, frames: int) -> list[torch.Tensor]: ...

    def postprocess(
        self,
        raw: Sequence[torch.Tensor],
        geometries: Sequence[LetterboxGeometry],
        frames: Sequence[Frame],
    ) -> list[FrameResult]: ...


@dataclass(eq=False)
class Batch:
    """Frames travelling through the stages together, in one of the model's buffers."""

    buffer: int
    sequence: int = 0
    """Position in gathering order: postprocessing takes batches back in this order."""
    arrivals: list[Arrival] = field(default_factory=list)
    """Every frame of the batch in gathering order, those not detected included."""
    geometries: list[LetterboxGeometry | None] = field(default_factory=list)
    """One per arrival; None for a frame not detected."""
    results: list[FrameResult] = field(default_factory=list)
    failures: list[tuple[Arrival, Exception]] = field(default_factory=list)
    """Frames that have no result, each with the error that stopped it."""
    raw: list[torch.Tensor] | None = None
    """The model's detector output, from inference until postprocessing."""
    done: bool = False
    """Results are final (the batch was run again stream by stream)."""
    failed_runs: int = 0
    """Its model runs (or their postprocessing) that failed, each then run again stream
    by stream."""
    preprocess_seconds: float = 0.0
    inference_seconds: float = 0.0
    postprocess_seconds: float = 0.0

    @property
    def frames(self) -> list[Frame]:
        return [a.frame for a in self.arrivals]

    @property
    def detected(self) -> int:
        """Frames in the model's slots (the batch's arrivals to detect)."""
        return sum(a.detect for a in self.arrivals)

    def add(self, arrival: Arrival) -> None:
        """Put ``arrival`` in the batch; :meth:`letterbox` then puts it in its model slot."""
        self.arrivals.append(arrival)
        self.geometries.append(None)

    def letterbox(self, model: BatchModel) -> list[tuple[Arrival, Exception]]:
        """Letterbox every frame to detect into the buffer's first slots, all together.

        Together, a batch costs the host one gathering operation per frame and
        the same few dozen for the rest, whatever its size. If that fails, the
        frames go one at a time, so that a frame that cannot be letterboxed
        fails alone: it leaves the batch, and is returned with its error.
        """
        detect = [a.frame for a in self.arrivals if a.detect]
        try:
            found = iter(model.preprocess_batch(self.buffer, detect) if detect else ())
            self.geometries = [next(found) if a.detect else None for a in self.arrivals]
            return []
        except Exception:
            log.debug("letterboxing a batch together failed; frame by frame", exc_info=True)
        failed: list[tuple[Arrival, Exception]] = []
        arrivals, self.arrivals, self.geometries = self.arrivals, [], []
        for arrival in arrivals:
            try:
                frame, slot = arrival.frame, self.detected
                geometry = model.preprocess(self.buffer, slot, frame) if arrival.detect else None
            except Exception as exc:  # this frame fails alone; its slot is reused
                failed.append((arrival, exc))
                continue
            self.arrivals.append(arrival)
            self.geometries.append(geometry)
        return failed

    def postprocess(self, model: BatchModel, raw: Sequence[torch.Tensor]) -> list[FrameResult]:
        """Results for every arrival, in order: the model's for the frames detected, empty
        ones (:func:`~vstream.engine.cadence.undetected_result`) for the others."""
        pairs = zip(self.arrivals, self.geometries, strict=True)
        detected = [(a.frame, g) for a, g in pairs if a.detect]
        found = iter(
            model.postprocess(raw, [g for _, g in detected], [f for f, _ in detected])
            if detected
            else []
        )
        return [next(found) if a.detect else undetected_result(a.frame) for a in self.arrivals]


Deliver = Callable[[Batch], object]
"""Receives every finished batch on the postprocessing thread; its return value is ignored."""


class InOrder:
    """Where the model's runs hand batches to postprocessing, in the order they were gathered.

    Runs finish in any order; :meth:`get` waits for the next batch in
    sequence. It holds no more batches than there are buffers (each batch
    occupies one), so it needs no bound of its own. It ends once every run
    thread has called :meth:`producer_done` and every batch was taken.
    """

    def __init__(self, producers: int) -> None:
        self._changed = threading.Condition()
        self._waiting: dict[int, Batch] = {}
        self._next = 0
        self._producers = producers
        self._closed = False

    def put(self, batch: Batch) -> bool:
        """Hand over a finished run's batch; False once closed."""
        with self._changed:
            if self._closed:
                return False
            self._waiting[batch.sequence] = batch
            self._changed.notify_all()
            return True

    def producer_done(self) -> None:
        with self._changed:
            self._producers -= 1
            self._changed.notify_all()

    def get(self) -> Batch | None:
        """The next batch in gathering order; None at the end or once closed."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._closed or self._next in self._waiting or self._producers <= 0
            )
            batch = None if self._closed else self._waiting.pop(self._next, None)
            if batch is not None:
                self._next += 1
            return batch

    def close(self) -> None:
        """Stop now: batches waiting are forgotten."""
        with self._changed:
            self._closed = True
            self._waiting.clear()
            self._changed.notify_all()


class OverlappedStages:
    """Threads between an intake and a ``deliver`` callback, sharing one model.

    One preprocessing thread, ``model.concurrent_runs`` model threads, one
    postprocessing thread.
    """

    def __init__(
        self,
        model: BatchModel,
        intake: Intake,
        deliver: Deliver,
        *,
        batch_timeout: float,
        on_end: Callable[[], object] | None = None,
        name: str = "pipeline",
        needs_detection: Callable[[Arrival], object] | None = None,
    ) -> None:
        """``needs_detection`` is asked, in each stream's order, whether a frame goes to the
        model (without it every frame does): a false answer keeps the frame off, and
        :attr:`Decision.STILL <vstream.engine.cadence.Decision.STILL>` marks it ``still`` too."""
        self.model = model
        self._needs_detection = needs_detection
        self.intake = intake
        self.batch_timeout = batch_timeout
        self._deliver = deliver
        self._on_end = on_end
        depth = model.buffers
        runs = model.concurrent_runs  # the plan keeps a buffer free for each run and two more
        self._free: FrameQueue[int] = FrameQueue(depth, FreshnessPolicy.BLOCK)
        for index in range(depth):
            self._free.put(index)
        self._to_infer: FrameQueue[Batch] = FrameQueue(1, FreshnessPolicy.BLOCK)
        self._to_post = InOrder(producers=runs)
        self._gathered = 0
        """Sequence number of the next batch gathered."""
        self._draining = threading.Event()
        self._aborted = threading.Event()
        self.failure: Exception | None = None
        """The bug that stopped a stage thread, if one did (it is logged as well)."""
        self._failed_streams: dict[str, tuple[int, Exception]] = {}
        """Streams with a failed frame: the first batch (sequence) it failed in, and why.

        Their frames in that batch and later ones fail without being delivered.
        """
        self._failed_lock = threading.Lock()
        self.name = name
        self._failed_runs = Tally()
        """Model runs that failed, for a log line per interval (under ``_failed_lock``)."""
        self._busy: dict[int, tuple[str, float]] = {}
        """Stage threads at work on a batch, by thread id: the stage and since when
        (monotonic); what :meth:`stuck` reads."""
        stages = ["preprocess", *(["inference"] * runs), "postprocess"]
        self._threads = [
            threading.Thread(target=self._run, args=(stage,), name=f"{stage}-{name}", daemon=True)
            for stage in stages
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def alive(self) -> bool:
        """Whether any stage thread still runs."""
        return any(t.is_alive() for t in self._threads)

    def stuck(self, seconds: float) -> list[tuple[str, float]]:
        """The stages at work on one batch for more than ``seconds``, each with how long.

        A thread cannot be stopped from outside, so a stage held by a bug or a
        model that never returns is only reported (``/ready``), and abandoned
        at shutdown; every stream of the pipeline waits behind it meanwhile.
        """
        now = time.monotonic()
        return [
            (stage, now - since)
            for stage, since in list(self._busy.values())
            if now - since > seconds
        ]

    @contextlib.contextmanager
    def _working(self, stage: str) -> Iterator[None]:
        """Mark the calling stage thread busy (on a batch) for :meth:`stuck`."""
        key = threading.get_ident()
        self._busy[key] = (stage, time.monotonic())
        try:
            yield
        finally:
            del self._busy[key]

    def finish(self) -> None:
        """No more frames will come: process what the intake holds, then end."""
        self._draining.set()
        self.intake.wake()

    def abort(self) -> None:
        """Stop now: batches in flight are abandoned (the caller no longer wants them)."""
        self._aborted.set()
        for queue in (self._free, self._to_infer):
            queue.close()
            queue.clear()
        self._to_post.close()
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
                # A bug in a stage must not leave the others waiting for it forever. The
                # failure is recorded before the next stage can learn this one ended (below):
                # the end callback reads it to fail every stream.
                with self._failed_lock:
                    self.failure = self.failure or exc
                log.exception("the %s stage failed; stopping the pipeline", stage)
                self.abort()
            finally:
                # What lets the next stage end, only now (see above).
                if stage == "preprocess":
                    self._to_infer.close()
                elif stage == "inference":
                    self._to_post.producer_done()
                elif self._on_end is not None:
                    self._on_end()

    def _preprocess_loop(self) -> None:
        while (index := self._free.get()) is not None:
            # Gather only once the model has taken the previous batch: frames wait in
            # the intake (where a live stream drops old ones), not in a stale batch.
            if not self._to_infer.wait_until_empty():
                return
            batch = self._gather(Batch(index, self._gathered))
            if batch is None or not self._to_infer.put(batch):
                return
            self._gathered += 1

    def _gather(self, batch: Batch) -> Batch | None:
        """Letterbox frames into ``batch`` until it is full or its time is up; None at the end."""
        capacity = self.model.batch_size
        room = capacity * MAX_FRAMES_PER_SLOT
        deadline: float | None = None
        while (
            batch.detected < capacity and len(batch.arrivals) < room and not self._aborted.is_set()
        ):
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            wait = _POLL_SECONDS if deadline is None else min(deadline - now, _POLL_SECONDS)
            limit = min(capacity - batch.detected, room - len(batch.arrivals))
            arrivals = self.intake.take(limit, wait)
            if not arrivals:
                if self._draining.is_set() and self.intake.queued() == 0:
                    break
                continue
            if deadline is None:
                deadline = time.monotonic() + self.batch_timeout
            started = time.perf_counter()
            with self._working("preprocess"):
                for arrival in arrivals:
                    if self._already_failed(batch, arrival):
                        continue
                    try:
                        decision = self._needs_detection is None or self._needs_detection(arrival)
                        if not decision:
                            still = decision is Decision.STILL
                            arrival = dataclasses.replace(arrival, detect=False, still=still)
                        batch.add(arrival)
                    except Exception as exc:  # this frame fails alone
                        self._fail(batch, [arrival], exc)
            batch.preprocess_seconds += time.perf_counter() - started
        if self._aborted.is_set() or not (batch.arrivals or batch.failures):
            return None
        started = time.perf_counter()
        with self._working("preprocess"):
            for arrival, exc in batch.letterbox(self.model):
                self._fail(batch, [arrival], exc)
        batch.preprocess_seconds += time.perf_counter() - started
        return batch

    def _inference_loop(self) -> None:
        while (batch := self._to_infer.get()) is not None:
            self._drop_failed_streams(batch)
            if batch.detected:
                started = time.perf_counter()
                with self._working("inference"):
                    try:
                        batch.raw = self.model.infer(batch.buffer, batch.detected)
                    except Exception as exc:
                        self._rerun_by_stream(batch, exc)
                batch.inference_seconds = time.perf_counter() - started
            if not self._to_post.put(batch):
                return

    def _postprocess_loop(self) -> None:
        while (batch := self._to_post.get()) is not None:
            with self._working("postprocess"):
                if batch.arrivals and not batch.done:
                    started = time.perf_counter()
                    try:
                        batch.results = batch.postprocess(self.model, batch.raw)
                    except Exception as exc:
                        self._rerun_by_stream(batch, exc)
                    batch.postprocess_seconds = time.perf_counter() - started
                self._discard_failed_streams(batch)
                batch.raw = None
                self._free.put(batch.buffer)
                self._deliver(batch)

    def _rerun_by_stream(self, batch: Batch, error: Exception) -> None:
        """Run ``batch`` again one stream at a time, once: a run that failed for a moment
        (device memory short) costs no frames, and of a fault that stays only the streams
        that fail again lose theirs, with their later frames. Said in the log (a line per
        interval) and counted (:attr:`Batch.failed_runs`): a batch of one stream failed
        for good at the first error, and a retry that worked left no trace.

        Each stream's frames are letterboxed again into the first slots of the
        batch's own buffer, so no other batch is disturbed.
        """
        batch.failed_runs += 1
        with self._failed_lock:
            count = self._failed_runs.add()
        if count:
            log.warning(
                "pipeline %s: a model run failed (%s)%s; its frames run again stream by stream",
                self.name, describe(error), f", {count} since the last line" * (count > 1),
            )  # fmt: skip
        groups: dict[str, list[Arrival]] = {}
        for arrival in batch.arrivals:
            groups.setdefault(arrival.stream, []).append(arrival)
        results: list[FrameResult] = []
        kept: list[Arrival] = []
        for arrivals in groups.values():
            try:
                alone = Batch(batch.buffer)
                for arrival in arrivals:
                    alone.add(arrival)
                failed = alone.letterbox(self.model)
                if failed:  # the stream fails as a whole, with its first frame's error
                    raise failed[0][1]
                raw = self.model.infer(batch.buffer, alone.detected) if alone.detected else None
                results += alone.postprocess(self.model, raw)
                kept += arrivals
            except Exception as exc:
                self._fail(batch, arrivals, exc)
        batch.arrivals = kept
        batch.results = results
        batch.raw = None
        batch.done = True

    def fail_delivered(self, batch: Batch, arrival: Arrival, error: Exception) -> None:
        """``deliver``'s own failure of a frame (its tracker or secondary models failed):
        the frame and its stream's later ones fail, as a model failure would make them."""
        self._fail(batch, [arrival], error)

    def _fail(self, batch: Batch, arrivals: Sequence[Arrival], error: Exception) -> None:
        """``arrivals`` fail with ``error``, and so do their streams' later frames."""
        batch.failures += [(a, error) for a in arrivals]
        with self._failed_lock:
            for arrival in arrivals:
                known = self._failed_streams.get(arrival.stream)
                if known is None or batch.sequence < known[0]:
                    self._failed_streams[arrival.stream] = (batch.sequence, error)

    def _failed_by(self, batch: Batch) -> dict[str, Exception]:
        """Streams that failed in ``batch`` or in one gathered before it, and why.

        A stream failing in a later batch (its run finished first) does not
        touch this one: its frames here came before the failure.
        """
        with self._failed_lock:
            return {
                stream: error
                for stream, (sequence, error) in self._failed_streams.items()
                if sequence <= batch.sequence
            }

    def _already_failed(self, batch: Batch, arrival: Arrival) -> bool:
        """Whether ``arrival``'s stream has failed; if so the frame fails too, counted."""
        error = self._failed_by(batch).get(arrival.stream)
        if error is not None:
            batch.failures.append((arrival, error))
        return error is not None

    def _drop_failed_streams(self, batch: Batch) -> None:
        """Take out of a gathered batch the frames of streams that failed since it was gathered.

        Dropping a slot from the middle would leave a hole in the buffer, so
        the survivors are letterboxed again into the first slots.
        """
        failed = self._failed_by(batch)
        if not any(a.stream in failed for a in batch.arrivals):
            return
        kept = [a for a in batch.arrivals if not self._already_failed(batch, a)]
        batch.arrivals = []
        batch.geometries = []
        for arrival in kept:
            batch.add(arrival)
        for arrival, exc in batch.letterbox(self.model):
            self._fail(batch, [arrival], exc)

    def _discard_failed_streams(self, batch: Batch) -> None:
        """Fail the results of streams that failed in an earlier batch while this one ran.

        With several runs in flight, a stream can fail in one run while its
        next frames are already in another: they are not delivered after the
        failure (batches reach this point in gathering order).
        """
        failed = self._failed_by(batch)
        if not any(a.stream in failed for a in batch.arrivals):
            return
        pairs = list(zip(batch.arrivals, batch.results, strict=True))
        batch.arrivals = [a for a, _ in pairs if a.stream not in failed]
        batch.results = [r for a, r in pairs if a.stream not in failed]
        batch.failures += [(a, failed[a.stream]) for a, _ in pairs if a.stream in failed]
