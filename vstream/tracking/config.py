"""The tracker's options, and the strict, bounded field types the analytics options share.

The types follow the rules of :mod:`vstream.config.base` (unknown keys are
errors, ``true`` is not 1, ``"3"`` is not 3, numbers are finite and bounded),
but live here so that the tracking and analytics packages stay leaves: they
import numpy, scipy and pydantic only, never the model stack or the pipeline
configuration. Every range error names the allowed range.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator


class StrictConfig(BaseModel):
    """Unknown keys are errors, numbers finite, instances immutable."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def _range_text(lo: float, hi: float, open_low: bool) -> str:
    return f"({lo:g}, {hi:g}]" if open_low else f"[{lo:g}, {hi:g}]"


def Number(lo: float, hi: float, *, open_low: bool = False) -> Any:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``); integers are fine."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        if value > hi or value < lo or (open_low and value == lo):
            raise ValueError(f"must be in {_range_text(lo, hi, open_low)}, got {value!r}")
        return value

    bound = Field(gt=lo, le=hi) if open_low else Field(ge=lo, le=hi)
    # The bounds come before the validator so the JSON schema shows them as minimum/maximum;
    # the validator still runs first, with the message that names the range.
    return Annotated[float, bound, BeforeValidator(check)]


def Int(lo: int, hi: int) -> Any:
    """An integer in ``[lo, hi]``; booleans, floats and strings are refused."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"must be in {_range_text(lo, hi, False)}, got {value!r}")
        return value

    return Annotated[int, Strict(), Field(ge=lo, le=hi), BeforeValidator(check)]


MAX_TRACK_SECONDS = 3600.0
"""Longest time any tracking or analytics duration may be set to (one hour)."""


class TrackingConfig(StrictConfig):
    """ByteTrack-style multi-object tracking (:class:`vstream.tracking.ByteTracker`).

    Times are in seconds of stream time (presentation timestamps), never in
    frames, so the same settings behave the same at 10 fps and at 60 fps.
    """

    tracker: Literal["bytetrack"] = Field(
        "bytetrack", description="tracking algorithm; bytetrack: two-stage IoU association"
    )
    high_score: Number(0.0, 1.0) = Field(
        0.5,
        description="detections scoring at least this are matched to tracks first, "
        "against every live track",
    )
    low_score: Number(0.0, 1.0) = Field(
        0.1,
        description="detections scoring from this up to high_score are matched second, only to "
        "tracks seen in the previous frame (objects partly hidden); lower scores are ignored",
    )
    new_track_score: Number(0.0, 1.0) = Field(
        0.6,
        description="an unmatched detection scoring at least this starts a tentative track; "
        "must be at least high_score",
    )
    match_iou: Number(0.0, 1.0, open_low=True) = Field(
        0.2,
        description="least IoU between a track's predicted box and a high-score detection "
        "for them to match",
    )
    low_score_match_iou: Number(0.0, 1.0, open_low=True) = Field(
        0.5,
        description="least IoU between a track's predicted box and a low-score detection "
        "for them to match",
    )
    duplicate_iou: Number(0.0, 1.0, open_low=True) = Field(
        0.7,
        description="of detections overlapping at least this much (usually one object "
        "detected as two classes), only the highest-scoring one is tracked",
    )
    track_buffer_seconds: Number(0.0, MAX_TRACK_SECONDS, open_low=True) = Field(
        1.0,
        description="how long a track that lost its object is kept for it to come back "
        "(occlusion, missed detections) before it is forgotten",
    )
    confirm_hits: Int(1, 1000) = Field(
        3,
        description="detections in a row a new track needs before it is confirmed and gets "
        "an id; a tentative track that misses one frame is dropped",
    )
    confirm_seconds: Number(0.0, MAX_TRACK_SECONDS) = Field(
        0.0,
        description="stream time a new track must also have lasted before it is confirmed "
        "(0: confirm_hits alone decides)",
    )

    @model_validator(mode="after")
    def _ordered_thresholds(self) -> TrackingConfig:
        if self.low_score > self.high_score:
            raise ValueError(
                f"low_score ({self.low_score:g}) must not exceed high_score ({self.high_score:g})"
            )
        if self.new_track_score < self.high_score:
            raise ValueError(
                f"new_track_score ({self.new_track_score:g}) must be at least high_score "
                f"({self.high_score:g})"
            )
        return self
