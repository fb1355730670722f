"""A running pipeline: one detector, its streams' readers, one inference loop, its sinks."""

from __future__ import annotations

import logging
import threading
import time

import torch

from vstream.config.models import PipelineConfig, SourceConfig
from vstream.errors import ModelError, VstreamError
from vstream.metrics import Metrics, SinkSample, StreamSample
from vstream.pipeline import Detector
from vstream.runtime.errors import StreamNotFound
from vstream.runtime.intake import Arrival, Intake
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
    """Runs one pipeline: readers feed the intake, one thread runs the detector, sinks get records.

    Streams can be added and removed while it runs; each has its own reader
    thread and queue, so that never disturbs the others. The one inference
    thread owns the detector (ONNX Runtime's bound buffers are not shared
    across threads) and only hands records to the sinks, which deliver them
    on their own threads.
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
        self._inference = threading.Thread(
            target=self._infer, name=f"inference-{self.name}", daemon=True
        )
        try:
            for sink in config.sinks:
                self.sinks.append(build_sink(sink, self.name))
        except BaseException:
            self._close_sinks()
            raise

    def start(self) -> None:
        """Start the inference loop and every source in the config."""
        self._inference.start()
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

    def _infer(self) -> None:
        while True:
            arrivals = self.intake.take(self.detector.batch_size, timeout=0.2)
            if not arrivals:
                if self._stopping.is_set() and self.intake.queued() == 0:
                    return
                continue
            frames = [a.frame for a in arrivals]
            started = time.perf_counter()
            try:
                results = self.detector.detect(frames)
            except Exception as exc:
                self._count_failure(arrivals, exc)
                continue
            self.metrics.inference_latency.labels(self.name).observe(time.perf_counter() - started)
            self.metrics.batch_size.labels(self.name).observe(len(frames))
            now = time.time()
            for arrival in arrivals:
                reader = self.streams.get(arrival.frame.stream_id)
                if reader is not None:
                    reader.count_processed(arrival.captured_at, now)
            for sink in self.sinks:
                sink.write(results)

    def _count_failure(self, arrivals: list[Arrival], exc: Exception) -> None:
        self.metrics.inference_errors.labels(self.name).inc()
        for arrival in arrivals:
            reader = self.streams.get(arrival.frame.stream_id)
            if reader is not None:
                reader.frames_discarded += 1
        log.error(
            "pipeline %s: inference failed for %d frames: %s: %s",
            self.name,
            len(arrivals),
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
        if self._inference.ident is not None:
            self._inference.join(max(0.0, deadline - time.monotonic()))
        if self._inference.is_alive():
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
        if not self._inference.is_alive() and not self._stopping.is_set():
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
