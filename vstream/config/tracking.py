"""The tracker's options, in the strict, bounded vocabulary of :mod:`vstream.config.base`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from vstream.config.base import Int, Name, Number, StrictModel
from vstream.config.model import PostprocessOptions

MAX_TRACK_SECONDS = 3600.0
"""Longest time any tracking or analytics duration may be set to (one hour)."""

DEFAULT_CONF: float = PostprocessOptions.model_fields["conf"].default
"""The detector's default ``postprocess.conf``: unset thresholds follow it when no conf is given."""

FOLLOW_FLOOR = 0.25
"""Lowest first-stage and new-track threshold an unset one follows ``conf`` down to.

Ultralytics' ByteTrack settings (``track_high_thresh``, ``new_track_thresh``):
below it, a detector's noise starts tracks of its own (the demo model at conf
0.1: MOTA -0.48 with the thresholds at 0.1, 0.96 at 0.25)."""


class TrackingConfig(StrictModel):
    """ByteTrack-style multi-object tracking (:class:`vstream.tracking.ByteTracker`).

    Times are in seconds of stream time (presentation timestamps), never in
    frames, so the same settings behave the same at 10 fps and at 60 fps.
    """

    tracker: Literal["bytetrack"] = Field(
        "bytetrack", description="tracking algorithm; bytetrack: two-stage IoU association"
    )
    high_score: Number(0.0, 1.0) | None = Field(
        None,
        description="detections scoring at least this are matched to tracks first, against "
        "every live track; null: the pipeline's conf (postprocess.conf), but not below 0.25, "
        "so tracking works at whatever threshold the model is run with",
    )
    low_score: Number(0.0, 1.0) = Field(
        0.1,
        description="detections scoring from this up to high_score are matched second, only to "
        "tracks seen in the previous frame (objects partly hidden); lower scores are ignored. "
        "With tracking on the detector keeps boxes down to this score for the tracker; records "
        "still hold only those above conf",
    )
    new_track_score: Number(0.0, 1.0) | None = Field(
        None,
        description="an unmatched detection scoring at least this starts a tentative track; "
        "null: high_score (only first-stage detections start tracks, so a lower value acts "
        "as high_score)",
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
        "an id; a tentative track that misses one detection is dropped. With a detection "
        "cadence (detect_every, detect_fps, motion) two detections in a row that span as "
        "much stream time as confirm_hits frames do are enough (at detect_every 3: two)",
    )
    confirm_seconds: Number(0.0, MAX_TRACK_SECONDS) = Field(
        0.0,
        description="stream time a new track must also have lasted before it is confirmed "
        "(0: confirm_hits alone decides)",
    )

    appearance: Name | None = Field(
        None,
        description="name of a secondary model of kind embedding whose vectors join the "
        "association cost (objects that cross or hide one another keep their ids); null: "
        "IoU alone",
    )
    appearance_weight: Number(0.0, 1.0) = Field(
        0.3,
        description="with appearance: the share of the cost that is appearance (cosine "
        "distance), the rest 1 - IoU; pairs the IoU thresholds refuse stay refused there, "
        "pairs that look unlike are refused too, and a track the IoU lost (an object that "
        "stopped or turned back while hidden) is found again by look alone, near its path",
    )

    @model_validator(mode="after")
    def _ordered_thresholds(self) -> TrackingConfig:
        # Only what is set here can be checked here; thresholds that follow conf are
        # ordered by thresholds().
        high = self.high_score
        if high is not None and self.low_score > high:
            raise ValueError(
                f"low_score ({self.low_score:g}) must not exceed high_score ({high:g})"
            )
        if high is not None and self.new_track_score is not None and self.new_track_score < high:
            raise ValueError(
                f"new_track_score ({self.new_track_score:g}) must be at least high_score ({high:g})"
            )
        return self

    def thresholds(self, conf: float) -> Thresholds:
        """The score thresholds in force when the detector runs at ``conf``.

        ``high_score`` left unset follows ``conf``, down to :data:`FOLLOW_FLOOR`:
        the first stage takes what the user asked the detector for, and a very
        low ``conf`` feeds the second stage instead of starting tracks on noise.
        ``new_track_score`` left unset follows
        the first stage, and is never below it. ``low_score`` is capped at the
        first stage's threshold: with ``conf`` below ``low_score`` every
        detection is a first-stage one and the second stage has nothing to do.
        """
        high = max(conf, FOLLOW_FLOOR) if self.high_score is None else self.high_score
        new = high if self.new_track_score is None else max(self.new_track_score, high)
        return Thresholds(high=high, low=min(self.low_score, high), new_track=new)


@dataclass(frozen=True)
class Thresholds:
    """Resolved score thresholds of the two association stages and of new tracks."""

    high: float
    low: float
    new_track: float
