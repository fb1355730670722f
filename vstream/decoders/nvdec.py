"""The NVDEC decoder: PyNvVideoCodec decodes straight into CUDA memory.

Packets come from the shared PyAV demuxer rather than PyNvVideoCodec's own
``CreateDemuxer``, because that one takes no open/read timeout or RTSP
transport option, and a dead camera would hang the reader thread. H.264 and
HEVC packets are rewritten to Annex B (what NVDEC parses) by FFmpeg's
bitstream filter, handed to ``Decoder.Decode`` as ``PacketData`` by address,
and the decoded surfaces are adopted with ``torch.from_dlpack``: the pixels
never leave the GPU. Decoding runs on the CUDA stream the pipeline uses, in
the device's primary context, the one torch uses, so no synchronisation or
context switch is needed between decoding and preprocessing.

Written against the documented PyNvVideoCodec 2.x API (``CreateDecoder``,
``PacketData``, ``cudaVideoCodec``, ``OutputColorType``, DLPack frames with
``getPTS``); covered by contract tests against a fake of that module.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType

import av
import torch

from vstream.decoders.base import Picture
from vstream.decoders.demux import Demuxer
from vstream.errors import SourceError
from vstream.frame import ColourMatrix, ColourSpace, PixelFormat

# FFmpeg codec name -> member of PyNvVideoCodec.cudaVideoCodec.
CODECS = {
    "h264": "H264",
    "hevc": "HEVC",
    "av1": "AV1",
    "vp9": "VP9",
    "vp8": "VP8",
    "mpeg4": "MPEG4",
    "mpeg2video": "MPEG2",
    "mpeg1video": "MPEG1",
    "vc1": "VC1",
    "mjpeg": "JPEG",
}
# Codecs whose MP4/MKV packets (length-prefixed) must become Annex B for NVDEC's parser.
ANNEX_B_FILTERS = {"h264": "h264_mp4toannexb", "hevc": "hevc_mp4toannexb"}

_AVCOL_SPC_BT709 = 1
_AVCOL_RANGE_JPEG = 2


def load_pynvvideocodec() -> ModuleType:
    """Import PyNvVideoCodec, or say clearly what is missing."""
    try:
        return importlib.import_module("PyNvVideoCodec")
    except ImportError as exc:
        raise SourceError(
            "the nvdec decoder needs PyNvVideoCodec: pip install 'vstream[gpu]'"
        ) from exc


class NvdecDecoder:
    """Decodes with NVDEC into device memory; frames are NV12 (or RGB) CUDA tensors.

    ``cuda_stream`` is the raw handle of the stream decoding is ordered on
    (torch's current stream when None); ``nvc`` is the PyNvVideoCodec module,
    injectable for tests. See :class:`Demuxer` for the input arguments.
    """

    name = "nvdec"

    def __init__(
        self,
        uri: str,
        *,
        device: torch.device,
        pixel_format: PixelFormat = PixelFormat.NV12,
        options: Mapping[str, str] | None = None,
        input_format: str | None = None,
        timeout: tuple[float, float] | None = None,
        stall_seconds: float | None = None,
        cuda_stream: int | None = None,
        nvc: ModuleType | None = None,
    ) -> None:
        if pixel_format is PixelFormat.YUV420P:
            raise SourceError("the nvdec decoder produces nv12 or rgb24, not yuv420p")
        self._nvc = nvc or load_pynvvideocodec()
        self.device = device
        self.pixel_format = pixel_format
        self.demuxer = Demuxer(
            uri,
            options=options,
            input_format=input_format,
            timeout=timeout,
            stall_seconds=stall_seconds,
        )
        try:
            self.info = self.demuxer.info
            self._time_base = self.demuxer.stream.time_base
            self._colour = self._stream_colour()
            self._bsf = self._annex_b_filter()
            self._decoder = self._create_decoder(cuda_stream)
        except BaseException:
            self.demuxer.close()
            raise

    def _create_decoder(self, cuda_stream: int | None) -> object:
        nvc = self._nvc
        codec = CODECS.get(self.info.codec)
        if codec is None:
            raise SourceError(
                f"{self.demuxer.display_name}: NVDEC cannot decode {self.info.codec} "
                "(use the cpu decoder)"
            )
        if cuda_stream is None:
            cuda_stream = torch.cuda.current_stream(self.device).cuda_stream
        colour_type = (
            nvc.OutputColorType.RGB
            if self.pixel_format is PixelFormat.RGB24
            else nvc.OutputColorType.NATIVE
        )
        try:
            return nvc.CreateDecoder(
                gpuid=self.device.index or 0,
                codec=getattr(nvc.cudaVideoCodec, codec),
                cudacontext=0,  # 0: the device's primary context, which torch uses too
                cudastream=cuda_stream,
                usedevicememory=True,
                outputColorType=colour_type,
            )
        except Exception as exc:
            raise SourceError(
                f"{self.demuxer.display_name}: cannot create the NVDEC decoder: {exc}"
            ) from exc

    def _annex_b_filter(self) -> av.bitstream.BitStreamFilterContext | None:
        name = ANNEX_B_FILTERS.get(self.info.codec)
        if name is None:
            return None
        return av.bitstream.BitStreamFilterContext(name, self.demuxer.stream)

    def _stream_colour(self) -> ColourSpace:
        codec = self.demuxer.stream.codec_context
        matrix = ColourMatrix.BT709 if codec.colorspace == _AVCOL_SPC_BT709 else ColourMatrix.BT601
        return ColourSpace(matrix=matrix, full_range=codec.color_range == _AVCOL_RANGE_JPEG)

    @property
    def corrupt_packets(self) -> int:
        return self.demuxer.corrupt_packets

    def seek(self, seconds: float) -> None:
        self.demuxer.seek(seconds)

    def _packet_data(self, packet: av.Packet | None) -> object:
        """``PacketData`` pointing at ``packet``'s bytes (kept alive by the caller); None: flush."""
        data = self._nvc.PacketData()
        if packet is None:
            data.bsl, data.bsl_data = 0, 0
            return data
        data.bsl, data.bsl_data = packet.buffer_size, packet.buffer_ptr
        if packet.pts is not None:
            data.pts = packet.pts
        return data

    def _picture(self, decoded: object) -> Picture:
        tensor = torch.from_dlpack(decoded)
        if tensor.device != self.device:
            raise SourceError(f"NVDEC returned a frame on {tensor.device}, expected {self.device}")
        if self.pixel_format is PixelFormat.RGB24:
            height, width = tensor.shape[0], tensor.shape[1]
        else:
            height, width = tensor.shape[0] * 2 // 3, tensor.shape[1]
        pts = decoded.getPTS()
        return Picture(
            data=tensor,
            pixel_format=self.pixel_format,
            width=width,
            height=height,
            pts_seconds=float(pts * self._time_base) if self._time_base is not None else None,
            colour=self._colour,
        )

    def _decode(self, packet: av.Packet | None) -> list[object]:
        """Decode one packet (None: end of stream).

        NVDEC's parser conceals damaged data itself; an exception from
        ``Decode`` is a driver, CUDA or binding failure, which no reconnection
        fixes, so it fails the stream once instead of counting as damage.
        """
        try:
            return list(self._decoder.Decode(self._packet_data(packet)))
        except Exception as exc:
            raise SourceError(
                f"{self.demuxer.display_name}: NVDEC failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _annex_b(self, packet: av.Packet | None) -> list[av.Packet | None]:
        """``packet`` as Annex B; at the end of stream, what the filter held back, then None."""
        if self._bsf is None:
            return [packet]
        return [*self._bsf.filter(packet), *([None] if packet is None else [])]

    def pictures(self) -> Iterator[Picture]:
        """Every picture of the stream in presentation order, as device tensors."""
        for packet in self.demuxer.packets():
            flush = packet.size == 0
            if packet.is_corrupt:
                self.demuxer.damaged("flagged by the demuxer")
            for annex_b in self._annex_b(None if flush else packet):
                for decoded in self._decode(annex_b):
                    self.demuxer.progress()
                    yield self._picture(decoded)

    def close(self) -> None:
        self._decoder = None
        self.demuxer.close()
