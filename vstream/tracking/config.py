"""The tracker's options, in the strict, bounded vocabulary of :mod:`vstream.config.base`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from vstream.config.base import Int, Number, StrictModel

MAX_TRACK_SECONDS = 3600.0
"""Longest time any tracking or analytics duration may be set to (one hour)."""


class TrackingConfig(StrictModel):
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
