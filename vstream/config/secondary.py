"""Secondary models (cascades): a model that reads each detected object's crop.

Declared after the detector, in the pipeline's ``secondary:`` list. A
``classifier`` gives each selected detection a label and a score (softmax,
or one sigmoid per label with ``multi_label``); an ``embedding`` gives it an
L2-normalised vector, kept on the track for appearance matching and written
to records only when ``keep_embedding`` asks for it.

Preprocessing (input size, crop mode, value range, mean, std) and labels are
read from the model's metadata where it has them (:mod:`vstream.inference.secondary_spec`
names the keys); a field set here overrides the metadata. What can only be
checked against the model file (its input is an image, its output has one
value per label) or against the detector (the classes of ``on`` exist) is
checked when the model is opened, by
:func:`vstream.inference.secondary_spec.check_secondary` and
:func:`check_on_classes`, each with one line naming the offending value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from vstream.config.base import (
    RELATIVE_TO_CONFIG,
    Flag,
    Int,
    Name,
    Number,
    Seconds,
    StrictModel,
    existing_file,
    listed_twice,
)
from vstream.config.model import (
    DEFAULT_IO_MIB,
    IO_BUDGET_HELP,
    MAX_IO_MIB,
    MAX_LABELS,
    ClassIds,
    ClassName,
    ImageSize,
    Mean,
    Std,
    absent_classes,
    describe_classes,
)
from vstream.config.tracking import MAX_TRACK_SECONDS
from vstream.errors import ModelError

MAX_SECONDARY = 8
"""Most secondary models per pipeline."""

MAX_CROPS_PER_RUN = 256
"""Largest ``max_batch``: crops bound at once in one model run."""

CropMode = Literal["stretch", "square"]
"""How a box becomes the model input: the box stretched to fill it, or the square around
the box's centre (side: the box's longer side), which keeps the object's proportions."""

CropRound = Literal["nearest", "floor", "subpixel"]
"""Which pixels a box's crop is made of: its edges rounded to whole pixels (supervision's
``crop_image``), truncated (``int()``, Ultralytics' ``save_one_box``), or sampled where they
fall between pixels (vstream's rule before 0.2)."""


class SecondaryCrop(StrictModel):
    """How each selected box becomes a crop: its shape, and the pixels it is cut on.

    A word alone is the mode: ``crop: square`` is ``crop: {mode: square}``.
    """

    mode: CropMode | None = Field(
        None,
        description="stretch: the box fills the input; square: the square around the box "
        "(the object keeps its proportions); default: the metadata's crop, else stretch",
    )
    round: CropRound | None = Field(
        None,
        description="nearest: each edge rounded to a whole pixel, the cut resized as "
        "cv2.resize does (supervision's crop_image); floor: edges truncated (int(), "
        "Ultralytics' save_one_box); subpixel: the fractional box sampled as it is (roi_align), "
        "for models trained on vstream's earlier crops; default: the metadata's crop_round, "
        "else nearest",
    )

    @model_validator(mode="before")
    @classmethod
    def _mode_alone(cls, value: object) -> object:
        return {"mode": value} if isinstance(value, str) else value


class SecondaryOn(StrictModel):
    """Which detections a secondary model reads."""

    classes: ClassIds | None = Field(
        None,
        description="detector class ids whose detections are read, e.g. [2, 5, 7]; "
        "default: every class",
    )
    min_size: Int(0, 100_000) = Field(
        0,
        description="least width and height, in frame pixels, of a box to be read: smaller "
        "objects have too few pixels to classify",
    )


class SecondaryConfig(StrictModel):
    """One secondary model: what it is, which detections it reads, and how often."""

    name: Name = Field(description="the attribute's name in records (``attributes: {name: ...}``)")
    path: str = Field(
        max_length=4096,
        description=f"ONNX file, {RELATIVE_TO_CONFIG}, or vstream://NAME for a bundled one "
        "(vstream://colour.onnx, vstream://appearance.onnx)",
    )
    kind: Literal["classifier", "embedding"] = Field(
        "classifier",
        description="classifier: a label and a score per object; embedding: an L2-normalised "
        "vector per object (appearance for the tracker)",
    )
    on: SecondaryOn = Field(default_factory=SecondaryOn)
    labels: Annotated[list[ClassName], Field(min_length=1, max_length=MAX_LABELS)] | None = Field(
        None,
        description="one label per model output, in order; default: the model metadata's "
        "labels (or names)",
    )
    multi_label: Flag = Field(
        False,
        description="labels are independent (one sigmoid each, every label scoring at least "
        "threshold is kept) rather than exclusive (softmax, the best label)",
    )
    threshold: Number(0, 1) = Field(
        0.5, description="with multi_label: least score of a label to be reported"
    )
    outputs: Literal["logits", "probabilities"] | None = Field(
        None,
        description="what a classifier's output holds: logits (softmax or sigmoid applied "
        "here) or probabilities already; default: the metadata's, else logits",
    )
    imgsz: ImageSize = Field(
        None,
        description="input size for a model with a dynamic one: 64 or [h, w]; default: the "
        "model's, else its metadata's",
    )
    crop: SecondaryCrop = Field(
        default_factory=SecondaryCrop,
        description="the crop's mode (stretch or square) and round (nearest, floor or "
        "subpixel), e.g. {mode: square, round: floor}; a word alone is the mode",
    )
    resize: Literal["linear", "area"] | None = Field(
        None,
        description="linear: one bilinear sample per input pixel (OpenCV's INTER_LINEAR); area: "
        "the mean of samples one source pixel apart (OpenCV's INTER_AREA at whole ratios), "
        "for large boxes shrunk a lot; default: the metadata's, else linear",
    )
    input_range: Literal[1, 255] | None = Field(
        None, description="model input values 0..1 or 0..255; default: the metadata's, else 1"
    )
    mean: tuple[Mean, Mean, Mean] | None = Field(
        None,
        description="per-channel (R, G, B) mean subtracted, in input_range units; default: "
        "the metadata's, else 0",
    )
    std: tuple[Std, Std, Std] | None = Field(
        None,
        description="per-channel (R, G, B) divisor after the mean, in input_range units; "
        "default: the metadata's, else 1",
    )
    reinfer_seconds: Seconds(0, MAX_TRACK_SECONDS, open_low=False) = Field(
        1.0,
        description="a tracked object is read again once its last reading is this old "
        "(stream time); 0: every frame. Without tracking every detection is read",
    )
    regrow: Number(1, 100) = Field(
        2.0,
        description="a tracked object is also read again once its box's area is this many "
        "times the area it was read at (it came closer: more pixels to read)",
    )
    max_batch: Int(1, MAX_CROPS_PER_RUN) = Field(
        32,
        description="most crops per model run (the bound input batch); more are run in chunks",
    )
    keep_embedding: Flag = Field(
        False, description="with kind embedding: write the vector into records (large)"
    )
    max_io_mib: Int(1, MAX_IO_MIB) = Field(DEFAULT_IO_MIB, description=IO_BUDGET_HELP)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        return existing_file(value, info, "secondary model file")

    @field_validator("labels")
    @classmethod
    def _unique_labels(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            listed_twice(value, "labels")
        return value

    @model_validator(mode="after")
    def _fits_kind(self) -> SecondaryConfig:
        """Refuse an option that would be ignored, silently, for this kind of model."""
        if self.kind == "embedding":
            keys = ("labels", "multi_label", "threshold", "outputs")
            given = [key for key in keys if key in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{self.name}: {', '.join(given)} apply to a classifier; "
                    "an embedding model gives a vector"
                )
        elif self.keep_embedding:
            raise ValueError(f"{self.name}: keep_embedding applies to kind embedding")
        elif "threshold" in self.model_fields_set and not self.multi_label:
            raise ValueError(
                f"{self.name}: threshold {self.threshold} applies with multi_label: true; "
                "without it a classifier gives its best label whatever its score"
            )
        return self


def unique_names(models: Sequence[SecondaryConfig]) -> None:
    """Refuse two secondary models of one pipeline with the same name (one attribute each)."""
    seen: dict[str, int] = {}
    for index, model in enumerate(models):
        if model.name in seen:
            raise ValueError(
                f"secondary[{seen[model.name]}] and secondary[{index}] are both named "
                f"{model.name!r}; each attribute needs its own name"
            )
        seen[model.name] = index


_KIND_NOUNS = {"classifier": "classifier", "embedding": "model of kind embedding"}


def check_kind(models: Sequence[SecondaryConfig], name: str, kind: str, where: str) -> None:
    """Refuse ``name`` at ``where`` (``tracking.appearance``, a line's ``attributes``) unless
    it names one of ``models`` of ``kind``; the message lists those the pipeline has."""
    if any(model.name == name and model.kind == kind for model in models):
        return
    have = [repr(model.name) for model in models if model.kind == kind]
    raise ValueError(
        f"{where} {name!r} must name a secondary {_KIND_NOUNS[kind]}; "
        f"this pipeline has {', '.join(have) or 'none'}"
    )


def check_on_classes(
    model: SecondaryConfig, class_names: Mapping[int, str] | Sequence[str]
) -> None:
    """Refuse class ids in ``on.classes`` the detector does not have: one line, a ModelError.

    ``class_names`` is the detector's (``Detector.class_names``, or the
    metadata's); the check needs the detector model, so it runs when the
    pipeline is built or validated, not when the YAML is parsed. A detector
    that names no classes cannot be checked and is accepted.
    """
    if unknown := absent_classes(model.on.classes or (), class_names):
        raise ModelError(
            f"secondary {model.name!r}: on.classes {unknown} are not classes of the detector, "
            f"which has {describe_classes(class_names)}"
        )


def check_filter_labels(
    place: str, name: str, wanted: Iterable[str], labels: Sequence[str]
) -> None:
    """Refuse labels in a line's or zone's ``attributes`` filter that the classifier ``name``
    lacks (it would never count): one line, a ModelError. Needs the model's labels, so it
    runs when the pipeline is built or validated."""
    known = set(labels)  # a classifier may have 100 000 labels
    unknown = [label for label in wanted if label not in known]
    if unknown:
        more = f" and {len(labels) - 20} more" if len(labels) > 20 else ""
        raise ModelError(
            f"{place}: attribute {name!r} has no labels {unknown}; the model's labels are "
            f"{', '.join(labels[:20])}{more}"
        )


__all__ = [
    "MAX_SECONDARY",
    "CropMode",
    "CropRound",
    "SecondaryConfig",
    "SecondaryCrop",
    "SecondaryOn",
    "check_filter_labels",
    "check_kind",
    "check_on_classes",
    "unique_names",
]
