"""A running pipeline: one detector, its streams' readers, the overlapped stages, its sinks.

::

    StreamReader ─┐                                    ┌─> sink (file, MQTT, ...)
    StreamReader ─┼─> Intake ─> preprocess ─> model ─> postprocess ─> deliver ─┼─> sink
    StreamReader ─┘   (one queue      (OverlappedStages: a thread each)        └─> results
                       per stream)

Streams can be added and removed while it runs. The last stage hands each
finished batch to :meth:`Pipeline._deliver`, which counts it per stream,
fails the streams whose frames failed, and gives the records to the sinks,
which deliver them on threads of their own.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from vstream.analytics.placing import Placement, place
from vstream.analytics.shapes import keypoint_indices
from vstream.analytics.stream import StreamAnalytics
from vstream.config.analytics import AnalyticsConfig, unknown_classes
from vstream.config.model import RuntimeOptions
from vstream.config.pipelines import PipelineConfig
from vstream.config.secondary import SecondaryConfig
from vstream.config.sinks import FRAME_SINK_TYPES
from vstream.config.sources import SourceConfig
from vstream.config.tracking import DEFAULT_CONF, TrackingConfig
from vstream.engine.cadence import Decision, predicted_result
from vstream.engine.errors import PipelineFailed, ShuttingDown, StreamNotFound
from vstream.engine.intake import Arrival, Intake
from vstream.engine.outputs import FrameOutputs, analyze
from vstream.engine.queue import FrameQueue
from vstream.engine.reader import StreamReader
from vstream.engine.stages import Batch, OverlappedStages
from vstream.engine.status import stream_sample
from vstream.errors import ModelError, describe
from vstream.frame import Frame
from vstream.metrics import Metrics, SinkSample, StreamSample
from vstream.results import KEYPOINTS, FrameResult
from vstream.sinks.buffered import BufferedSink, SinkStats
from vstream.sources.base import ResumePoint, SourceState
from vstream.tracking.bytetrack import ByteTracker, update_together

if TYPE_CHECKING:
    import numpy as np

    from vstream.cascade.stage import Cascade
    from vstream.detector import Detector
    from vstream.engine.carry import Carried

log = logging.getLogger("vstream.engine")

SETTLE_SECONDS = 5.0
"""How long removing a stream waits for its frames already in the stages to be counted."""

_JOIN_STEP_SECONDS = 0.1
"""How often a stop waiting for a thread looks whether it was hurried."""


class Pipeline:
    """Runs one detector over its streams and hands every finished batch to its sinks.

    With ``finish_when_idle`` (the Python API's :func:`detect_iter`) the
    stages finish as soon as every stream has ended; otherwise (``vstream
    run``, ``serve``) the engine decides when to stop.
    """

    track_together = True
    """Step the trackers of a batch's streams in one pass (:meth:`_track_together`); False:
    each frame's alone, as the results are the same (benchmarks compare the two)."""

    def __init__(
        self,
        name: str,
        detector: Detector,
        *,
        runtime: RuntimeOptions,
        sinks: Sequence[BufferedSink],
        metrics: Metrics | None = None,
        finish_when_idle: bool = False,
        analytics: AnalyticsConfig | None = None,
        conf: float = DEFAULT_CONF,
        outputs: FrameOutputs | None = None,
        cascade: Cascade | None = None,
    ) -> None:
        self.name = name
        self.detector = detector
        self.metrics = metrics
        self.sinks = list(sinks)
        self.analytics = analytics if analytics is not None and analytics.enabled else None
        """Tracking, lines and zones, run per stream on the host-side boxes; None when off."""
        self.conf = conf
        """The records' score threshold (``postprocess.conf``); with tracking on the detector
        keeps lower scores for the tracker, and :func:`analyze` cuts them from the records."""
        self.outputs = outputs
        """Annotated videos, previews and event clips; None when the pipeline has none."""
        self.cascade = cascade
        """The secondary models, run on each frame after the tracker; None when there are none."""
        if metrics is not None and cascade is not None:
            metrics.watch_cascade(name, cascade)
        self.intake = Intake()
        self.streams: dict[str, StreamReader] = {}
        self.failure: BaseException | None = None
        """What stopped the stages, if a bug did; every stream then fails with it."""
        self._removing: set[str] = set()
        """Ids :meth:`remove_stream` is at work on."""
        self._retired: list[StreamReader] = []
        """Removed streams whose reader thread has not ended yet (joined at shutdown), or
        whose frames are still in the stages: one id may have several, removed and added
        again."""
        self._lock = threading.Lock()
        self._taking = True
        self._stopping = threading.Event()
        self._hurried = threading.Event()
        self._finish_when_idle = finish_when_idle
        self._reading = 0
        """Readers whose thread has not ended yet."""
        self.stall_seconds = runtime.stall_seconds
        """A stage at work on one batch for longer is reported stuck (:meth:`not_ready`)."""
        self.stages = OverlappedStages(
            detector,
            self.intake,
            self._deliver,
            batch_timeout=runtime.batch_timeout_seconds,
            on_end=self._stages_ended,
            name=name,
            needs_detection=self._needs_detection,
        )

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig,
        metrics: Metrics | None = None,
        *,
        collect: bool = False,
        sinks: Sequence[BufferedSink] = (),
    ) -> Pipeline:
        """The pipeline of a config: its detector loaded and its sinks connected.

        ``collect``: the first sink is a :class:`ResultQueue` its caller iterates
        (:func:`vstream.detect`), and the pipeline finishes once its streams end.
        ``sinks``: made by the caller, after the config's own (a cluster worker's relay).
        """
        from vstream.detector import Detector
        from vstream.sinks.factory import build_sink

        detector = Detector.from_config(config.model, config.detector_postprocess(), config.runtime)
        try:
            keypoint_indices(config.analytics.anchor_keypoints, detector.keypoint_names)
        except ValueError as exc:
            raise ModelError(f"pipeline {config.name}: {exc}") from None
        if unknown := unknown_classes(config.analytics, detector.class_names):
            problems = "; ".join(f"analytics.{place}: {problem}" for place, problem in unknown)
            raise ModelError(f"pipeline {config.name}: {problems}")
        cascade = _cascade(config.secondary, detector, config.analytics)
        built: list[BufferedSink] = [results_for(detector)] if collect else []  # type: ignore[list-item]
        try:
            for sink in config.sinks:
                if sink.type not in FRAME_SINK_TYPES:
                    built.append(build_sink(sink, config.name))
            outputs = FrameOutputs(config, detector.device, detector.class_names)
        except BaseException:
            for sink in built:
                sink.close()
            raise
        return cls(
            config.name,
            detector,
            runtime=config.runtime,
            sinks=[*built, *sinks],
            metrics=metrics,
            finish_when_idle=collect,
            analytics=config.analytics,
            conf=config.postprocess.conf,
            outputs=outputs,
            cascade=cascade,
        )

    def start(self) -> None:
        self.stages.start()

    def add_stream(
        self,
        config: SourceConfig,
        resume: ResumePoint | None = None,
        carried: Carried | None = None,
    ) -> StreamReader:
        """Start reading ``config``'s source; the caller checks that its id is free.

        ``resume`` starts after a frame already delivered, and ``carried``
        goes on from the stream's tracks, counts and readings as they stood
        after it (a stream moved from a lost cluster worker).
        """
        return self._add(
            StreamReader(
                config.id,
                config=config,
                intake=self.intake,
                device=self.detector.device,
                pipeline=self.name,
                cuda_stream=self.detector.cuda_stream,
                on_end=self._reader_ended,
                packet_tap=self.outputs.packet_tap(config.id) if self.outputs else None,
                resume=resume,
            ),
            carried,
        )

    def add_frames(self, stream_id: str, frames: Iterable[Frame]) -> StreamReader:
        """Start reading an iterable of frames (an open source, a generator) as a stream."""
        return self._add(
            StreamReader(
                stream_id,
                frames=frames,
                intake=self.intake,
                device=self.detector.device,
                pipeline=self.name,
                cuda_stream=self.detector.cuda_stream,
                on_end=self._reader_ended,
            )
        )

    def _add(self, reader: StreamReader, carried: Carried | None = None) -> StreamReader:
        if carried is not None:
            carried.analytics.stream = reader.id
            reader.analytics = carried.analytics
            if carried.analytics.config.enabled:
                # As a new stream's analytics do: unpickled ones never ran their __init__,
                # and the import would land in the stream's first batch, its frames queued
                # behind it, where a cluster driver counts the wait towards a stall.
                ByteTracker.load_matcher()
        elif self.analytics is not None or reader.cadence is not None:
            # A stream that skips frames needs a tracker to fill them in, asked for or not.
            reader.analytics = StreamAnalytics(
                self.analytics or AnalyticsConfig(tracking=TrackingConfig()),
                self.detector.class_names,
                conf=self.conf,
                keypoint_names=self.detector.keypoint_names,
                stream=reader.id,
            )
        with self._lock:
            failure = self.failure or self.stages.failure
            if not self._taking or failure is not None:
                reader.leave_intake()
            if not self._taking:
                raise ShuttingDown(f"pipeline {self.name} is shutting down: no new streams")
            if failure is not None:
                raise PipelineFailed(
                    f"pipeline {self.name} has failed ({describe(failure)}): no new streams"
                )
            self.streams[reader.id] = reader
            self._reading += 1
        if self.cascade is not None:
            reader.attributes = self.cascade.counts(reader.id)
            if carried is not None:
                self.cascade.carry_on(reader.id, carried.readings)
        reader.start()
        return reader

    def remove_stream(self, stream_id: str) -> StreamReader:
        """Stop a stream at once; frames still queued are discarded and counted.

        Exactly one caller removes a stream; the others get
        :class:`StreamNotFound`. Frames already in the stages go on through
        them: the reader returned has its final counters once those are counted
        (waited for up to :data:`SETTLE_SECONDS`; the reader's thread ends on
        its own, a blocked read at its timeout, and is joined at shutdown).
        Until this returns the id is :meth:`being_removed`: the stream's videos,
        clips, readings and metrics, kept by id, are still its own.
        """
        with self._lock:
            reader = self.streams.get(stream_id)
            if reader is None:
                raise StreamNotFound(f"no stream {stream_id!r}")
            # Each step seen by those who look without the lock: retired before it
            # leaves the streams (the stages find its frames' reader so), its id taken
            # meanwhile (an add checks it so).
            self._removing.add(stream_id)
            self._retired.append(reader)
            del self.streams[stream_id]
            reader.leave_intake()
        try:
            self._retire(reader)
        finally:
            with self._lock:
                self._removing.discard(stream_id)
        log.info("stream %s: removed", stream_id)
        return reader

    def being_removed(self, stream_id: str) -> bool:
        """Whether :meth:`remove_stream` is at work on ``stream_id``: it is not free yet."""
        return stream_id in self._removing

    def _retire(self, reader: StreamReader) -> None:
        """Stop a stream taken out of the streams; wait for its frames; forget it by id."""
        stream_id = reader.id
        reader.stop()
        if not reader.settle(SETTLE_SECONDS):
            log.warning(
                "stream %s: %d frames not through after %g s; its counters may still change",
                stream_id,
                reader.frames_in_flight,
                SETTLE_SECONDS,
            )
        elif reader.running:
            log.info(
                "stream %s: removed while connecting; the attempt ends by its timeout, and "
                "counts against the limits till then",
                stream_id,
            )
        if self.outputs is not None:
            self.outputs.remove_stream(stream_id)
        if self.cascade is not None:
            self.cascade.remove_stream(stream_id)
        if self.metrics is not None:
            self.metrics.forget_stream(self.name, stream_id)
        self._reap()

    def _reap(self) -> None:
        """Forget removed streams whose reader thread has ended."""
        with self._lock:
            self._retired = [r for r in self._retired if r.running or r.frames_in_flight]

    def _reader(self, arrival: Arrival) -> StreamReader | None:
        """The reader ``arrival`` came through: of a stream removed and added again under
        its id, the frames still in the stages count on the reader that read them."""
        reader = self.streams.get(arrival.stream)
        if reader is not None and reader.lane is arrival.lane:
            return reader
        return next((r for r in self._retired if r.lane is arrival.lane), None)

    def _reader_ended(self, reader: StreamReader) -> None:
        with self._lock:
            self._reading -= 1
            idle = self._reading == 0
        if idle and self._finish_when_idle:
            self.stages.finish()

    def readers(self) -> list[StreamReader]:
        with self._lock:
            return [*self.streams.values(), *self._retired]

    def leaving(self) -> list[StreamReader]:
        """Removed streams whose reader has not ended (a connection attempt runs till its
        timeout): counted against the limits, as they hold a thread and a socket."""
        with self._lock:
            return [r for r in self._retired if r.running]

    def _needs_detection(self, arrival: Arrival) -> Decision | bool:
        """Whether the stream's cadence sends this frame to the model (preprocessing thread)."""
        reader = self._reader(arrival)
        if reader is None or reader.cadence is None:
            return True
        adapting = reader.cadence.options.adapt_detect_every is not None
        dropped = reader.lane.dropped if adapting else 0
        return reader.cadence.decide(arrival.frame, dropped)

    def _analyze(
        self,
        analytics: StreamAnalytics,
        arrival: Arrival,
        result: FrameResult,
        track_ids: np.ndarray | None,
        placement: Placement | None = None,
    ) -> FrameResult:
        """A stream's tracker, cascade, lines and zones on one frame (postprocessing thread);
        ``track_ids``: the tracker's answer, where it was stepped with other streams';
        ``placement``: its tracks placed against the lines and zones, where they were."""
        cascade = self.cascade
        read = attributes_of = embeddings = None
        if cascade is not None:
            tracker = analytics.tracker
            if arrival.detect:
                embeddings = cascade.embed(arrival.frame, result.detections)

            def read(kept: FrameResult, rows: np.ndarray) -> FrameResult:
                return cascade.apply(
                    arrival.frame,
                    kept,
                    detected=arrival.detect,
                    live_tracks=tracker.live_track_ids(),
                    embeddings=None if embeddings is None else embeddings[rows],
                )

            attributes_of = cascade.attributes_of(arrival.stream)
        if not arrival.detect:
            return predicted_result(
                analytics, result, still=arrival.still, read=read, attributes_of=attributes_of
            )
        return analyze(
            analytics,
            result,
            embeddings=embeddings,
            read=read,
            attributes_of=attributes_of,
            track_ids=track_ids,
            placement=placement,
        )

    def _track_together(self, batch: Batch, positions: list[int]) -> dict[int, np.ndarray]:
        """Track ids of the frames at ``positions`` in ``batch`` (one frame of each stream
        at most), for those whose trackers step together.

        ByteTrack on a handful of boxes costs numpy calls, not arithmetic, so the
        trackers of a batch's streams are stepped in one pass
        (:func:`~vstream.tracking.update_together`, the same answer each would get
        alone). Only detected frames, and only where the tracker matches without an
        appearance model (whose vectors, a cascade's, join the matching); a cascade's
        classifiers read each stream's tracked objects afterwards, as they would alone.
        A frame the tracker refuses sends them all the usual way, where it fails its own
        stream alone.
        """
        cascade = self.cascade
        if not self.track_together or (cascade is not None and cascade.appearance is not None):
            return {}
        chosen: list[int] = []
        trackers: list[ByteTracker] = []
        frames: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]] = []
        for position in positions:
            arrival, result = batch.arrivals[position], batch.results[position]
            reader = self._reader(arrival)
            analytics = None if reader is None else reader.analytics
            if analytics is None or not arrival.detect:
                continue
            if type(analytics.tracker) is not ByteTracker:  # one given through the API
                continue
            detections = result.detections
            chosen.append(position)
            trackers.append(analytics.tracker)
            frames.append(
                (detections.xyxy, detections.confidence, detections.class_id, result.pts_seconds)
            )
        if len(trackers) < 2:
            return {}
        try:
            answers = update_together(trackers, frames)
        except ValueError:
            return {}
        return dict(zip(chosen, answers, strict=True))

    def _place_together(self, batch: Batch, tracked: dict[int, np.ndarray]) -> dict[int, Placement]:
        """Where the confirmed tracks of the frames at ``tracked``'s positions (stepped
        together) stand against their lines and zones: placed in one pass for each group of
        streams that share them (:func:`~vstream.analytics.placing.place`), as the trackers
        were. A group that cannot be placed so is placed frame by frame, the usual way."""
        groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        owners: dict[tuple[int, tuple[int, ...]], StreamAnalytics] = {}
        for position in tracked:
            reader = self._reader(batch.arrivals[position])
            analytics = None if reader is None else reader.analytics
            if analytics is None or not (analytics.lines or analytics.zones):
                continue
            key = (id(analytics.config), analytics.anchor_keypoints)
            groups.setdefault(key, []).append(position)
            owners[key] = analytics
        placed: dict[int, Placement] = {}
        for key, positions in groups.items():
            frames = []
            for position in positions:
                detections = batch.results[position].detections
                frames.append((tracked[position], detections.xyxy, detections.data.get(KEYPOINTS)))
            try:
                placed.update(zip(positions, place(owners[key], frames), strict=True))
            except ValueError:
                continue
        return placed

    @staticmethod
    def _rounds(batch: Batch) -> list[list[int]]:
        """The batch's positions by round: the first frame of each stream, then each
        one's second, and so on (a stream's frame is finished, its lines and zones
        included, before its tracker takes the next)."""
        rounds: list[list[int]] = []
        taken: dict[str, int] = {}
        for position, arrival in enumerate(batch.arrivals):
            k = taken.get(arrival.stream, 0)
            taken[arrival.stream] = k + 1
            if k == len(rounds):
                rounds.append([])
            rounds[k].append(position)
        return rounds

    def _deliver(self, batch: Batch) -> None:
        """A finished batch, on the postprocessing thread: finish, count, fail, hand on records.

        A frame whose tracker, secondary models or annotation fail (a model that
        breaks at run time, input nobody foresaw) fails its stream alone, as a
        detector failure does: the pipeline's other streams go on. Frames are
        finished round by round (:meth:`_rounds`), so that each round's trackers
        step together and its tracks are placed against the lines and zones together;
        the records keep the batch's order.
        """
        now = time.time()
        finished: dict[int, FrameResult] = {}
        failed: dict[str, Exception] = {}
        for positions in self._rounds(batch):
            tracked = self._track_together(batch, positions)
            placed = self._place_together(batch, tracked)
            for position in positions:
                arrival, result = batch.arrivals[position], batch.results[position]
                reader = self._reader(arrival)
                if reader is None:
                    finished[position] = result
                    continue
                error = failed.get(arrival.stream)
                if error is None:
                    try:
                        result = self._finish_record(
                            reader, arrival, result, tracked.get(position), placed.get(position)
                        )
                    except Exception as exc:
                        error = failed[arrival.stream] = exc
                if error is not None:
                    self.stages.fail_delivered(batch, arrival, error)
                    continue
                age = max(0.0, now - arrival.captured_at)
                reader.counters.processed(1, len(result.detections), age)
                if self.metrics is not None:
                    self.metrics.frame_age.labels(self.name, arrival.stream).observe(age)
                finished[position] = result
        records = [finished[position] for position in sorted(finished)]
        for arrival, error in batch.failures:
            reader = self._reader(arrival)
            if reader is not None:
                reader.counters.failed(1)
                reader.fail(error)
        if self.metrics is not None:
            if batch.failed_runs:
                self.metrics.inference_errors.labels(self.name).inc(batch.failed_runs)
            if batch.arrivals:
                self.metrics.inference_latency.labels(self.name).observe(
                    batch.preprocess_seconds + batch.inference_seconds + batch.postprocess_seconds
                )
                self.metrics.batch_size.labels(self.name).observe(len(batch.arrivals))
        if records:
            for sink in self.sinks:
                sink.write(records)

    def _finish_record(
        self,
        reader: StreamReader,
        arrival: Arrival,
        result: FrameResult,
        track_ids: np.ndarray | None = None,
        placement: Placement | None = None,
    ) -> FrameResult:
        """The stream's tracker (unless ``track_ids`` is its answer already), cascade, lines
        and zones (``placement``: its tracks placed already) on one frame, then its pictures."""
        if reader.analytics is not None:
            result = self._analyze(reader.analytics, arrival, result, track_ids, placement)
            if self.metrics is not None:
                self.metrics.observe_analytics(self.name, arrival.stream, result)
        elif self.cascade is not None:
            result = self.cascade.apply(
                arrival.frame, result, detected=arrival.detect, live_tracks=None
            )
        if self.outputs is not None and self.outputs.wanted:
            self.outputs.deliver(arrival.frame, result, reader.source_fps)
        return result

    def _stages_ended(self) -> None:
        """The stages stopped: a bug in a stage fails every stream, loudly, once."""
        failure = self.stages.failure
        if failure is not None:
            self.failure = failure
            for reader in self.readers():
                reader.fail(failure)
        for sink in self.sinks:
            end = getattr(sink, "end", None)
            if end is not None:
                end()

    def stop_taking_frames(self) -> None:
        """First step of a graceful stop: every reader stops; queued frames stay to be processed."""
        with self._lock:
            self._taking = False
            readers = [*self.streams.values(), *self._retired]
        for reader in readers:
            reader.stop()

    def finish(self, timeout: float) -> None:
        """Process what is queued, join every thread, then flush and close every sink."""
        self.finish_frames(time.monotonic() + timeout)
        self.start_closing()
        self.close()

    def finish_frames(self, deadline: float) -> None:
        """Stop the readers and process what is queued, by ``deadline`` (or sooner after
        :meth:`hurry`); stages still at work then are given up on, their frames counted."""
        self.stop_taking_frames()
        with self._lock:
            readers = [*self.streams.values(), *self._retired]
        for reader in readers:
            if not self._wait(reader.join, deadline):
                log.error("stream %s: the reader did not stop in time", reader.id)
        self._stopping.set()
        self.stages.finish()
        if not self._wait(self.stages.join, deadline):
            log.error("pipeline %s: %s did not finish in time", self.name, self._holdup())
            self.stages.abort()
            self._wait(self.stages.join, time.monotonic() + 1.0)
        with self._lock:
            readers = [*self.streams.values(), *self._retired]
        for reader in readers:  # a removed one's lane is out, emptied: its abandoned frames
            reader.counters.discarded(self.intake.queued(reader.lane) + self._abandoned(reader))

    def _holdup(self) -> str:
        """What a stop waited on in vain: the stages at work, and the sinks they wait for."""
        stages = sorted({stage for stage, _ in self.stages.stuck(0.0)})
        text = f"the {' and '.join(stages)} stage" if stages else "the model"
        full = [sink.label for sink in self.sinks if getattr(sink, "holding_back", False)]
        if full:
            text += f", waiting for room in the full buffer of {', '.join(full)},"
        return text

    def start_closing(self) -> None:
        """Close the pictures' outputs and start every sink's flush (they flush at once)."""
        if self.outputs is not None:
            self.outputs.close()
        for sink in self.sinks:
            sink.start_flush()

    def close(self) -> None:
        """Wait for every sink's flush (each bounded by its ``flush_timeout_seconds``)."""
        for sink in self.sinks:
            sink.close()
        self._reap()

    def hurry(self, seconds: float) -> None:
        """Cut a stop short (a second signal): stop waiting for the stages and the readers,
        and give every sink ``seconds`` more for the records it holds. Any thread."""
        self._hurried.set()
        self.stages.abort()
        for sink in self.sinks:
            hurry = getattr(sink, "hurry", None)
            if hurry is not None:
                hurry(seconds)

    def _wait(self, join: Callable[[float], bool], deadline: float) -> bool:
        """``join(timeout)`` in short steps until it succeeds, ``deadline`` passes or the stop
        is hurried; whether it succeeded."""
        while True:
            left = deadline - time.monotonic()
            if join(max(0.0, min(left, _JOIN_STEP_SECONDS))):
                return True
            if left <= 0 or self._hurried.is_set():
                return False

    def _abandoned(self, reader: StreamReader) -> int:
        """Frames of ``reader``'s stream the stages took but never delivered nor failed: none
        after a clean finish; those in flight when a stage failed or was given up on."""
        counters = reader.counters
        delivered = counters.frames_processed + counters.frames_failed
        return max(0, reader.lane.taken - delivered)

    @property
    def sinks_failed(self) -> bool:
        """Every sink has failed: nothing this pipeline produces can be delivered."""
        return bool(self.sinks) and all(getattr(s, "error", None) for s in self.sinks)

    @property
    def files_done(self) -> bool:
        """Every stream has ended (finished or failed) and its frames were processed, or the
        stages have stopped (a bug in one), so that what is queued will never be taken."""
        with self._lock:
            readers = list(self.streams.values())
        through = self.intake.queued() == 0 or not self.stages.alive
        return all(not r.running for r in readers) and through

    def not_ready(self) -> list[str]:
        """Why this pipeline is not ready: no running model, failed sinks, or idle streams."""
        with self._lock:
            readers = list(self.streams.values())
        reasons = [
            f"stream {r.id} is {r.state.value}"
            for r in readers
            if r.state not in (SourceState.STREAMING, SourceState.FINISHED)
        ]
        reasons += [
            f"{s.label} has failed" for s in self.sinks if getattr(s, "error", None) is not None
        ]
        reasons += [
            f"{s.label} is retrying: {s.outage}" for s in self.sinks if getattr(s, "outage", None)
        ]
        reasons[:0] = [
            f"pipeline {self.name}: the {stage} stage has been on one batch for {seconds:.0f} s"
            for stage, seconds in self.stages.stuck(self.stall_seconds)
        ]
        if (broken := self.broken()) is not None:
            reasons.insert(0, broken)
        return reasons

    def broken(self) -> str | None:
        """Why this pipeline can take no frame again (its stages died: a bug), or None."""
        if self.stages.alive or self._stopping.is_set():
            return None
        failure = self.failure or self.stages.failure
        why = f"has failed: {describe(failure)}" if failure is not None else "has no running model"
        return f"pipeline {self.name} {why}"

    def samples(self) -> tuple[list[StreamSample], list[SinkSample]]:
        with self._lock:
            readers = list(self.streams.values())
        streams = [stream_sample(r) for r in readers]
        sinks = sink_samples(self.name, self.sinks)
        if self.outputs is not None and (self.outputs.videos or self.outputs.recorders):
            stats = self.outputs.stats()
            sinks.append(
                SinkSample(
                    pipeline=self.name,
                    sink="video",
                    delivered=stats["video_frames_written"],
                    retries=0,
                    failures=stats["video_failures"] + stats["clip_failures"],
                    dropped=stats["video_frames_dropped"],
                    buffered=0,
                )
            )
        return streams, sinks


def sink_samples(pipeline: str, sinks: Sequence[BufferedSink]) -> list[SinkSample]:
    """The metrics figures of a pipeline's record sinks."""
    return [
        SinkSample(
            pipeline=pipeline,
            sink=s.name,
            delivered=s.stats.delivered,
            retries=s.stats.retries,
            failures=s.stats.failures,
            dropped=s.stats.dropped,
            buffered=s.buffered,
            failed=s.error is not None,
        )
        for s in sinks
    ]


class ResultQueue:
    """A sink the caller iterates: records stay :class:`FrameResult` objects, nothing is dropped.

    A full queue makes the pipeline wait for the caller (backpressure), so a
    slow consumer slows detection down instead of losing results.
    """

    name = "results"
    label = "results"
    error = None

    def __init__(self, capacity: int) -> None:
        from vstream.config.sources import FreshnessPolicy

        self._queue: FrameQueue[FrameResult] = FrameQueue(capacity, FreshnessPolicy.BLOCK)
        self.stats = SinkStats()

    @property
    def buffered(self) -> int:
        return len(self._queue)

    def write(self, results: list[FrameResult]) -> None:
        for result in results:
            self.stats.produced += 1
            if not self._queue.put(result):
                self.stats.dropped += 1
                continue
            self.stats.delivered += 1

    def end(self) -> None:
        """No more results will come (the stages ended)."""
        self._queue.close()

    def __iter__(self) -> Iterator[FrameResult]:
        while (result := self._queue.get()) is not None:
            yield result

    def start_flush(self) -> None:
        pass

    def close(self) -> None:
        self._queue.close()
        self._queue.clear()


def _cascade(
    secondary: Sequence[SecondaryConfig],
    detector: Detector,
    analytics: AnalyticsConfig | None = None,
) -> Cascade | None:
    """The secondary models on the detector's device and CUDA stream; None without any.

    ``analytics`` names the tracker's appearance model and holds the lines' and zones'
    attribute filters, whose labels are checked against the models'."""
    if not secondary:
        return None
    from vstream.cascade.stage import Cascade

    tracking = analytics.tracking if analytics is not None else None
    appearance = tracking.appearance if tracking is not None else None
    places = [*analytics.lines, *analytics.zones] if analytics is not None else []
    attribute_filters = [(f"{p.name!r}", p.attributes) for p in places if p.attributes]
    return Cascade(
        secondary,
        detector.class_names,
        device=detector.device,
        cuda_stream=detector.cuda_stream,
        appearance=appearance,
        attribute_filters=attribute_filters,
    )


def detect_iter(
    detector: Detector,
    sources: Sequence[Iterable[Frame] | SourceConfig],
    *,
    secondary: Sequence[SecondaryConfig] = (),
) -> Iterator[FrameResult]:
    """Every frame of every source through ``detector`` on the overlapped stages.

    The way to run a :class:`~vstream.detector.Detector` over any iterables of
    frames (``detect_iter(detector, [frames])``): the same readers, stages and error
    semantics as ``vstream run``. Each source's results come in its own order. A
    stream that fails stops alone; the first failure is raised once every other
    frame has its result. Leaving the iteration early stops every thread before it
    returns. ``secondary``: the cascade's models, run on every detection they select
    (no tracking; :func:`vstream.detect` runs a whole pipeline's options).
    """
    if not sources:
        return
    cascade = _cascade(secondary, detector)
    results = results_for(detector)
    pipeline = Pipeline(
        "detect",
        detector,
        runtime=detector.runtime,
        sinks=[results],
        finish_when_idle=True,
        cascade=cascade,
    )
    yield from iterate(pipeline, results, sources)


def results_for(detector: Detector) -> ResultQueue:
    """The queue a caller iterates, holding what the detector's buffers can have in flight."""
    return ResultQueue(capacity=max(1, detector.batch_size * detector.buffers))


def iterate(
    pipeline: Pipeline, results: ResultQueue, sources: Sequence[Iterable[Frame] | SourceConfig]
) -> Iterator[FrameResult]:
    """Start ``pipeline`` on ``sources`` and yield its ``results`` until every stream ends;
    then raise the first failure, if any (see :func:`detect_iter`)."""
    pipeline.start()
    readers = [
        pipeline.add_stream(source)
        if isinstance(source, SourceConfig)
        else pipeline.add_frames(str(i), source)
        for i, source in enumerate(sources)
    ]
    finished = False

    def finish() -> None:
        nonlocal finished
        if not finished:
            finished = True
            results.close()  # a caller that left early reads no more: never wait for it
            pipeline.finish(timeout=30.0)

    # A caller that leaves the loop early and never closes it leaves the threads running
    # into the interpreter's exit, which tore down ONNX Runtime under a run: "terminate
    # called without an active exception", SIGABRT. Stopped at exit, before that.
    atexit.register(finish)
    try:
        yield from results
    finally:
        atexit.unregister(finish)
        finish()
    failure = pipeline.failure or next((r.error for r in readers if r.error is not None), None)
    if failure is not None:
        raise failure
