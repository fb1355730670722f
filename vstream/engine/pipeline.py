"""A running pipeline: one detector, its streams' readers, overlapped stages, its sinks."""

from __future__ import annotations

import logging
import threading
import time

import torch

from vstream.config.models import PipelineConfig, SourceConfig
from vstream.errors import ModelError, VstreamError
from vstream.metrics import Metrics, SinkSample, StreamSample
from vstream.pipeline import Detector
from vstream.pipeline.intake import Intake
from vstream.pipeline.stages import Batch, OverlappedStages
from vstream.runtime.errors import StreamNotFound
from vstream.runtime.stream import StreamReader
from vstream.sinks.buffered import BufferedSink
from vstream.sinks.factory import build_sink
from vstream.sources import SourceState

log = logging.getLogger("vstream.runtime")

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}


def load_detector(config: PipelineConfig) -> Detector:
    """The pipeline's detector, checked against the config's expected input type."""
    detector = Detector(**config.detector_kwargs())
    expected = config.model.dtype
    actual = detector.engine.input.dtype
    if expected != "auto" and _TORCH_DTYPES[expected] != actual:
        raise ModelError(
            f"pipeline {config.name}: model input is {str(actual).removeprefix('torch.')}, "
            f"the config says {expected}"
        )
    return detector


class PipelineRuntime:
    """Runs one pipeline: readers feed the intake, the stages run the detector, sinks get records.

    Streams can be added and removed while it runs; each has its own reader
    thread and queue, so that never disturbs the others. Frames of all
    streams are batched together by the overlapped stages (preprocessing,
    model, postprocessing on a thread each, see
    :mod:`vstream.pipeline.stages`), which own the detector; the last stage
    only hands records to the sinks, which deliver them on their own threads.
    """

    def __init__(self, config: PipelineConfig, metrics: Metrics) -> None:
        self.config = config
        self.name = config.name
        self.metrics = metrics
        self.detector = load_detector(config)
        self.intake = Intake()
        self.streams: dict[str, StreamReader] = {}
        self.sinks: list[BufferedSink] = []
        self._lock = threading.Lock()
        self._taking = True
        self._stopping = threading.Event()
        self.stages = OverlappedStages(
            self.detector,
            self.intake,
            self._deliver,
            batch_timeout=config.runtime.batch_timeout_seconds,
            torch_threads=config.runtime.torch_threads,
            name=self.name,
        )
        try:
            for sink in config.sinks:
                self.sinks.append(build_sink(sink, self.name))
        except BaseException:
            self._close_sinks()
            raise

    def start(self) -> None:
        """Start the stages and every source in the config."""
        self.stages.start()
        for source in self.config.sources:
            self.add_stream(source)

    def add_stream(self, config: SourceConfig) -> StreamReader:
        """Start reading ``config``'s source; the caller checks that its id is free."""
        with self._lock:
            if not self._taking:
                raise VstreamError(f"pipeline {self.name} is shutting down")
            reader = StreamReader(
                config, pipeline=self.name, intake=self.intake, device=self.detector.device
            )
            self.streams[config.id] = reader
        reader.start()
        return reader

    def remove_stream(self, stream_id: str, timeout: float = 10.0) -> StreamReader:
        """Stop a stream, let the model finish its queued frames, and forget it."""
        reader = self.streams.get(stream_id)
        if reader is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        reader.stop()
        reader.join(timeout)
        self.intake.wait_drained(stream_id, timeout)
        with self._lock:
            self.streams.pop(stream_id, None)
        left = self.intake.unregister(stream_id)
        reader.frames_discarded += left
        log.info("stream %s: removed", stream_id)
        return reader

    def _deliver(self, batch: Batch) -> None:
        """A finished batch, on the postprocessing thread: count it and hand it to the sinks."""
        if batch.error is not None:
            self._count_failure(batch)
            return
        self.metrics.inference_latency.labels(self.name).observe(
            batch.preprocess_seconds + batch.inference_seconds + batch.postprocess_seconds
        )
        self.metrics.batch_size.labels(self.name).observe(len(batch.arrivals))
        now = time.time()
        for arrival in batch.arrivals:
            reader = self.streams.get(arrival.frame.stream_id)
            if reader is not None:
                reader.count_processed(arrival.captured_at, now)
        for sink in self.sinks:
            sink.write(batch.results)

    def _count_failure(self, batch: Batch) -> None:
        exc = batch.error
        self.metrics.inference_errors.labels(self.name).inc()
        for arrival in batch.arrivals:
            reader = self.streams.get(arrival.frame.stream_id)
            if reader is not None:
                reader.frames_discarded += 1
        log.error(
            "pipeline %s: inference failed for %d frames: %s: %s",
            self.name,
            len(batch.arrivals),
            type(exc).__name__,
            exc,
        )

    def stop_taking_frames(self) -> None:
        """First step of shutdown: every reader stops; queued frames stay to be processed."""
        with self._lock:
            self._taking = False
            readers = list(self.streams.values())
        for reader in readers:
            reader.stop()

    def finish(self, timeout: float) -> None:
        """Process what is queued, then flush and close every sink."""
        deadline = time.monotonic() + timeout
        for reader in list(self.streams.values()):
            reader.join(max(0.0, deadline - time.monotonic()))
        self._stopping.set()
        self.stages.finish()
        if not self.stages.join(max(0.0, deadline - time.monotonic())):
            log.error("pipeline %s: inference did not finish in time", self.name)
        self._close_sinks()

    def _close_sinks(self) -> None:
        for sink in self.sinks:
            sink.start_flush()
        for sink in self.sinks:
            sink.close()
            stats = sink.stats
            log.info(
                "%s: %d records delivered, %d dropped", sink.label, stats.delivered, stats.dropped
            )

    @property
    def files_done(self) -> bool:
        """Every stream has ended (finished or failed) and its frames were processed."""
        readers = list(self.streams.values())
        return all(not r.running for r in readers) and self.intake.queued() == 0

    def not_ready(self) -> list[str]:
        """Why this pipeline is not ready: no inference loop, or streams not delivering frames."""
        reasons = [
            f"stream {r.id} is {r.state.value}"
            for r in list(self.streams.values())
            if r.state not in (SourceState.STREAMING, SourceState.FINISHED)
        ]
        if not self.stages.alive and not self._stopping.is_set():
            reasons.insert(0, f"pipeline {self.name} has no running inference loop")
        return reasons

    def samples(self) -> tuple[list[StreamSample], list[SinkSample]]:
        streams = []
        for reader in list(self.streams.values()):
            stats = reader.source_stats
            streams.append(
                StreamSample(
                    pipeline=self.name,
                    stream=reader.id,
                    state=reader.state.value,
                    frames_decoded=stats.frames_decoded,
                    frames_processed=reader.frames_processed,
                    frames_dropped=stats.frames_dropped + reader.frames_discarded,
                    reconnects=stats.reconnects,
                    fps=reader.fps(),
                    frame_age_seconds=reader.frame_age_seconds,
                )
            )
        sinks = [
            SinkSample(
                pipeline=self.name,
                sink=s.name,
                delivered=s.stats.delivered,
                retries=s.stats.retries,
                failures=s.stats.failures,
                dropped=s.stats.dropped,
                buffered=s.buffered,
            )
            for s in self.sinks
        ]
        return streams, sinks
