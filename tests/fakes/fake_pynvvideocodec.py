"""A FAKE of PyNvVideoCodec 2.x, for contract tests of vstream's NVDEC adapter without a GPU.

It mimics the part of the documented API the adapter relies on:
``cudaVideoCodec``, ``OutputColorType``, ``PacketData`` (``bsl_data`` is an
address, ``bsl`` a size, ``pts``), ``CreateDecoder(gpuid=, codec=,
cudacontext=, cudastream=, usedevicememory=, outputColorType=)`` and the
decoder's ``Decode(packet)``, which returns DLPack-capable frames with
``getPTS()``; an empty packet (``bsl == 0``) ends the stream and flushes.

Behind it, FFmpeg's software decoder (through PyAV) decodes the bytes the
adapter hands over, so the contract covers the bitstream too: like NVDEC's
parser, it rejects anything that is not Annex B. Frames are NV12 (or RGB)
torch tensors on the CPU, standing in for CUDA memory; every frame handed out
is remembered, so tests can check that the adapter adopted its memory rather
than copying it.
"""

from __future__ import annotations

import ctypes
import enum
from typing import Any

import av
import torch


class cudaVideoCodec(enum.Enum):
    MPEG1 = 0
    MPEG2 = 1
    MPEG4 = 2
    VC1 = 3
    H264 = 4
    JPEG = 5
    HEVC = 8
    VP8 = 9
    VP9 = 10
    AV1 = 11


class OutputColorType(enum.Enum):
    NATIVE = 0
    RGB = 1
    RGBP = 2


_FFMPEG_NAMES = {cudaVideoCodec.H264: "h264", cudaVideoCodec.HEVC: "hevc"}


class PacketData:
    def __init__(self) -> None:
        self.bsl_data = 0
        self.bsl = 0
        self.pts = 0


class DecodedFrame:
    """A decoded surface: DLPack-capable, with a time stamp."""

    def __init__(self, tensor: torch.Tensor, pts: int) -> None:
        self.tensor = tensor
        self._pts = pts

    def __dlpack__(self, **kwargs: Any) -> object:
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()

    def getPTS(self) -> int:
        return self._pts


class Decoder:
    fail_on_packets: frozenset[int] = frozenset()
    """1-based numbers of the packets whose Decode raises, as NVDEC does on damaged data."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self._codec = av.CodecContext.create(_FFMPEG_NAMES[kwargs["codec"]], "r")
        self._rgb = kwargs.get("outputColorType") is OutputColorType.RGB
        self.packets: list[bytes] = []
        self.frames: list[DecodedFrame] = []
        self.ended = False

    def Decode(self, packet: PacketData) -> list[DecodedFrame]:
        if self.ended:
            raise RuntimeError("Decode called after the end of the stream")
        if packet.bsl == 0:
            self.ended = True
            decoded = self._codec.decode(None)
        else:
            data = ctypes.string_at(packet.bsl_data, packet.bsl)
            self.packets.append(data)
            if len(self.packets) in self.fail_on_packets:
                raise RuntimeError("CUVID error: CUDA_ERROR_LAUNCH_FAILED")
            if not (data.startswith(b"\x00\x00\x00\x01") or data.startswith(b"\x00\x00\x01")):
                raise RuntimeError("not an Annex B bitstream")
            fed = av.Packet(data)
            fed.pts = packet.pts
            decoded = self._codec.decode(fed)
        frames = []
        for frame in decoded:
            array = frame.to_ndarray(format="rgb24" if self._rgb else "nv12")
            frames.append(DecodedFrame(torch.from_numpy(array), frame.pts))
        self.frames.extend(frames)
        return frames


created: list[Decoder] = []
"""Every decoder made, newest last."""


def CreateDecoder(**kwargs: Any) -> Decoder:
    decoder = Decoder(**kwargs)
    created.append(decoder)
    return decoder
