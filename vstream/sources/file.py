"""Video files decoded on the CPU by PyAV (FFmpeg), frame by frame, in order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import av
import torch

from vstream.errors import SourceError
from vstream.frame import ColourMatrix, ColourSpace, Frame, PixelFormat
from vstream.sources.base import SourceState, SourceStats

# FFmpeg's AVColorSpace / AVColorRange values that change the conversion.
_AVCOL_SPC_BT709 = 1
_AVCOL_RANGE_JPEG = 2


def _colour_of(frame: av.VideoFrame) -> ColourSpace:
    """The colour space a decoded frame signals; unspecified means BT.601, as in FFmpeg."""
    matrix = ColourMatrix.BT709 if frame.colorspace == _AVCOL_SPC_BT709 else ColourMatrix.BT601
    full = frame.color_range == _AVCOL_RANGE_JPEG or frame.format.name.startswith("yuvj")
    return ColourSpace(matrix=matrix, full_range=full)


class VideoFileSource:
    """Every frame of a video file exactly once, in order, as :class:`Frame` tensors.

    Frames are decoded with FFmpeg's frame threading and handed over in
    ``pixel_format``: ``rgb24`` lets FFmpeg's scaler do the colour conversion,
    ``nv12`` and ``yuv420p`` leave it to the device, as with NVDEC.
    A file that ends before the frame count its container declares is reported
    as truncated after the frames that could be decoded were delivered.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        stream_id: str | None = None,
        device: str | torch.device = "cpu",
        pixel_format: PixelFormat | str = PixelFormat.RGB24,
    ) -> None:
        self.path = Path(path)
        self.stream_id = stream_id or self.path.stem
        self.device = torch.device(device)
        self.pixel_format = PixelFormat(pixel_format)
        if not self.path.is_file():
            raise SourceError(f"video file not found: {self.path}")
        try:
            self._container = av.open(str(self.path))
        except av.error.FFmpegError as exc:
            raise SourceError(f"cannot open video {self.path}: {exc.strerror or exc}") from exc
        if not self._container.streams.video:
            self._container.close()
            raise SourceError(f"{self.path} has no video stream")
        self._stream = self._container.streams.video[0]
        self._stream.thread_type = "AUTO"
        self._declared_frames = self._stream.frames or None
        self.state = SourceState.STREAMING
        self.stats = SourceStats()

    @property
    def frame_count(self) -> int | None:
        """Frames the container declares, or None when it does not say."""
        return self._declared_frames

    @property
    def fps(self) -> float | None:
        rate = self._stream.average_rate or self._stream.guessed_rate
        return float(rate) if rate else None

    def _to_frame(self, decoded: av.VideoFrame, index: int) -> Frame:
        if self.pixel_format is PixelFormat.RGB24 or decoded.width % 2 or decoded.height % 2:
            # Odd-sized 4:2:0 cannot be packed into one plane tensor: let FFmpeg give RGB.
            pixel_format, array = PixelFormat.RGB24, decoded.to_ndarray(format="rgb24")
        else:
            pixel_format = self.pixel_format
            array = decoded.reformat(format=pixel_format.value).to_ndarray()
        if decoded.pts is not None and decoded.time_base is not None:
            pts_seconds = float(decoded.pts * decoded.time_base)
        else:
            pts_seconds = index / (self.fps or 1.0)
        return Frame(
            data=torch.from_numpy(array).to(self.device),
            pixel_format=pixel_format,
            width=decoded.width,
            height=decoded.height,
            stream_id=self.stream_id,
            index=index,
            pts_seconds=pts_seconds,
            colour=_colour_of(decoded),
        )

    def __iter__(self) -> Iterator[Frame]:
        try:
            for decoded in self._container.decode(self._stream):
                yield self._to_frame(decoded, self.stats.frames_decoded)
                self.stats.frames_decoded += 1
        except av.error.FFmpegError as exc:
            self.state = SourceState.FAILED
            raise SourceError(
                f"{self.path}: decoding failed after {self.stats.frames_decoded} frames: "
                f"{exc.strerror or exc}"
            ) from exc
        finally:
            self.close()
        declared, decoded_count = self.frame_count, self.stats.frames_decoded
        if declared is not None and decoded_count < declared:
            self.state = SourceState.FAILED
            raise SourceError(
                f"{self.path}: video ended after {decoded_count} of {declared} frames "
                "(truncated file?)"
            )
        self.state = SourceState.FINISHED

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> VideoFileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
