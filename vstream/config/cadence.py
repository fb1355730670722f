"""When a stream's frames go to the model: detection cadence and the motion gate.

Every frame of a stream still gets its record; these options only decide
which frames the detector sees. Between detections the stream's tracker
predicts its confirmed tracks' boxes (records mark them ``"predicted":
true``), so lines, zones and counts go on working on every frame
(:mod:`vstream.engine.cadence`). A stream with any of these on is tracked
even where its pipeline asks for no tracking: the tracker is what fills the
frames in between.

:class:`CadenceOptions` is a base of
:class:`~vstream.config.sources.SourceOptions`, so its fields are a stream's
own keys (``detect_every: 3`` next to ``uri:``) and ``vstream run`` flags.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from vstream.config.analytics import Point, polygon_area
from vstream.config.base import Cli, Int, Number, Seconds, StrictModel

MAX_DETECT_EVERY = 1000
"""Largest ``detect_every``: beyond it the tracker forgets objects long before they are seen."""

MAX_MASK_CORNERS = 1000
"""Corners of a stream's motion masks, all together: each edge is tested against every cell of
the grey copy when the stream's frame size is first seen (tens of ms at this cap)."""


class MotionGateConfig(StrictModel):
    """Detect only when the picture changed since the last detection.

    The change is measured on a small grey copy of the frame (its luma,
    downscaled on the frame's own device), against the copy kept at the last
    detection: the fraction of its pixels whose brightness moved by more
    than ``threshold``, outside the masks.
    """

    threshold: Int(1, 255) = Field(
        25,
        description="least change of a pixel's brightness (0..255) counted as motion; "
        "raise it for noisy night pictures",
    )
    min_area_fraction: Number(0.0, 1.0, open_low=True) = Field(
        0.002,
        description="least fraction of the picture that must change for a detection to run",
    )
    max_idle_seconds: Seconds(0, 3600) = Field(
        5.0,
        description="stream time after which a detection runs even on a still picture, so "
        "that an object that stopped is not forgotten by the tracker",
    )
    masks: Annotated[
        list[Annotated[list[Point], Field(max_length=MAX_MASK_CORNERS)]], Field(max_length=100)
    ] = Field(
        default_factory=list,
        description="polygons [[x, y], ...] in pixels where motion is ignored (trees, "
        f"a clock, a road outside the area watched); {MAX_MASK_CORNERS} corners in all",
    )

    @model_validator(mode="after")
    def _masks_with_area(self) -> MotionGateConfig:
        corners = sum(len(polygon) for polygon in self.masks)
        if corners > MAX_MASK_CORNERS:
            raise ValueError(f"masks have {corners} corners in all; at most {MAX_MASK_CORNERS}")
        for index, polygon in enumerate(self.masks):
            if len(polygon) < 3 or polygon_area(list(polygon)) <= 1e-6:
                raise ValueError(f"masks[{index}]: a mask needs 3 or more corners enclosing area")
        return self


class CadenceOptions(StrictModel):
    """Which of a stream's frames are detected; the tracker predicts the others."""

    detect_every: Annotated[Int(1, MAX_DETECT_EVERY), Cli("--detect-every")] = Field(
        1,
        description="run the detector on every n-th frame; the tracker predicts the boxes of "
        "the frames between (1: every frame)",
    )
    detect_fps: Annotated[Number(0.0, 1000.0, open_low=True) | None, Cli("--detect-fps")] = Field(
        None,
        description="run the detector this many times per second of stream time, at most "
        "the stream's frame rate; null: detect_every decides",
    )
    adapt_detect_every: Annotated[Int(2, MAX_DETECT_EVERY) | None, Cli("--adapt-detect-every")] = (
        Field(
            None,
            description="live streams under load: when the latest policy drops frames, detect "
            "less often first, one step at a time down to every n-th frame, and back up once "
            "no frame was dropped for 2 s (counted as frames_adapted); null: off",
        )
    )
    motion: MotionGateConfig | None = Field(
        None,
        description="detect only frames whose picture changed since the last detection; "
        "null: no motion gate",
    )

    @model_validator(mode="after")
    def _one_rate(self) -> CadenceOptions:
        if self.detect_fps is not None and self.detect_every != 1:
            raise ValueError(
                f"detect_every ({self.detect_every}) and detect_fps ({self.detect_fps:g}) "
                "both set a detection rate; give one"
            )
        adapt = self.adapt_detect_every
        if adapt is not None and self.detect_fps is not None:
            raise ValueError("adapt_detect_every works from detect_every, not detect_fps")
        if adapt is not None and adapt <= self.detect_every:
            raise ValueError(
                f"adapt_detect_every ({adapt}) must be above detect_every ({self.detect_every})"
            )
        return self

    @property
    def cadence_on(self) -> bool:
        """Whether some frames may skip the detector (and the stream therefore needs a tracker)."""
        return (
            self.detect_every > 1
            or self.detect_fps is not None
            or self.motion is not None
            or self.adapt_detect_every is not None
        )
