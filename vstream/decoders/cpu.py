"""The CPU decoder: PyAV (FFmpeg) decoding with frame threading.

FFmpeg's scaler converts each picture to the requested layout in the same
pass that copies it out of the decoder, which is the cheapest way to get RGB
on a CPU; ``nv12``/``yuv420p`` leave the colour conversion to the shared
device preprocessing, as on the NVDEC path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import av
import torch

from vstream.decoders.base import Picture
from vstream.decoders.demux import Demuxer
from vstream.frame import ColourMatrix, ColourSpace, PixelFormat
from vstream.transfer import upload

# FFmpeg's AVColorSpace / AVColorRange values that change the conversion.
_AVCOL_SPC_BT709 = 1
_AVCOL_RANGE_JPEG = 2


def colour_of(frame: av.VideoFrame) -> ColourSpace:
    """The colour space a decoded frame signals; unspecified means BT.601, as in FFmpeg."""
    matrix = ColourMatrix.BT709 if frame.colorspace == _AVCOL_SPC_BT709 else ColourMatrix.BT601
    full = frame.color_range == _AVCOL_RANGE_JPEG or frame.format.name.startswith("yuvj")
    return ColourSpace(matrix=matrix, full_range=full)


class PyAVDecoder:
    """Decodes the first video stream of a file, URL or capture device on the CPU.

    Damaged packets (flagged by the demuxer or rejected by the decoder) are
    skipped and counted in :attr:`corrupt_packets`; see :class:`Demuxer` for
    ``options``, ``input_format``, ``timeout`` and ``stall_seconds``.
    ``threads`` caps FFmpeg's decoding threads (0: FFmpeg's choice, about one
    per core), which on a small CPU compete with the model's; ``low_delay``
    (live input) decodes with slice threads and FFmpeg's low-delay flag, so no
    picture waits in the decoder for the ones after it.
    """

    name = "cpu"

    def __init__(
        self,
        uri: str,
        *,
        device: torch.device,
        pixel_format: PixelFormat = PixelFormat.RGB24,
        options: Mapping[str, str] | None = None,
        input_format: str | None = None,
        timeout: tuple[float, float] | None = None,
        stall_seconds: float | None = None,
        threads: int = 0,
        low_delay: bool = False,
    ) -> None:
        self.device = device
        self.pixel_format = pixel_format
        self.demuxer = Demuxer(
            uri,
            options=options,
            input_format=input_format,
            timeout=timeout,
            stall_seconds=stall_seconds,
        )
        codec = self.demuxer.stream.codec_context
        if low_delay:
            # Frame threading holds back one picture per thread; slices do not.
            codec.thread_type = "SLICE"
            codec.flags |= av.codec.context.Flags.low_delay
        else:
            codec.thread_type = "AUTO"
        if threads:
            codec.thread_count = threads
        self.info = self.demuxer.info

    @property
    def corrupt_packets(self) -> int:
        return self.demuxer.corrupt_packets

    def seek(self, seconds: float) -> None:
        self.demuxer.seek(seconds)

    def _picture(self, decoded: av.VideoFrame) -> Picture:
        if self.pixel_format is PixelFormat.RGB24 or decoded.width % 2 or decoded.height % 2:
            # Odd-sized 4:2:0 cannot be packed into one plane tensor: let FFmpeg give RGB.
            pixel_format, array = PixelFormat.RGB24, decoded.to_ndarray(format="rgb24")
        else:
            pixel_format = self.pixel_format
            array = decoded.to_ndarray(format=pixel_format.value)
        pts = None
        if decoded.pts is not None and decoded.time_base is not None:
            pts = float(decoded.pts * decoded.time_base)
        return Picture(
            data=upload(torch.from_numpy(array), self.device),
            pixel_format=pixel_format,
            width=decoded.width,
            height=decoded.height,
            pts_seconds=pts,
            colour=colour_of(decoded),
        )

    def pictures(self) -> Iterator[Picture]:
        """Every picture of the stream in presentation order, skipping damaged packets."""
        demuxer = self.demuxer
        for packet in demuxer.packets():
            if packet.is_corrupt:
                # Still decoded: FFmpeg's error concealment beats dropping a reference frame.
                demuxer.damaged("flagged by the demuxer")
            try:
                decoded = packet.decode()
            except av.error.FFmpegError as exc:
                if not packet.is_corrupt:
                    demuxer.damaged("decode", exc)
                continue
            for frame in decoded:
                demuxer.progress()
                yield self._picture(frame)

    def close(self) -> None:
        self.demuxer.close()
