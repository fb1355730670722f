"""What the cascade did, counted: readings fresh and carried, model runs and time, labels.

:class:`~vstream.cascade.stage.Cascade` counts as it applies its models, in
two places: per stream (:class:`StreamAttributeCounts`, which the stream's
reader holds for ``GET /streams/{id}`` and which goes when the stream is
removed) and per pipeline (totals that only grow, for the metrics). The
metrics read both at scrape time (:meth:`vstream.metrics.Metrics.watch_cascade`).

Label counts are of fresh readings only: a carried reading is the same
reading again. Labels come from the model's fixed label list, so the number
of label series is bounded; an embedding gives no labels.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vstream.cascade.attributes import Attributes, labels_given


@dataclass
class ModelCounts:
    """One secondary model's figures (for one stream, or for its whole pipeline)."""

    fresh: int = 0
    """Objects read in their frame (crops through the model)."""
    cached: int = 0
    """Objects given their track's last reading instead (not read again)."""
    runs: int = 0
    """Calls of the model: frames with at least one crop to read."""
    seconds: float = 0.0
    """Time spent in those calls (crops, the model, the result's copy to the host)."""
    labels: dict[str, int] = field(default_factory=dict)
    """Fresh readings per label (a classifier's; multi-label: every label at the threshold)."""

    def copy(self) -> ModelCounts:
        return ModelCounts(self.fresh, self.cached, self.runs, self.seconds, dict(self.labels))

    @classmethod
    def from_json(cls, figures: dict[str, Any]) -> ModelCounts:
        """The counts :meth:`to_json` showed (a cluster worker's report of a stream)."""
        keys = ("fresh", "cached", "runs", "seconds")
        return cls(*(figures[k] for k in keys), dict(figures["labels"]))

    def to_json(self) -> dict[str, Any]:
        """As ``GET /streams/{id}`` shows it; labels most seen first."""
        return {
            "fresh": self.fresh,
            "cached": self.cached,
            "runs": self.runs,
            "seconds": round(self.seconds, 4),
            "labels": dict(sorted(self.labels.items(), key=lambda item: (-item[1], item[0]))),
        }


def label_counts(
    attributes: Attributes, labels: tuple[str, ...], *, multi_label: bool, threshold: float
) -> dict[str, int]:
    """How many of ``attributes``' fresh readings gave each label (none for an embedding)."""
    fresh = np.asarray(attributes.fresh, dtype=bool)
    if attributes.embeddings is not None or not labels or not fresh.any():
        return {}
    if multi_label and attributes.probabilities is not None:
        hits = labels_given(attributes.probabilities[fresh], threshold).sum(axis=0)
    else:
        hits = np.bincount(attributes.label_ids[fresh], minlength=len(labels))
    return {labels[i]: int(n) for i, n in enumerate(hits.tolist()) if n}


class StreamAttributeCounts:
    """The cascade's figures for one stream, per model (in the pipeline's model order)."""

    def __init__(self, models: list[str]) -> None:
        self._models = {name: ModelCounts() for name in models}
        self._lock = threading.Lock()

    def add(self, model: str, counts: ModelCounts) -> None:
        with self._lock:
            add_to(self._models[model], counts)

    def snapshot(self) -> dict[str, ModelCounts]:
        with self._lock:
            return {name: counts.copy() for name, counts in self._models.items()}

    def state(self) -> dict[str, dict[str, Any]]:
        """Per model name: fresh, cached, runs, seconds and labels (:meth:`ModelCounts.to_json`)."""
        return {name: counts.to_json() for name, counts in self.snapshot().items()}


def add_to(total: ModelCounts, counts: ModelCounts) -> None:
    """Add ``counts`` into ``total``."""
    total.fresh += counts.fresh
    total.cached += counts.cached
    total.runs += counts.runs
    total.seconds += counts.seconds
    for label, n in counts.labels.items():
        total.labels[label] = total.labels.get(label, 0) + n


__all__ = ["ModelCounts", "StreamAttributeCounts", "add_to", "label_counts"]
