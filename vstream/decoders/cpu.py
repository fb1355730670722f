"""The CPU decoder: PyAV (FFmpeg) decoding, pictures left in FFmpeg's memory until used.

A decoded picture is handed on as it came out of the decoder (a
:class:`PyAVPicture`, YUV in FFmpeg's buffer pool): preprocessing has FFmpeg
convert it and OpenCV resize it to the model's letterbox size, keeping only
the small picture (:mod:`vstream.preprocess.letterbox`), and only what needs
the whole picture (annotated video, previews, snapshots) converts it at full size, once,
through :attr:`vstream.frame.Frame.data`, to the requested layout: packed
RGB by default, or ``nv12``/``yuv420p`` for the shared device colour
conversion. Frames meant for a GPU are converted and copied at once.

Threads: ``threads=0`` shares half the cores among the streams being
decoded when a decoder opens (:func:`vstream.cores.auto_decoder_threads`), so N
streams never each
start a thread per core.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping

import av
import numpy as np
import torch

from vstream.cores import auto_decoder_threads
from vstream.decoders.base import Picture
from vstream.decoders.colour import colour_space
from vstream.decoders.demux import Demuxer, best_effort_time
from vstream.errors import SourceUnavailable
from vstream.frame import PixelFormat
from vstream.transfer import upload

_EIGHT_BIT_YUV = frozenset(
    {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12", "gray"}
)
"""Formats whose first plane is 8-bit luma, one byte per pixel."""

log = logging.getLogger(__name__)

_GEN_PTS = 0x0001
"""AVFMT_FLAG_GENPTS, which PyAV sets on every input it opens."""

_open_lock = threading.Lock()
_open_decoders = 0
"""CPU decoders open in this process, for :func:`auto_decoder_threads`."""


class PyAVPicture:
    """A picture PyAV decoded, still in FFmpeg's memory: nothing converted or copied yet."""

    __slots__ = ("frame",)

    device = torch.device("cpu")

    def __init__(self, frame: av.VideoFrame) -> None:
        self.frame = frame

    def to_tensor(self, pixel_format: PixelFormat) -> torch.Tensor:
        """The whole picture in ``pixel_format``, converted by FFmpeg on the calling thread."""
        return torch.from_numpy(self.frame.to_ndarray(format=pixel_format.value, threads=1))

    def luma(self) -> torch.Tensor | None:
        """The luma plane as a ``(height, width)`` view of FFmpeg's buffer, nothing converted
        (for the motion gate, :mod:`vstream.preprocess.motion`); None unless 8-bit YUV."""
        frame = self.frame
        if frame.format.name not in _EIGHT_BIT_YUV:
            return None
        plane = frame.planes[0]
        shape, strides = (frame.height, frame.width), (plane.line_size, 1)
        # A plane has the buffer protocol, which PyAV's type stubs do not declare.
        view = np.ndarray(shape, np.uint8, buffer=plane, strides=strides)  # type: ignore[arg-type]
        return torch.from_numpy(view)


class PyAVDecoder:
    """Decodes the first video stream of a file, URL or capture device on the CPU.

    Damaged packets (flagged by the demuxer or rejected by the decoder) are
    skipped and counted in :attr:`corrupt_packets`; see :class:`Demuxer` for
    ``options``, ``input_format``, ``timeout``, ``stall_seconds`` and
    ``max_behind_seconds``.
    ``threads`` sets FFmpeg's decoding threads (0: :func:`auto_decoder_threads` of the
    streams open now, this one included); ``low_delay``
    (live input) decodes with slice threads and FFmpeg's low-delay flag, so no
    picture waits in the decoder for the ones after it, and gives each picture the
    time its packet was read and its stream's backlog then (:attr:`Picture.packet`).
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
        max_behind_seconds: float | None = None,
    ) -> None:
        self.device = device
        self.pixel_format = pixel_format
        self._counted = False
        self.demuxer = Demuxer(
            uri,
            options=options,
            input_format=input_format,
            timeout=timeout,
            stall_seconds=stall_seconds,
            stamp_packets=low_delay,
            max_behind_seconds=max_behind_seconds,
        )
        container = self.demuxer.container
        # PyAV has FFmpeg make up the pts a packet lacks (AVI's), in decode order: with
        # B-frames the times ran backwards. Without, a picture's time is FFmpeg's own
        # guess from its dts (:meth:`_picture`), as ffprobe shows it.
        container.flags &= ~_GEN_PTS
        codec = self.demuxer.stream.codec_context
        if low_delay:
            # Frame threading holds back one picture per thread; slices do not.
            codec.thread_type = "SLICE"
            codec.flags |= av.codec.context.Flags.low_delay
        else:
            codec.thread_type = "AUTO"
        global _open_decoders
        with _open_lock:
            _open_decoders += 1
            self._counted = True
            codec.thread_count = threads or auto_decoder_threads(_open_decoders)
        self.threads = codec.thread_count
        """FFmpeg threads this stream decodes with."""
        self.info = self.demuxer.info
        self._rotation_said = False

    @property
    def corrupt_packets(self) -> int:
        return self.demuxer.corrupt_packets

    @property
    def packets_skipped(self) -> int:
        return self.demuxer.packets_skipped

    def seek(self, seconds: float) -> None:
        self.demuxer.seek(seconds)

    def _picture(self, decoded: av.VideoFrame) -> Picture:
        if decoded.rotation and not self._rotation_said:
            self._rotation_said = True
            log.warning(
                "%s: the video is to be shown turned %d degrees (its display matrix); vstream "
                "reads its pictures as they are stored, %dx%d, and its boxes are of those",
                self.demuxer.display_name, decoded.rotation, decoded.width, decoded.height,
            )  # fmt: skip
        pixel_format = self.pixel_format
        if decoded.width % 2 or decoded.height % 2:
            # Odd-sized 4:2:0 cannot be packed into one plane tensor: let FFmpeg give RGB.
            pixel_format = PixelFormat.RGB24
        pts = None
        stamp = best_effort_time(decoded)  # an AVI's packets have no pts
        if stamp is not None and decoded.time_base is not None:
            pts = float(stamp * decoded.time_base)
        picture = PyAVPicture(decoded)
        on_cpu = self.device.type == "cpu"
        return Picture(
            data=None if on_cpu else upload(picture.to_tensor(pixel_format), self.device),
            pixel_format=pixel_format,
            width=decoded.width,
            height=decoded.height,
            pts_seconds=pts,
            colour=colour_space(decoded.colorspace, decoded.color_range, decoded.format.name),
            decoded=picture if on_cpu else None,
            packet=self.demuxer.packet_stamp(decoded.pts),
        )

    def pictures(self) -> Iterator[Picture]:
        """Every picture of the stream in presentation order, skipping damaged packets.

        A connection that ends on an error (:class:`SourceUnavailable`) first hands out
        what the decoder holds back (pictures waiting for their turn, B-frames': whole,
        their packets read), as the end of a stream does.
        """
        demuxer = self.demuxer
        try:
            for packet in demuxer.packets():
                if packet.is_corrupt:
                    # Still decoded: FFmpeg's error concealment beats dropping a reference.
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
        except SourceUnavailable:
            try:
                held = demuxer.stream.decode(None)
            except av.error.FFmpegError:
                held = []
            for frame in held:
                # A frame flushed without a packet has no time base of its own.
                frame.time_base = frame.time_base or demuxer.stream.time_base
                yield self._picture(frame)
            raise

    def close(self) -> None:
        global _open_decoders
        with _open_lock:
            if self._counted:
                _open_decoders -= 1
                self._counted = False
        self.demuxer.close()
