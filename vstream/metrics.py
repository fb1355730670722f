"""Prometheus metrics of one vstream process.

Each process (each :class:`Metrics`) has its own registry, so tests and
embedding programs never see each other's numbers. Stream and sink figures are
read from the runtime when ``/metrics`` is scraped, so a removed stream simply
stops being reported; latency and batch-size histograms are observed by the
inference loops. Labels are pipeline, stream and sink *names*, never a URI, so
credentials cannot leak into metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vstream.sources.base import SourceState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Counters' *_created series double what every scrape carries and tell nothing here.
disable_created_metrics()


@dataclass(frozen=True)
class StreamSample:
    """One stream's figures at scrape time."""

    pipeline: str
    stream: str
    state: str
    frames_decoded: int
    frames_processed: int
    frames_failed: int
    frames_dropped: int
    reconnects: int
    fps: float
    frame_age_seconds: float | None
    frames_skipped: int = 0
    packets_skipped: int = 0
    frames_detected: int | None = None
    """Frames sent to the detector, where the stream's cadence skips some; None otherwise."""
    frames_predicted: int | None = None
    frames_motion_skipped: int | None = None
    frames_adapted: int | None = None


@dataclass(frozen=True)
class SinkSample:
    """One sink's counters at scrape time."""

    pipeline: str
    sink: str
    delivered: int
    retries: int
    failures: int
    dropped: int
    buffered: int
    failed: bool = False


@dataclass(frozen=True)
class LimitSample:
    """One deployment limit and how much of it is in use."""

    name: str
    limit: int
    used: int


@dataclass(frozen=True)
class ClusterSample:
    """A cluster driver's figures at scrape time: its workers, their losses, the moves."""

    workers: dict[str, int]
    """Worker slots by state: starting (loading, or waiting for resources), ready, failed."""
    worker_failures: int
    worker_restarts: int
    stream_moves: int
    stream_stalls: int
    """Streams moved because their worker sent none of their records for too long."""
    streams_waiting: int
    records_received: int
    records_dropped: dict[str, int]
    """Records from workers not delivered, by reason: removed (the stream was), duplicate."""
    gap_seconds: list[tuple[str, str, float]]
    """Per (pipeline, stream): seconds of live video lost to worker losses."""


WORKER_STATES = ("starting", "ready", "failed")

Samples = Callable[[], tuple[Iterable[StreamSample], Iterable[SinkSample], Iterable[LimitSample]]]


class _RuntimeCollector(Collector):
    def __init__(self, samples: Samples) -> None:
        self._samples = samples

    def collect(self) -> Iterator[Metric]:
        streams, sinks, limits = (list(part) for part in self._samples())
        labels = ["pipeline", "stream"]
        counters = {
            "frames_decoded": "Frames the source decoded",
            "frames_processed": "Frames that went through the model",
            "frames_failed": "Frames whose preprocessing, inference or postprocessing failed",
            "frames_dropped": "Frames dropped before inference (freshness policy, removal)",
            "frames_skipped": "Frames decoded but not selected (start, end, stride); "
            "decoded = processed + failed + dropped + skipped",
            "packets_skipped": "Packets of a live source read and not decoded, each a frame "
            "lost: before the connection's first key frame, or the stream had fallen "
            "max_behind_seconds behind its camera",
            "reconnects": "Reconnections of a live source",
        }
        for field, doc in counters.items():
            family = CounterMetricFamily(f"vstream_stream_{field}", doc, labels=labels)
            for s in streams:
                family.add_metric([s.pipeline, s.stream], getattr(s, field))
            yield family
        cadence = {
            "frames_detected": "Frames sent to the detector (streams with a detection cadence)",
            "frames_predicted": "Frames whose boxes the tracker predicted instead of detecting",
            "frames_motion_skipped": "Predicted frames the motion gate kept off the detector "
            "(a subset of frames_predicted)",
            "frames_adapted": "Predicted frames detect_every would have detected, kept off the "
            "detector while the live stream was behind (adapt_detect_every)",
        }
        for field, doc in cadence.items():
            family = CounterMetricFamily(f"vstream_stream_{field}", doc, labels=labels)
            for s in streams:
                if getattr(s, field) is not None:
                    family.add_metric([s.pipeline, s.stream], getattr(s, field))
            yield family
        rate = GaugeMetricFamily(
            "vstream_stream_detection_rate",
            "Fraction of the stream's frames sent to the detector so far",
            labels=labels,
        )
        for s in streams:
            if s.frames_detected is not None and s.frames_predicted is not None:
                total = s.frames_detected + s.frames_predicted
                if total:
                    rate.add_metric([s.pipeline, s.stream], s.frames_detected / total)
        yield rate
        fps = GaugeMetricFamily("vstream_stream_fps", "Frames processed per second", labels=labels)
        age = GaugeMetricFamily(
            "vstream_stream_frame_age_seconds",
            "Time from a frame's capture (or arrival) to its result, latest frame",
            labels=labels,
        )
        state = GaugeMetricFamily(
            "vstream_stream_state", "1 for the stream's current state", labels=[*labels, "state"]
        )
        for s in streams:
            fps.add_metric([s.pipeline, s.stream], s.fps)
            if s.frame_age_seconds is not None:
                age.add_metric([s.pipeline, s.stream], s.frame_age_seconds)
            for option in SourceState:
                state.add_metric(
                    [s.pipeline, s.stream, option.value], float(s.state == option.value)
                )
        yield from (fps, age, state)
        sink_labels = ["pipeline", "sink"]
        sink_counters = {
            "delivered": "Records the destination accepted",
            "retries": "Delivery attempts made again after a failure",
            "failures": "Failed delivery attempts",
            "dropped": "Records given up (buffer overflow, rejected, unsent at shutdown)",
        }
        for field, doc in sink_counters.items():
            name = (
                f"vstream_sink_records_{field}"
                if field in ("delivered", "dropped")
                else (f"vstream_sink_{field}")
            )
            family = CounterMetricFamily(name, doc, labels=sink_labels)
            for k in sinks:
                family.add_metric([k.pipeline, k.sink], getattr(k, field))
            yield family
        buffered = GaugeMetricFamily(
            "vstream_sink_buffered_records", "Records waiting to be sent", labels=sink_labels
        )
        failed = GaugeMetricFamily(
            "vstream_sink_failed", "1 when the sink has failed for good", labels=sink_labels
        )
        for k in sinks:
            buffered.add_metric([k.pipeline, k.sink], k.buffered)
            failed.add_metric([k.pipeline, k.sink], float(k.failed))
        yield from (buffered, failed)
        limit = GaugeMetricFamily("vstream_limit", "A deployment limit", labels=["limit"])
        used = GaugeMetricFamily(
            "vstream_limit_used", "How much of a deployment limit is in use", labels=["limit"]
        )
        for item in limits:
            limit.add_metric([item.name], item.limit)
            used.add_metric([item.name], item.used)
        yield from (limit, used)


class _ClusterCollector(Collector):
    def __init__(self, sample: Callable[[], ClusterSample]) -> None:
        self._sample = sample

    def collect(self) -> Iterator[Metric]:
        sample = self._sample()
        workers = GaugeMetricFamily(
            "vstream_cluster_workers", "Cluster worker slots by state", labels=["state"]
        )
        for state in WORKER_STATES:
            workers.add_metric([state], sample.workers.get(state, 0))
        yield workers
        totals = {
            "worker_failures": ("Workers lost (process killed, node lost)", sample.worker_failures),
            "worker_restarts": ("Workers started in place of lost ones", sample.worker_restarts),
            "stream_moves": (
                "Streams moved to another worker after a loss or a stall",
                sample.stream_moves,
            ),
            "stream_stalls": (
                "Streams moved because their worker sent none of their records for too long",
                sample.stream_stalls,
            ),
            "records_received": (
                "Records the driver received from workers",
                sample.records_received,
            ),
        }
        for name, (doc, value) in totals.items():
            family = CounterMetricFamily(f"vstream_cluster_{name}", doc)
            family.add_metric([], value)
            yield family
        waiting = GaugeMetricFamily(
            "vstream_cluster_streams_waiting", "Streams waiting for a worker with room"
        )
        waiting.add_metric([], sample.streams_waiting)
        yield waiting
        dropped = CounterMetricFamily(
            "vstream_cluster_records_dropped",
            "Records from workers not delivered: the stream was removed, or a duplicate",
            labels=["reason"],
        )
        for reason, count in sorted(sample.records_dropped.items()):
            dropped.add_metric([reason], count)
        yield dropped
        gaps = CounterMetricFamily(
            "vstream_cluster_stream_gap_seconds",
            "Seconds of a live stream not seen because its worker was lost",
            labels=["pipeline", "stream"],
        )
        for pipeline, stream, seconds in sample.gap_seconds:
            gaps.add_metric([pipeline, stream], seconds)
        yield gaps


class CascadeFigures(Protocol):
    """What the metrics read of a pipeline's cascade (:class:`vstream.cascade.stage.Cascade`)."""

    def totals(self) -> dict[str, Any]:
        """Per model name: its :class:`~vstream.cascade.counts.ModelCounts` over every stream."""
        ...

    def stream_counts(self) -> dict[str, dict[str, Any]]:
        """Per stream not removed, per model name: its ``ModelCounts``."""
        ...


class _CascadeCollector(Collector):
    """The secondary models' figures, read from each pipeline's cascade at scrape time.

    A removed stream's figures leave its cascade, so its label series go with it.
    """

    def __init__(self) -> None:
        self.cascades: dict[str, CascadeFigures] = {}

    def collect(self) -> Iterator[Metric]:
        labels = ["pipeline", "model"]
        readings = CounterMetricFamily(
            "vstream_secondary_readings",
            "Objects a secondary model gave a reading: fresh (its crop read in that frame) or "
            "cached (the track's last reading carried)",
            labels=[*labels, "reading"],
        )
        runs = CounterMetricFamily(
            "vstream_secondary_runs",
            "Calls of a secondary model: frames with at least one crop to read",
            labels=labels,
        )
        seconds = CounterMetricFamily(
            "vstream_secondary_seconds",
            "Time spent in a secondary model's calls (crops, the model, the copy to the host)",
            labels=labels,
        )
        by_label = CounterMetricFamily(
            "vstream_attribute_readings",
            "Fresh readings of a secondary classifier that gave a label, per stream",
            labels=["pipeline", "stream", "model", "label"],
        )
        for pipeline, cascade in list(self.cascades.items()):
            for model, counts in cascade.totals().items():
                readings.add_metric([pipeline, model, "fresh"], counts.fresh)
                readings.add_metric([pipeline, model, "cached"], counts.cached)
                runs.add_metric([pipeline, model], counts.runs)
                seconds.add_metric([pipeline, model], counts.seconds)
            for stream, models in cascade.stream_counts().items():
                for model, counts in models.items():
                    for label, n in counts.labels.items():
                        by_label.add_metric([pipeline, stream, model, label], n)
        yield from (readings, runs, seconds, by_label)


class Metrics:
    """The registry of one process and the metrics observed directly by inference loops."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.inference_latency = Histogram(
            "vstream_inference_latency_seconds",
            "Time of one batch through preprocessing, the model and postprocessing",
            ["pipeline"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "vstream_inference_batch_size",
            "Frames per inference batch",
            ["pipeline"],
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=self.registry,
        )
        self.frame_age = Histogram(
            "vstream_frame_age_seconds",
            "Time from a frame's capture (or arrival) to its record",
            ["pipeline", "stream"],
            buckets=(0.01, 0.02, 0.04, 0.08, 0.12, 0.16, 0.25, 0.5, 1.0, 2.0, 5.0),
            registry=self.registry,
        )
        self.line_crossings = Counter(
            "vstream_line_crossings",
            "Objects that crossed a counting line, by direction and class",
            ["pipeline", "stream", "line", "direction", "class"],
            registry=self.registry,
        )
        self.zone_occupancy = Gauge(
            "vstream_zone_occupancy",
            "Tracked objects inside a zone in the latest frame",
            ["pipeline", "stream", "zone"],
            registry=self.registry,
        )
        self.inference_errors = Counter(
            "vstream_inference_errors",
            "Model runs (or their postprocessing) that failed, each then run again stream by "
            "stream (frames that failed again have no records: frames_failed)",
            ["pipeline"],
            registry=self.registry,
        )
        self._cascades: _CascadeCollector | None = None

    def observe_analytics(self, pipeline: str, stream: str, result: Any) -> None:
        """Count a frame's line crossings and set its zones' occupancy."""
        for event in result.events or ():
            if event.get("type") == "line_crossing":
                self.line_crossings.labels(
                    pipeline, stream, event["line"], event["direction"], event["label"]
                ).inc()
        for zone, count in (result.zone_occupancy or {}).items():
            self.zone_occupancy.labels(pipeline, stream, zone).set(count)

    def forget_stream(self, pipeline: str, stream: str) -> None:
        """Drop a removed stream's series, so that churn does not grow the registry."""
        for metric in (self.frame_age, self.line_crossings, self.zone_occupancy):
            # prometheus-client lists a metric's label sets only through this attribute.
            for labels in list(metric._metrics):
                if labels[:2] == (pipeline, stream):
                    with contextlib.suppress(KeyError):
                        metric.remove(*labels)

    def watch(self, samples: Samples) -> None:
        """Report the stream and sink figures ``samples`` returns at each scrape."""
        self.registry.register(_RuntimeCollector(samples))

    def watch_cascade(self, pipeline: str, cascade: CascadeFigures) -> None:
        """Report ``pipeline``'s secondary models (readings, runs, time, labels) at each scrape."""
        if self._cascades is None:
            self._cascades = _CascadeCollector()
            self.registry.register(self._cascades)
        self._cascades.cascades[pipeline] = cascade

    def watch_cluster(self, sample: Callable[[], ClusterSample]) -> None:
        """Report a cluster driver's workers, losses and moves at each scrape."""
        self.registry.register(_ClusterCollector(sample))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
