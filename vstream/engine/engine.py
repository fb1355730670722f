"""The runtime of ``vstream serve`` and ``vstream run CONFIG``: every pipeline of a config."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from vstream.config.loading import parse_source
from vstream.config.models import VstreamConfig
from vstream.errors import VstreamError
from vstream.metrics import Metrics, SinkSample, StreamSample
from vstream.runtime.errors import PipelineNotFound, StreamConflict, StreamNotFound
from vstream.runtime.pipeline import PipelineRuntime

log = logging.getLogger("vstream.runtime")


class Runtime:
    """All pipelines of a config, with one metrics registry, started and stopped together.

    Stream ids are unique across pipelines, so the API can address a stream by
    id alone. Shutdown is in three steps: every reader stops taking frames,
    every pipeline finishes the frames it holds, every sink flushes.
    """

    def __init__(self, config: VstreamConfig, *, base_dir: Path | None = None) -> None:
        self.config = config
        self.base_dir = base_dir or Path.cwd()
        self.metrics = Metrics()
        self.pipelines: dict[str, PipelineRuntime] = {}
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        try:
            for pipeline in config.pipelines:
                log.info("pipeline %s: loading %s", pipeline.name, Path(pipeline.model.path).name)
                self.pipelines[pipeline.name] = PipelineRuntime(pipeline, self.metrics)
        except BaseException:
            self._finish(timeout=5.0)
            raise
        self.metrics.watch(self._samples)

    def start(self) -> None:
        for pipeline in self.pipelines.values():
            pipeline.start()

    def _samples(self) -> tuple[list[StreamSample], list[SinkSample]]:
        streams: list[StreamSample] = []
        sinks: list[SinkSample] = []
        for pipeline in self.pipelines.values():
            s, k = pipeline.samples()
            streams += s
            sinks += k
        return streams, sinks

    def _owner(self, stream_id: str) -> PipelineRuntime | None:
        return next((p for p in self.pipelines.values() if stream_id in p.streams), None)

    def streams(self) -> list[dict[str, Any]]:
        return [r.describe() for p in self.pipelines.values() for r in list(p.streams.values())]

    def stream(self, stream_id: str) -> dict[str, Any]:
        owner = self._owner(stream_id)
        if owner is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        return owner.streams[stream_id].describe()

    def add_stream(self, body: Any) -> dict[str, Any]:
        """Start a source given like a config entry (plus ``pipeline`` if there are several)."""
        if not isinstance(body, dict):
            raise VstreamError("the body must be a JSON object describing a source")
        body = dict(body)
        name = body.pop("pipeline", None)
        if name is None:
            if len(self.pipelines) != 1:
                raise VstreamError(
                    "say which pipeline: 'pipeline' is one of " + ", ".join(self.pipelines)
                )
            name = next(iter(self.pipelines))
        pipeline = self.pipelines.get(name) if isinstance(name, str) else None
        if pipeline is None:
            raise PipelineNotFound(
                f"no pipeline {name!r}; choose from " + ", ".join(self.pipelines)
            )
        source = parse_source(body, base_dir=self.base_dir)
        with self._lock:
            if self.stopping.is_set():
                raise VstreamError("shutting down: no new streams")
            if self._owner(source.id) is not None:
                raise StreamConflict(f"a stream with id {source.id!r} is already running")
            reader = pipeline.add_stream(source)
        log.info("stream %s: added to pipeline %s", source.id, pipeline.name)
        return reader.describe()

    def remove_stream(self, stream_id: str) -> dict[str, Any]:
        owner = self._owner(stream_id)
        if owner is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        return owner.remove_stream(stream_id).describe()

    def not_ready(self) -> list[str]:
        """Reasons the runtime is not ready; empty when every stream delivers frames."""
        if self.stopping.is_set():
            return ["shutting down"]
        return [reason for p in self.pipelines.values() for reason in p.not_ready()]

    def files_done(self) -> bool:
        return all(p.files_done for p in self.pipelines.values())

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop taking frames, finish what is in flight, flush every sink."""
        with self._lock:
            self.stopping.set()
        log.info("shutting down: finishing frames in flight and flushing sinks")
        for pipeline in self.pipelines.values():
            pipeline.stop_taking_frames()
        self._finish(timeout)

    def _finish(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for pipeline in self.pipelines.values():
            pipeline.finish(max(0.0, deadline - time.monotonic()))
