"""What every decoder provides: pictures as device tensors, and what it knows of the stream.

A decoder owns demuxing and decoding of one connection or one pass over a
file; sources add what spans connections and passes (frame numbering, pacing,
reconnection, freshness), so the two can be combined freely.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from vstream.frame import ColourSpace, DecodedPicture, Frame, PixelFormat

if TYPE_CHECKING:
    import torch


class PacketStamp(NamedTuple):
    """What the demuxer noted of a live packet as it read it."""

    read_time: float
    """When it was read (``time.time()``)."""
    behind_seconds: float
    """How far the stream was behind its camera's pace then
    (:class:`~vstream.decoders.backlog.Backlog`): the packet was sent that long before
    its read time, by the pace of those before it."""


@dataclass(frozen=True)
class Picture:
    """One decoded picture, before a source gives it a place in its stream."""

    data: torch.Tensor | None
    """The picture as a tensor; None when it is left in the decoder's memory (``decoded``)."""
    pixel_format: PixelFormat
    width: int
    height: int
    pts_seconds: float | None
    """Presentation time in the stream's own clock, None when the stream has none."""
    colour: ColourSpace
    decoded: DecodedPicture | None = None
    """The decoder's own picture, converted to a tensor only when something asks."""
    packet: PacketStamp | None = None
    """When its packet was read, and how far behind its camera the stream was then; for
    live input, None otherwise."""

    def to_frame(
        self, stream_id: str, index: int, pts_seconds: float, capture_time: float
    ) -> Frame:
        """The :class:`Frame` of this picture at position ``index`` of stream ``stream_id``."""
        return Frame(
            data=self.data,
            pixel_format=self.pixel_format,
            width=self.width,
            height=self.height,
            stream_id=stream_id,
            index=index,
            pts_seconds=pts_seconds,
            colour=self.colour,
            capture_time=capture_time,
            picture=self.decoded,
        )


@dataclass(frozen=True)
class StreamInfo:
    """What the container says about the video stream before decoding it."""

    codec: str
    width: int
    height: int
    fps: float | None
    frame_count: int | None
    """Frames the container declares, None when it does not say (most live streams, TS, MKV)."""
    start_seconds: float = 0.0
    """Time stamp of the first frame, as the container declares it."""
    duration_seconds: float | None = None
    """Duration the container declares (MKV and MP4 do; TS and live streams only estimate)."""


class Decoder(Protocol):
    """Demuxes and decodes one video stream into :class:`Picture` objects, in order."""

    # Read-only to the caller: each decoder sets them itself (a plain attribute or a property).
    @property
    def name(self) -> str:
        """``cpu`` or ``nvdec``."""
        ...

    @property
    def info(self) -> StreamInfo: ...

    @property
    def corrupt_packets(self) -> int:
        """Damaged packets skipped so far."""
        ...

    @property
    def packets_skipped(self) -> int:
        """Packets read and not decoded so far (live input): before the stream's first key
        frame, or the stream having fallen too far behind its camera (``max_behind_seconds``)."""
        ...

    @property
    def demuxer(self) -> Any:
        """Where the packets come from, a :class:`~vstream.decoders.demux.Demuxer` (which
        imports this module); a clip ring taps it: ``demuxer.tap``."""
        ...

    def seek(self, seconds: float) -> None:
        """Move near ``seconds`` (at or before it); pictures before it may still follow."""
        ...

    def pictures(self) -> Iterator[Picture]: ...

    def close(self) -> None: ...
