"""The cascade as a pipeline step: every secondary model of a pipeline, run on each frame.

Runs on the postprocessing thread after the tracker (:meth:`Cascade.apply`),
where the decoded frame is still on its device, so crops are cut there and
only the result columns come back. Each model keeps one
:class:`~vstream.cascade.attributes.AttributeCache` per stream, so a tracked
object is read again only when its reading is old or its box has grown; a
frame the detector skipped (its boxes predicted by the tracker) is not read
at all: its tracked objects carry their last reading, marked not fresh.

The model named by ``tracking.appearance`` (an embedding) also runs before
the tracker, on every detection of a detected frame it selects
(:meth:`Cascade.embed`): the tracker needs every box's look to associate it,
so nothing is cached there. Its vectors go into records only with
``keep_embedding``: then :meth:`Cascade.apply` takes those of the kept detections,
all fresh, without reading them again.

Lines and zones count by attribute (their ``attributes`` filter) with each
track's last classifier readings, given by :meth:`Cascade.attributes_of`.

The result is one :data:`~vstream.results.ATTRIBUTES` data column on the
frame's :class:`~vstream.results.Detections`: per detection, the values its
records write under ``"attributes"`` (``{name: {"label", "score", "fresh"}}``),
or None where no model read it. Kept as record values rather than numeric
columns because the labels, thresholds and ``keep_embedding`` that shape them
belong to the model, which the records do not know.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from vstream.analytics.events import NO_ATTRIBUTES, AttributesOf, Reading, TrackAttributes
from vstream.cascade.attributes import (
    AttributeCache,
    Attributes,
    labels_given,
    record_values,
)
from vstream.cascade.counts import ModelCounts, StreamAttributeCounts, add_to, label_counts
from vstream.cascade.model import SecondaryModel, SecondaryOutput
from vstream.config.secondary import SecondaryConfig, check_filter_labels, check_on_classes
from vstream.errors import describe
from vstream.frame import Frame
from vstream.results import ATTRIBUTES, Detections, FrameResult

log = logging.getLogger("vstream.cascade")

_NO_BOXES = np.zeros((0, 4), dtype=np.float32)
"""What :meth:`SecondaryModel.run` reads to give an empty result of the model's width."""


class Cascade:
    """The secondary models of one pipeline, built once on its device and CUDA stream."""

    def __init__(
        self,
        configs: Iterable[SecondaryConfig],
        class_names: Mapping[int, str],
        *,
        device: Any,
        cuda_stream: Any = None,
        appearance: str | None = None,
        attribute_filters: Iterable[tuple[str, Mapping[str, list[str]]]] = (),
    ) -> None:
        """Checks each model's ``on.classes`` against the detector's ``class_names`` first
        (one line, a ModelError), before any model is loaded; then the labels of the
        lines' and zones' ``attribute_filters`` (``(place, {model: labels})``) against
        the models'. ``appearance``: the name of the embedding model the tracker uses."""
        configs = list(configs)
        for config in configs:
            check_on_classes(config, class_names)
        self.models = [
            SecondaryModel(config, device=device, cuda_stream=cuda_stream) for config in configs
        ]
        by_name = {model.config.name: model for model in self.models}
        for place, wanted in attribute_filters:
            for name, labels in wanted.items():
                check_filter_labels(place, name, labels, by_name[name].labels)
        self.appearance = by_name[appearance] if appearance is not None else None
        self._caches: dict[tuple[str, int], AttributeCache] = {}
        self._counts: dict[str, StreamAttributeCounts] = {}
        self._totals = {model.name: ModelCounts() for model in self.models}
        """Per model, every stream's figures added up; only grows (the metrics' counters)."""
        self._lock = threading.Lock()

    def _cache(self, stream_id: str, index: int) -> AttributeCache:
        """The stream's readings by model ``index``, kept from :meth:`counts` until
        :meth:`remove_stream`. A stream not counted (a frame finished after its stream's
        removal) gets a cache kept by nobody: one stored here would never be removed."""
        key = (stream_id, index)
        with self._lock:
            cache = self._caches.get(key)
            if cache is None:
                config = self.models[index].config
                cache = AttributeCache(config.reinfer_seconds, config.regrow)
                if stream_id in self._counts:
                    self._caches[key] = cache
            return cache

    def embed(self, frame: Frame, detections: Detections) -> np.ndarray | None:
        """``(N, D)`` unit rows: the appearance model's vector of every detection it selects
        (zeros for the rest, and for a row that is no reading:
        :meth:`SecondaryOutput.readable`), for the tracker; None without an appearance
        model. Counted as fresh readings of the model."""
        model = self.appearance
        if model is None:
            return None
        selected = model.select(detections.xyxy, detections.class_id)
        vectors = np.zeros((len(detections), model.spec.output_size), dtype=np.float32)
        tally = ModelCounts()
        if selected.any():
            read = _timed_run(model, frame, detections.xyxy[selected], tally)
            readable = read.readable()
            vectors[np.flatnonzero(selected)[readable]] = read.take(readable).embeddings
            tally.fresh = int(readable.sum())
        with self._lock:
            counts = self._counts.get(frame.stream_id)
        self._add(counts, model, tally)
        return vectors

    def attributes_of(self, stream_id: str) -> AttributesOf:
        """A track's last classifier readings in ``stream_id``, by model name (the lines'
        and zones' ``attributes`` filters read them)."""
        readers = [
            (model, self._cache(stream_id, index))
            for index, model in enumerate(self.models)
            if model.config.kind == "classifier"
        ]

        def of(track_id: int) -> TrackAttributes:
            found: dict[str, Reading] = {}
            for model, cache in readers:
                last = cache.last(track_id)
                if last is not None:
                    found[model.config.name] = _reading(last, model)
            return found or NO_ATTRIBUTES

        return of

    def counts(self, stream_id: str) -> StreamAttributeCounts:
        """The stream's figures per model, counted from now until it is removed.

        The engine asks for them as it adds the stream; a stream never asked
        for (or removed) is counted in :meth:`totals` only, and keeps no
        readings, so a frame delivered after its stream's removal brings back
        neither figures nor readings.
        """
        with self._lock:
            counts = self._counts.get(stream_id)
            if counts is None:
                counts = self._counts[stream_id] = StreamAttributeCounts(
                    [model.name for model in self.models]
                )
            return counts

    def totals(self) -> dict[str, ModelCounts]:
        """Per model name, the pipeline's figures over every stream, removed ones included."""
        with self._lock:
            return {name: counts.copy() for name, counts in self._totals.items()}

    def stream_counts(self) -> dict[str, dict[str, ModelCounts]]:
        """Per stream not removed, its figures per model name."""
        with self._lock:
            streams = list(self._counts.items())
        return {stream_id: counts.snapshot() for stream_id, counts in streams}

    def apply(
        self,
        frame: Frame,
        result: FrameResult,
        *,
        detected: bool,
        live_tracks: Iterable[int] | None,
        embeddings: np.ndarray | None = None,
    ) -> FrameResult:
        """``result`` with every model's attributes as the :data:`ATTRIBUTES` column.

        ``detected``: the detector saw this frame (else its boxes are the tracker's
        predictions, and only cached readings are given). ``live_tracks``: the
        tracker's live track ids, whose readings are kept (None: no tracker).
        ``embeddings``: the appearance model's rows of ``result``'s detections, as
        :meth:`embed` gave them in this frame (already counted there).
        """
        detections = result.detections
        count = len(detections)
        live = None if live_tracks is None else frozenset(live_tracks)
        values: list[dict[str, Any]] = [{} for _ in range(count)]
        with self._lock:
            counts = self._counts.get(result.stream_id)
        for index, model in enumerate(self.models):
            if model is self.appearance and not model.config.keep_embedding:
                continue  # read for the tracker by embed(); nothing of it goes into records
            cache = self._cache(result.stream_id, index)
            selected = model.select(detections.xyxy, detections.class_id)
            tally = ModelCounts()
            # The appearance model's vectors of this frame, read by embed(): all fresh.
            given = embeddings if detected and model is self.appearance else None
            if detected:
                attributes = cache.resolve(
                    detections.tracker_id,
                    detections.xyxy,
                    result.pts_seconds,
                    selected,
                    lambda rows, model=model, tally=tally, given=given: (
                        _timed_run(model, frame, detections.xyxy[rows], tally)
                        if given is None
                        else SecondaryOutput.of_embeddings(given[rows])
                    ),
                    read_all=given is not None,
                )
            else:
                attributes = cache.carried(
                    detections.tracker_id, selected, model.run(frame, _NO_BOXES)
                )
            if live is not None:
                cache.retain(live)
            config = model.config
            for row, value in enumerate(_values(attributes, model, config)):
                if value is not None:
                    values[row][config.name] = value
            if given is None:
                self._count(counts, model, attributes, tally)
        column = np.empty(count, dtype=object)
        column[:] = [value or None for value in values]
        with_attributes = detections.with_columns(data={ATTRIBUTES: column})
        return dataclasses.replace(result, detections=with_attributes)

    def _count(
        self,
        counts: StreamAttributeCounts | None,
        model: SecondaryModel,
        attributes: Attributes,
        tally: ModelCounts,
    ) -> None:
        """Add one frame's readings by ``model`` (and its run, in ``tally``) to the figures."""
        fresh = np.asarray(attributes.fresh, dtype=bool)
        tally.fresh = int(fresh.sum())
        tally.cached = int((np.asarray(attributes.read, dtype=bool) & ~fresh).sum())
        tally.labels = label_counts(
            attributes,
            model.spec.labels,
            multi_label=model.config.multi_label,
            threshold=model.config.threshold,
        )
        self._add(counts, model, tally)

    def _add(
        self, counts: StreamAttributeCounts | None, model: SecondaryModel, tally: ModelCounts
    ) -> None:
        """Add ``tally`` to the stream's figures (if it is still counted) and the totals."""
        if counts is not None:
            counts.add(model.name, tally)
        with self._lock:
            add_to(self._totals[model.name], tally)

    def readings(self, stream_id: str) -> dict[int, AttributeCache]:
        """The stream's last reading of each track, per model position (a moved stream
        carries them to its next worker: :mod:`vstream.engine.carry`)."""
        with self._lock:
            return {i: c for (stream, i), c in self._caches.items() if stream == stream_id}

    def carry_on(self, stream_id: str, readings: dict[int, AttributeCache]) -> None:
        """Start ``stream_id`` from the :meth:`readings` it had elsewhere."""
        with self._lock:
            for index, cache in readings.items():
                self._caches[(stream_id, index)] = cache

    def remove_stream(self, stream_id: str) -> None:
        """Forget the stream's readings and figures (it was removed)."""
        with self._lock:
            for key in [k for k in self._caches if k[0] == stream_id]:
                del self._caches[key]
            self._counts.pop(stream_id, None)


def _timed_run(
    model: SecondaryModel, frame: Frame, boxes: np.ndarray, tally: ModelCounts
) -> SecondaryOutput:
    """``model.run`` of ``boxes``, its time and the call counted in ``tally`` when it reads any.

    A run that fails is tried once more (a transient fault: device memory, the
    runtime) before its error is raised; the pipeline then fails the frame's
    stream alone. A run holds one frame's objects, so unlike the detector's
    batches it never mixes streams: there is nothing to split up first.
    """
    if len(boxes) == 0:
        return model.run(frame, boxes)
    started = time.perf_counter()
    try:
        output = model.run(frame, boxes)
    except Exception as exc:
        log.debug("secondary model %s: %s; trying again", model.name, describe(exc))
        output = model.run(frame, boxes)
    tally.runs += 1
    tally.seconds += time.perf_counter() - started
    return output


def _reading(last: SecondaryOutput, model: SecondaryModel) -> Reading:
    """A classifier's one-row reading as the label (or labels, multi-label) it gives."""
    labels = model.labels
    if model.config.multi_label and last.probabilities is not None:
        chosen = np.flatnonzero(labels_given(last.probabilities[0], model.config.threshold))
        return tuple(labels[i] for i in chosen)
    return labels[int(last.label_ids[0])]


def _values(
    attributes: Attributes, model: SecondaryModel, config: SecondaryConfig
) -> list[dict[str, Any] | None]:
    return record_values(
        attributes,
        model.spec.labels,
        multi_label=config.multi_label,
        threshold=config.threshold,
        keep_embedding=config.keep_embedding,
    )


__all__ = ["Cascade"]
