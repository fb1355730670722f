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
so nothing is cached there. It is read again in :meth:`Cascade.apply` only when
its vectors go into records (``keep_embedding``).

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
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from vstream.analytics.events import NO_ATTRIBUTES, AttributesOf, Reading, TrackAttributes
from vstream.cascade.attributes import AttributeCache, Attributes, record_values
from vstream.cascade.model import SecondaryModel, SecondaryOutput
from vstream.config.secondary import SecondaryConfig, check_filter_labels, check_on_classes
from vstream.frame import Frame
from vstream.results import ATTRIBUTES, Detections, FrameResult

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
        self._lock = threading.Lock()

    def _cache(self, stream_id: str, index: int) -> AttributeCache:
        key = (stream_id, index)
        with self._lock:
            cache = self._caches.get(key)
            if cache is None:
                config = self.models[index].config
                cache = self._caches[key] = AttributeCache(config.reinfer_seconds, config.regrow)
            return cache

    def embed(self, frame: Frame, detections: Detections) -> np.ndarray | None:
        """``(N, D)`` unit rows: the appearance model's vector of every detection it selects
        (zeros for the rest), for the tracker; None without an appearance model."""
        model = self.appearance
        if model is None:
            return None
        selected = model.select(detections.xyxy, detections.class_id)
        vectors = np.zeros((len(detections), model.spec.output_size), dtype=np.float32)
        if selected.any():
            vectors[selected] = model.run(frame, detections.xyxy[selected]).embeddings
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

    def apply(
        self,
        frame: Frame,
        result: FrameResult,
        *,
        detected: bool,
        live_tracks: Iterable[int] | None,
    ) -> FrameResult:
        """``result`` with every model's attributes as the :data:`ATTRIBUTES` column.

        ``detected``: the detector saw this frame (else its boxes are the tracker's
        predictions, and only cached readings are given). ``live_tracks``: the
        tracker's live track ids, whose readings are kept (None: no tracker).
        """
        detections = result.detections
        count = len(detections)
        live = None if live_tracks is None else frozenset(live_tracks)
        values: list[dict[str, Any]] = [{} for _ in range(count)]
        for index, model in enumerate(self.models):
            if model is self.appearance and not model.config.keep_embedding:
                continue  # read for the tracker by embed(); nothing of it goes into records
            cache = self._cache(result.stream_id, index)
            selected = model.select(detections.xyxy, detections.class_id)
            if detected:
                attributes = cache.resolve(
                    detections.tracker_id,
                    detections.xyxy,
                    result.pts_seconds,
                    selected,
                    lambda rows, model=model: model.run(frame, detections.xyxy[rows]),
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
        column = np.empty(count, dtype=object)
        column[:] = [value or None for value in values]
        with_attributes = detections.with_columns(data={ATTRIBUTES: column})
        return dataclasses.replace(result, detections=with_attributes)

    def remove_stream(self, stream_id: str) -> None:
        """Forget the stream's readings (it was removed)."""
        with self._lock:
            for key in [k for k in self._caches if k[0] == stream_id]:
                del self._caches[key]


def _reading(last: SecondaryOutput, model: SecondaryModel) -> Reading:
    """A classifier's one-row reading as the label (or labels, multi-label) it gives."""
    labels = model.labels
    if model.config.multi_label and last.probabilities is not None:
        chosen = np.flatnonzero(last.probabilities[0] >= model.config.threshold)
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
