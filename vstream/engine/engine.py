"""The engine: every pipeline of a config, started, fed, stopped and counted together.

Every entry point runs this: ``vstream run --source`` (a config built from
flags), ``vstream run CONFIG``, ``vstream serve`` (with the HTTP API on top)
and the Python API. They differ only in when they stop: at the end of the
files, or at a signal. Stopping is always the same three steps: every reader
stops taking frames, every pipeline finishes the frames it holds, every sink
flushes; then every thread has been joined.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from vstream.config.loading import parse_source
from vstream.config.pipelines import LimitsConfig, VstreamConfig
from vstream.config.sources import SourceConfig
from vstream.cores import counted_decoder_threads
from vstream.engine.errors import PipelineNotFound, ShuttingDown, StreamConflict, StreamNotFound
from vstream.engine.pipeline import Pipeline
from vstream.engine.reader import StreamReader
from vstream.errors import LimitExceeded, VstreamError
from vstream.metrics import LimitSample, Metrics, SinkSample, StreamSample

log = logging.getLogger("vstream.engine")

_POLL_SECONDS = 0.2


def stream_request(body: Any, config: VstreamConfig, base_dir: Path) -> tuple[str, SourceConfig]:
    """The pipeline name and the validated source of a ``POST /streams`` body.

    The body is a source as in the config, plus ``pipeline`` when there are
    several; file sources must lie under ``server.allowed_paths``.
    """
    if not isinstance(body, dict):
        raise VstreamError("the body must be a JSON object describing a source")
    body = dict(body)
    names = [p.name for p in config.pipelines]
    name = body.pop("pipeline", None)
    if name is None:
        if len(names) != 1:
            raise VstreamError("say which pipeline: 'pipeline' is one of " + ", ".join(names))
        name = names[0]
    if not isinstance(name, str) or name not in names:
        raise PipelineNotFound(f"no pipeline {name!r}; choose from " + ", ".join(names))
    source = parse_source(body, base_dir=base_dir, allowed_paths=config.server.allowed_paths)
    return name, source


def check_limits(
    limits: LimitsConfig,
    source: SourceConfig,
    *,
    pipeline: str,
    streams: int,
    in_pipeline: int,
    decoder_threads: int,
) -> None:
    """Refuse ``source`` with :class:`LimitExceeded` if starting it would pass a limit."""
    if streams >= limits.max_streams:
        raise LimitExceeded(f"limits.max_streams reached ({limits.max_streams} streams)")
    if in_pipeline >= limits.max_streams_per_pipeline:
        raise LimitExceeded(
            f"limits.max_streams_per_pipeline reached in pipeline {pipeline} "
            f"({limits.max_streams_per_pipeline} streams)"
        )
    threads = decoder_threads + counted_decoder_threads(source.decoder_threads)
    if threads > limits.max_decoder_threads:
        raise LimitExceeded(
            f"limits.max_decoder_threads would be exceeded ({threads} of "
            f"{limits.max_decoder_threads})"
        )


@dataclass(frozen=True)
class StreamSummary:
    """What happened to one stream, for the summary lines and the exit status."""

    id: str
    pipeline: str
    state: str
    frames: int
    detections: int
    dropped: int
    failed_frames: int
    error: str | None


_Engine = TypeVar("_Engine", bound="Running")


class Running:
    """What every engine shares: it is a context manager, and it can be waited on.

    :class:`Engine` runs the pipelines in this process;
    :class:`vstream.cluster.driver.ClusterEngine` places their streams on a
    cluster. Both define ``start``, ``stop`` and ``files_done``.
    """

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        raise NotImplementedError

    def files_done(self) -> bool:
        raise NotImplementedError

    def __enter__(self: _Engine) -> _Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait(self, stop: threading.Event, *, until_files_done: bool) -> None:
        """Block until ``stop`` is set (or, with ``until_files_done``, every stream has ended).

        Waits in short steps: Python runs a signal handler only when the main
        thread is back in the interpreter, which an untimed wait never does.
        """
        while not stop.wait(_POLL_SECONDS):
            if until_files_done and self.files_done():
                return


class Engine(Running):
    """All pipelines of a config, with one metrics registry, started and stopped together.

    Stream ids are unique across pipelines, so the API addresses a stream by
    id alone. Use as a context manager, or call :meth:`start` and
    :meth:`stop`.
    """

    def __init__(self, config: VstreamConfig, *, base_dir: Path | None = None) -> None:
        self.config = config
        self.base_dir = base_dir or Path.cwd()
        self.metrics = Metrics()
        self.pipelines: dict[str, Pipeline] = {}
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._started_at: float | None = None
        self._stopped = False
        try:
            for pipeline in config.pipelines:
                log.info("pipeline %s: loading %s", pipeline.name, Path(pipeline.model.path).name)
                self.pipelines[pipeline.name] = Pipeline.from_config(pipeline, self.metrics)
        except BaseException:
            self._finish(timeout=5.0)
            raise
        self.metrics.watch(self._samples)

    def start(self) -> None:
        """Start every pipeline and every source of the config."""
        import torch

        # Process-wide, so set here on the main thread before any stage thread exists
        # (threads inherit it); never from a worker thread.
        torch.set_num_threads(self.config.pipelines[0].runtime.torch_threads)
        self._started_at = time.monotonic()
        for pipeline in self.pipelines.values():
            pipeline.start()
        for pipeline_config in self.config.pipelines:
            for source in pipeline_config.sources:
                self._start_stream(self.pipelines[pipeline_config.name], source)

    @property
    def device(self) -> str:
        """Where the models run and how, for the summary line: ``cpu, 2 runs x 1 thread``."""
        detector = next(iter(self.pipelines.values())).detector
        return f"{detector.device}, {detector.plan.runs_text}"

    @property
    def elapsed_seconds(self) -> float:
        return time.monotonic() - self._started_at if self._started_at is not None else 0.0

    def readers(self) -> list[StreamReader]:
        return [r for p in self.pipelines.values() for r in list(p.streams.values())]

    def _owner(self, stream_id: str) -> Pipeline | None:
        return next((p for p in self.pipelines.values() if stream_id in p.streams), None)

    def _start_stream(self, pipeline: Pipeline, source: SourceConfig) -> StreamReader:
        reader = pipeline.add_stream(source)
        log.debug("stream %s: added to pipeline %s", source.id, pipeline.name)
        return reader

    def attach_preview(self, hub: Any) -> None:
        """Let every pipeline offer annotated frames to ``hub`` (only while someone watches)."""
        for pipeline in self.pipelines.values():
            if pipeline.outputs is not None:
                pipeline.outputs.preview = hub

    def clips(self) -> Any:
        """Every clips sink's recordings, listed as one (the dashboard's clip list)."""
        from vstream.clips.catalogue import Catalogue

        return Catalogue(
            [r for p in self.pipelines.values() if p.outputs for _, r in p.outputs.recorders]
        )

    def decoder_threads(self) -> int:
        """FFmpeg threads the running streams count against ``limits.max_decoder_threads``."""
        return sum(
            counted_decoder_threads(r.config.decoder_threads) if r.config is not None else 0
            for r in self.readers()
        )

    def streams(self) -> list[dict[str, Any]]:
        return [r.describe() for r in self.readers()]

    def stream(self, stream_id: str) -> dict[str, Any]:
        owner = self._owner(stream_id)
        reader = owner.streams.get(stream_id) if owner is not None else None
        if reader is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        return reader.describe()

    def add_stream(self, body: Any) -> dict[str, Any]:
        """Start a source given like a config entry (plus ``pipeline`` if there are several).

        File sources must lie under ``server.allowed_paths``. Past a limit of
        :class:`~vstream.config.LimitsConfig`, nothing starts and
        :class:`LimitExceeded` says which.
        """
        name, source = stream_request(body, self.config, self.base_dir)
        pipeline = self.pipelines[name]
        with self._lock:
            if self.stopping.is_set():
                raise ShuttingDown("shutting down: no new streams")
            if self._owner(source.id) is not None:
                raise StreamConflict(f"a stream with id {source.id!r} is already running")
            check_limits(
                self.config.limits,
                source,
                pipeline=name,
                streams=len(self.readers()),
                in_pipeline=len(pipeline.streams),
                decoder_threads=self.decoder_threads(),
            )
            reader = self._start_stream(pipeline, source)
        log.info("stream %s: added to pipeline %s", source.id, pipeline.name)
        return reader.describe()

    def remove_stream(self, stream_id: str) -> dict[str, Any]:
        """Stop a stream at once; exactly one caller wins, the others get StreamNotFound."""
        owner = self._owner(stream_id)
        if owner is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        return owner.remove_stream(stream_id).describe()

    def not_ready(self) -> list[str]:
        """Reasons the engine is not ready; empty when every stream delivers frames."""
        if self.stopping.is_set():
            return ["shutting down"]
        return [reason for p in self.pipelines.values() for reason in p.not_ready()]

    def files_done(self) -> bool:
        """Every stream has ended and its frames are through (or every sink has failed)."""
        return all(p.files_done or p.sinks_failed for p in self.pipelines.values())

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking frames, finish what is in flight, flush every sink, join every thread."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self.stopping.set()
        log.debug("stopping: finishing frames in flight and flushing sinks")
        for pipeline in self.pipelines.values():
            pipeline.stop_taking_frames()
        self._finish(timeout)

    def _finish(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for pipeline in self.pipelines.values():
            pipeline.finish(max(0.0, deadline - time.monotonic()))

    def summary(self) -> list[StreamSummary]:
        """One entry per stream still known to the engine."""
        return [
            StreamSummary(
                id=r.id,
                pipeline=r.pipeline,
                state=r.state.value,
                frames=r.counters.frames_processed,
                detections=r.counters.detections,
                dropped=r.frames_dropped,
                failed_frames=r.counters.frames_failed,
                error=r.error_text,
            )
            for r in self.readers()
        ]

    def finished_videos(self) -> dict[str, Any]:
        """The last counters of every annotated video, by its target as logged (after stop)."""
        return {
            target: stats
            for pipeline in self.pipelines.values()
            if pipeline.outputs is not None
            for target, stats in pipeline.outputs.finished.items()
        }

    def failures(self) -> list[BaseException]:
        """What failed streams, stages and sinks, first-come."""
        found: list[BaseException] = []
        for pipeline in self.pipelines.values():
            if pipeline.failure is not None:
                found.append(pipeline.failure)
            found += [r.error for r in pipeline.streams.values() if r.error is not None]
            found += [s.error for s in pipeline.sinks if getattr(s, "error", None) is not None]
        return found

    def _samples(self) -> tuple[list[StreamSample], list[SinkSample], list[LimitSample]]:
        streams: list[StreamSample] = []
        sinks: list[SinkSample] = []
        for pipeline in self.pipelines.values():
            s, k = pipeline.samples()
            streams += s
            sinks += k
        used = limit_samples(
            self.config.limits,
            streams=len(self.readers()),
            decoder_threads=self.decoder_threads(),
            per_pipeline={p.name: len(p.streams) for p in self.pipelines.values()},
        )
        return streams, sinks, used


def limit_samples(
    limits: LimitsConfig, *, streams: int, decoder_threads: int, per_pipeline: dict[str, int]
) -> list[LimitSample]:
    """Each limit and how much of it is in use, for the metrics."""
    used = [
        LimitSample("max_streams", limits.max_streams, streams),
        LimitSample("max_decoder_threads", limits.max_decoder_threads, decoder_threads),
    ]
    used += [
        LimitSample(f"max_streams_per_pipeline:{name}", limits.max_streams_per_pipeline, count)
        for name, count in per_pipeline.items()
    ]
    return used
