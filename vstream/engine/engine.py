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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vstream.config.pipelines import VstreamConfig
from vstream.config.sources import SourceConfig
from vstream.engine.errors import PipelineNotFound, StreamNotFound
from vstream.engine.interface import STARTING, EngineBase
from vstream.engine.pipeline import Pipeline
from vstream.engine.reader import StreamReader
from vstream.engine.status import StreamStatus
from vstream.metrics import LimitSample, Metrics, SinkSample, StreamSample

if TYPE_CHECKING:
    from vstream.clips.catalogue import Catalogue
    from vstream.engine.outputs import Preview

log = logging.getLogger("vstream.engine")


class Engine(EngineBase):
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
        self._started = False
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
        self._stop_at_exit()
        for pipeline in self.pipelines.values():
            pipeline.start()
        for pipeline_config in self.config.pipelines:
            for source in pipeline_config.sources:
                self._start_stream(self.pipelines[pipeline_config.name], source)
        self._started = True

    @property
    def device(self) -> str:
        """Where the models run and how, for the summary line: ``cpu, 2 runs x 1 thread``."""
        detector = next(iter(self.pipelines.values())).detector
        return f"{detector.device}, {detector.plan.runs_text}"

    def readers(self) -> list[StreamReader]:
        return [r for p in self.pipelines.values() for r in list(p.streams.values())]

    def being_removed(self, stream_id: str) -> bool:
        return any(p.being_removed(stream_id) for p in self.pipelines.values())

    def leaving(self) -> list[StreamReader]:
        return [r for p in self.pipelines.values() for r in p.leaving()]

    def _owner(self, stream_id: str) -> Pipeline | None:
        return next((p for p in self.pipelines.values() if stream_id in p.streams), None)

    def _start_stream(self, pipeline: Pipeline, source: SourceConfig) -> StreamReader:
        reader = pipeline.add_stream(source)
        log.debug("stream %s: added to pipeline %s", source.id, pipeline.name)
        return reader

    def attach_preview(self, hub: Preview) -> None:
        """Let every pipeline offer annotated frames to ``hub`` (only while someone watches)."""
        for pipeline in self.pipelines.values():
            if pipeline.outputs is not None:
                pipeline.outputs.preview = hub

    def clips(self) -> Catalogue:
        """Every clips sink's recordings, listed as one (the dashboard's clip list)."""
        from vstream.clips.catalogue import Catalogue

        return Catalogue(
            [r for p in self.pipelines.values() if p.outputs for _, r in p.outputs.recorders]
        )

    def add_stream(self, pipeline: str, source: SourceConfig) -> StreamStatus:
        """Start ``source`` in ``pipeline`` (validated by the caller: the server, the CLI).

        Past a limit of :class:`~vstream.config.LimitsConfig`, nothing starts
        and :class:`LimitExceeded` says which.
        """
        found = self.pipelines.get(pipeline)
        if found is None:
            raise PipelineNotFound(f"no pipeline {pipeline!r}")
        with self._lock:
            self._admit(pipeline, source)
            reader = self._start_stream(found, source)
        log.info("stream %s: added to pipeline %s", source.id, pipeline)
        return reader.status()

    def remove_stream(self, stream_id: str) -> StreamStatus:
        """Stop a stream at once; exactly one caller wins, the others get StreamNotFound."""
        owner = self._owner(stream_id)
        if owner is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        return owner.remove_stream(stream_id).status()

    def not_ready(self) -> list[str]:
        """Reasons the engine is not ready; empty when every stream delivers frames."""
        if self.stopping.is_set():
            return ["shutting down"]
        if not self._started:
            return [STARTING]
        return [reason for p in self.pipelines.values() for reason in p.not_ready()]

    def broken(self) -> list[str]:
        """What only a restart mends: pipelines whose stages died (a bug), each with why."""
        return [why for p in self.pipelines.values() if (why := p.broken()) is not None]

    def files_done(self) -> bool:
        """Every stream has ended and its frames are through (or every sink has failed)."""
        return all(p.files_done or p.sinks_failed for p in self.pipelines.values())

    def _stop(self, timeout: float) -> None:
        log.debug("stopping: finishing frames in flight and flushing sinks")
        for pipeline in self.pipelines.values():
            pipeline.stop_taking_frames()
        self._finish(timeout)

    def _finish(self, timeout: float) -> None:
        """Every pipeline's frames by one deadline, then every sink's flush at once: a stop
        takes ``timeout`` plus the longest ``flush_timeout_seconds``, however many pipelines."""
        deadline = time.monotonic() + timeout
        for pipeline in self.pipelines.values():
            pipeline.finish_frames(deadline)
        for pipeline in self.pipelines.values():
            pipeline.start_closing()
        for pipeline in self.pipelines.values():
            pipeline.close()

    def hurry(self, seconds: float) -> None:
        for pipeline in self.pipelines.values():
            pipeline.hurry(seconds)

    def finished_videos(self) -> dict[str, Any]:
        """The last counters of every annotated video, by its target as logged (after stop)."""
        return {
            target: stats
            for pipeline in self.pipelines.values()
            if pipeline.outputs is not None
            for target, stats in pipeline.outputs.finished.items()
        }

    def _own_failures(self) -> list[BaseException]:
        return [p.failure for p in self.pipelines.values() if p.failure is not None]

    def _record_sinks(self) -> list[Any]:
        return [s for p in self.pipelines.values() for s in p.sinks]

    def _samples(self) -> tuple[list[StreamSample], list[SinkSample], list[LimitSample]]:
        streams: list[StreamSample] = []
        sinks: list[SinkSample] = []
        for pipeline in self.pipelines.values():
            s, k = pipeline.samples()
            streams += s
            sinks += k
        used = self._limit_samples({p.name: len(p.streams) for p in self.pipelines.values()})
        return streams, sinks, used
