"""The one interface of every engine, and what both engines share, written once.

Two engines run a pipelines file: :class:`~vstream.engine.engine.Engine`
(every pipeline in this process) and
:class:`~vstream.cluster.driver.ClusterEngine` (their streams on the workers
of a Ray cluster). The CLI and the HTTP API hold a :class:`StreamEngine` and
never ask which. :class:`EngineBase` is what the two have in common: waiting,
stopping once, streams by id, admitting a new stream against the limits, the
summary and the failures; each engine supplies only where its streams, sinks
and own failures live (the ``_`` hooks).

Request bodies never reach an engine: the server turns them into a pipeline
name and a validated :class:`~vstream.config.sources.SourceConfig` first.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from vstream.config.pipelines import LimitsConfig, VstreamConfig
from vstream.config.sources import SourceConfig
from vstream.cores import counted_decoder_threads
from vstream.engine.errors import ShuttingDown, StreamConflict, StreamNotFound
from vstream.engine.status import StreamStatus, StreamSummary, StreamView
from vstream.errors import LimitExceeded
from vstream.metrics import LimitSample, Metrics
from vstream.sources.base import SourceState

if TYPE_CHECKING:
    from vstream.clips.catalogue import Catalogue
    from vstream.engine.outputs import Preview
    from vstream.sinks.video.writer import VideoWriterStats

_POLL_SECONDS = 0.2

STARTING = "starting: the config's streams are being added"
"""``/ready``'s reason until :meth:`EngineBase.start` has added every stream of the config."""


class StreamEngine(Protocol):
    """What the CLI and the HTTP API use of an engine, whichever runs the streams."""

    config: VstreamConfig
    base_dir: Path
    """Where relative paths of the config, and of sources added later, start from."""
    metrics: Metrics
    stopping: threading.Event

    @property
    def device(self) -> str: ...

    @property
    def elapsed_seconds(self) -> float: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 30.0) -> None: ...

    def hurry(self, seconds: float) -> None: ...

    def wait(self, stop: threading.Event, *, until_files_done: bool) -> None: ...

    def files_done(self) -> bool: ...

    def not_ready(self) -> list[str]: ...

    def broken(self) -> list[str]: ...

    def streams(self) -> list[StreamStatus]: ...

    def stream(self, stream_id: str) -> StreamStatus: ...

    def readers(self) -> Sequence[StreamView]: ...

    def add_stream(self, pipeline: str, source: SourceConfig) -> StreamStatus: ...

    def remove_stream(self, stream_id: str) -> StreamStatus: ...

    def summary(self) -> list[StreamSummary]: ...

    def failures(self) -> list[BaseException]: ...

    def decoder_threads(self) -> int: ...

    def attach_preview(self, hub: Preview) -> None: ...

    def clips(self) -> Catalogue: ...

    def finished_videos(self) -> dict[str, VideoWriterStats]: ...


_Engine = TypeVar("_Engine", bound="EngineBase")


class EngineBase:
    """What both engines do the same way; each defines the hooks below and start/files_done."""

    config: VstreamConfig
    stopping: threading.Event
    _lock: threading.Lock | threading.RLock
    _started_at: float | None
    _started: bool
    """Every stream of the config added: until then, not ready (an API served before)."""
    _stopped: bool

    # -- the hooks ---------------------------------------------------------------------------

    def start(self) -> None:
        raise NotImplementedError

    def files_done(self) -> bool:
        raise NotImplementedError

    def readers(self) -> Sequence[StreamView]:
        """Every stream the engine knows now (a copy: safe to walk while streams change)."""
        raise NotImplementedError

    def broken(self) -> list[str]:
        """What only a restart of the process mends, each with why (``/health`` says them):
        none here; a cluster starts its lost workers again."""
        return []

    def being_removed(self, stream_id: str) -> bool:
        """Whether a stream of this id is being removed (its id not free yet)."""
        return False

    def leaving(self) -> Sequence[StreamView]:
        """Removed streams still holding their resources (counted against the limits)."""
        return []

    def _stop(self, timeout: float) -> None:
        """Stop taking frames, finish those in flight, flush the sinks (once)."""
        raise NotImplementedError

    def _record_sinks(self) -> list[Any]:
        """Every sink, for the failures."""
        raise NotImplementedError

    def _own_failures(self) -> list[BaseException]:
        """What failed besides streams and sinks (a pipeline's stage, the cluster)."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------

    def __enter__(self: _Engine) -> _Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def elapsed_seconds(self) -> float:
        return time.monotonic() - self._started_at if self._started_at is not None else 0.0

    def wait(self, stop: threading.Event, *, until_files_done: bool) -> None:
        """Block until ``stop`` is set (or, with ``until_files_done``, every stream has ended).

        Waits in short steps: Python runs a signal handler only when the main
        thread is back in the interpreter, which an untimed wait never does.
        """
        while not stop.wait(_POLL_SECONDS):
            if until_files_done and self.files_done():
                return

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking frames, finish what is in flight, flush every sink; once, however called."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self.stopping.set()
        atexit.unregister(self.stop)
        self._stop(timeout)

    def _stop_at_exit(self) -> None:
        """Have the interpreter's exit stop the engine if its user did not: its threads ran
        on into the exit, which tore ONNX Runtime down under a run ("terminate called
        without an active exception", SIGABRT) and lost what the sinks held. Call in start."""
        atexit.register(self.stop)

    def hurry(self, seconds: float) -> None:
        """Cut a stop under way short (a second signal), from any thread: stop waiting for
        frames in flight, give every sink ``seconds`` more for what it holds. An engine
        that cannot leaves its stop as it is; the signal handler's deadline bounds it."""

    def _find(self, stream_id: str) -> StreamView | None:
        return next((s for s in self.readers() if s.id == stream_id), None)

    def streams(self) -> list[StreamStatus]:
        return [s.status() for s in self.readers()]

    def stream(self, stream_id: str) -> StreamStatus:
        found = self._find(stream_id)
        if found is None:
            raise StreamNotFound(f"no stream {stream_id!r}")
        return found.status()

    def _admit(self, pipeline: str, source: SourceConfig) -> None:
        """Refuse a new stream (under the lock) while stopping, on a taken id, past a limit."""
        if self.stopping.is_set():
            raise ShuttingDown("shutting down: no new streams")
        taken = self._find(source.id)
        if taken is not None:
            state = taken.state
            if state in (SourceState.FINISHED, SourceState.FAILED):
                raise StreamConflict(
                    f"a stream with id {source.id!r} has {state.value}; DELETE "
                    f"/streams/{source.id} (its final counts), then add it again"
                )
            raise StreamConflict(f"a stream with id {source.id!r} is already running")
        if self.being_removed(source.id):
            raise StreamConflict(
                f"the stream with id {source.id!r} is being removed; add it again once it is"
            )
        views, leaving = self.readers(), self.leaving()
        check_limits(
            self.config.limits,
            source,
            pipeline=pipeline,
            streams=len(views) + len(leaving),
            in_pipeline=sum(s.pipeline == pipeline for s in [*views, *leaving]),
            decoder_threads=self.decoder_threads(),
            leaving=len(leaving),
        )

    def decoder_threads(self) -> int:
        """FFmpeg threads the streams count against ``limits.max_decoder_threads``."""
        return sum(
            counted_decoder_threads(s.config.decoder_threads) if s.config is not None else 0
            for s in self.readers()
        )

    def summary(self) -> list[StreamSummary]:
        """One entry per stream still known to the engine."""
        return [StreamSummary.of(s) for s in self.readers()]

    def outages(self) -> list[str]:
        """Record sinks whose destination still took nothing when they closed (a full disk,
        a broker down): what they last said, each. Their records were dropped, counted."""
        return [
            f"{s.label}: {s.outage}" for s in self._record_sinks() if getattr(s, "outage", None)
        ]

    def failures(self) -> list[BaseException]:
        """What failed: the engine's own parts, streams and sinks, first-come."""
        found = self._own_failures()
        found += [s.error for s in self.readers() if s.error is not None]
        found += [s.error for s in self._record_sinks() if getattr(s, "error", None) is not None]
        return found

    def _limit_samples(self, per_pipeline: dict[str, int]) -> list[LimitSample]:
        """Each limit and how much of it is in use, for the metrics."""
        limits = self.config.limits
        used = [
            LimitSample("max_streams", limits.max_streams, sum(per_pipeline.values())),
            LimitSample("max_decoder_threads", limits.max_decoder_threads, self.decoder_threads()),
        ]
        used += [
            LimitSample(f"max_streams_per_pipeline:{name}", limits.max_streams_per_pipeline, count)
            for name, count in per_pipeline.items()
        ]
        return used


def check_limits(
    limits: LimitsConfig,
    source: SourceConfig,
    *,
    pipeline: str,
    streams: int,
    in_pipeline: int,
    decoder_threads: int,
    leaving: int = 0,
) -> None:
    """Refuse ``source`` with :class:`LimitExceeded` if starting it would pass a limit;
    ``leaving`` of the streams counted are removed ones still ending."""
    some = f", {leaving} of them removed and still ending" if leaving else ""
    if streams >= limits.max_streams:
        raise LimitExceeded(f"limits.max_streams reached ({limits.max_streams} streams{some})")
    if in_pipeline >= limits.max_streams_per_pipeline:
        raise LimitExceeded(
            f"limits.max_streams_per_pipeline reached in pipeline {pipeline} "
            f"({limits.max_streams_per_pipeline} streams{some})"
        )
    threads = decoder_threads + counted_decoder_threads(source.decoder_threads)
    if threads > limits.max_decoder_threads:
        raise LimitExceeded(
            f"limits.max_decoder_threads would be exceeded ({threads} of "
            f"{limits.max_decoder_threads})"
        )
