"""A FAKE of PyNvVideoCodec 2.x that reuses and frees its surfaces as the library does.

For contract tests of vstream's NVDEC adapter without a GPU, together with
:mod:`fakes.fake_cuda` (a fake ``cuda:0``). It mimics the part of the API the
adapter relies on: ``cudaVideoCodec``, ``OutputColorType``, ``Pixel_Format``,
``PacketData`` (``bsl_data`` is an address, ``bsl`` a size, ``pts``),
``CreateDecoder``, ``GetDecoderCaps``, and the decoder's ``Decode(packet)``,
``setReconfigParams(width=, height=)`` and ``GetPixelFormat()``. Frames are
DLPack-capable (``__dlpack__(stream)`` only, as the binding's: torch then
retries without its newer keywords) with ``getPTS()`` and ``format``. Behind
it, FFmpeg's software decoder (through PyAV) decodes the bytes the adapter
hands over, so the contract covers the bitstream too: like NVDEC's parser, it
rejects anything that is not Annex B.

What it copies from the library, because a fake without it hides real bugs
(read in the sources of 1.0.2, ``NvDecoder.cpp``, ``PyNvDecoder.cpp``,
``PyNvVideoCodecUtils.hpp``, ``ExternalBuffer.cpp``, and in the 2.2.4 wheel:
its ``__init__.py``, and the docstrings and keyword names compiled into
``PyNvVideoCodec_130.so``):

- **Its signatures.** ``CreateDecoder(gpuid, codec, cudacontext, cudastream,
  usedevicememory, maxwidth, maxheight, outputColorType, enableSEIMessage,
  bWaitForSessionWarmUp, latency, enableDecodeStats)`` and
  ``GetDecoderCaps(gpuid, codec, chromaformat, bitdepth)``, nothing else: a
  misspelt keyword is a ``TypeError`` here as in the binding. A ``gpuid``
  torch does not see is refused (``ValidateGpuId``).
- **Frames in CUDA memory.** With ``usedevicememory=True`` the surfaces are
  device memory of GPU ``gpuid``, and a frame's ``__dlpack_device__`` is
  ``(kDLCUDA, gpuid)`` (``ExternalBuffer::dlpack_device``): adopted with
  ``torch.from_dlpack`` it is a ``cuda:N`` tensor, never ``cuda``. Without
  it, host memory (``kDLCPU``).
- **Its import.** :func:`install` puts this module behind ``import
  PyNvVideoCodec`` through an importer, so the adapter's own import runs;
  ``install(error=DRIVER_WITHOUT_VIDEO)`` makes that import raise what 2.2.4's
  ``__init__`` raises where ``libnvidia-encode`` cannot be loaded (a
  ``RuntimeError``, not an ``ImportError``, with a page of troubleshooting),
  and, as Python does with a module whose import failed, every later import
  tries again.

- **Surface reuse.** ``Decode`` fills the decoder's output buffers from
  index 0 on every call (``m_nDecodedFrame = 0``); the frames a call returns
  are overwritten by the next call. A frame kept past the next ``Decode``
  shows the next frame's pixels, as on the GPU.
- **Freed at destruction.** When the decoder object goes (``close()`` of a
  source, every reconnect and loop pass in an adapter that does not reuse
  decoders), its buffers are poisoned with :data:`FREED`, standing in for
  memory returned to the driver. ``setReconfigParams`` with a new size frees
  them too.
- **End of stream, then more.** An empty packet flushes the parser; after it
  the same decoder accepts a new stream (the library's own decoder cache and
  seeking rely on this).
- **Damage is concealed.** NVDEC's parser skips what it cannot parse and
  ``Decode`` returns what it could decode, without an error (the library
  throws only for CUDA and driver failures, and the refusals below): a
  packet FFmpeg's decoder rejects gives no frame here, not an exception.
- **Range untouched.** NVDEC hands out the coded samples: a full-range
  (``yuvj420p``) stream's NV12 is still full range (FFmpeg's ``nv12`` of a
  ``yuvj420p`` frame copies the planes as they are, as checked by
  ``tests/test_decoder_contract.py``).
- **Refusals inside Decode.** ``NvDecoder::HandleVideoSequence`` checks the
  stream against the decode capabilities when the parser meets the first
  sequence header, so a codec in :data:`unsupported` or a size beyond
  :data:`max_size` raises "Codec not supported on this GPU" / "...
  Resolution not supported on this GPU" from the first ``Decode``, also when
  ``GetDecoderCaps`` was not asked (tests may delete it, as older bindings
  lack it). :attr:`Decoder.refuse_on_packets` raises the library's text for
  a mid-stream change it cannot follow.
- **When pictures come out.** NVDEC's parser (``cuvidParseVideoData``) cannot tell
  where a picture ends until the next one begins, so a packet's picture is decoded
  when the next packet arrives, unless the packet carries ``CUVID_PKT_ENDOFPICTURE``
  (``VideoPacketFlag.ENDOFPICTURE``, 8 in ``nvcuvid.h``; ``NvDecoder::Decode`` passes
  ``PacketData.decode_flag`` on as the packet's flags). Decoded pictures then wait in
  presentation order for the pictures they are reordered after (here FFmpeg's DPB,
  single-threaded so that it adds no delay of its own), and then in the display
  queue of ``ulMaxDisplayDelay`` pictures: 1 for ``DisplayDecodeLatencyType.NATIVE``,
  0 for ``LOW`` (``NvDecoder``'s constructor: ``bLowLatency ? 0 : 1``). The end of
  stream empties all of them. ``ZERO`` (decode order) is not modelled.
- **Headers from the bitstream alone.** ``CreateDecoder`` takes no extradata: the
  parser knows only the parameter sets (SPS, PPS) the packets carry, so its FFmpeg
  decoder is made without extradata, and a stream whose headers came beside it (an
  RTSP camera's SDP) decodes nothing until they are put in a packet.
- **10-bit.** 10-bit input comes out as P016 (``uint16``, samples in the high
  bits), exported with the column stride of 2 elements the 2.x binding gives
  (``GetCAIMemoryViewAndDLPack``: strides ``{width, 2}`` for a ``|u2`` tensor).

Device memory is :mod:`fakes.fake_cuda`'s: host memory that reports ``cuda:0``.
"""

from __future__ import annotations

import ctypes
import enum
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import av
import numpy as np
import pytest
import torch

from fakes.fake_cuda import KDL_CUDA, cuda_capsule, host

FREED = 0xEE
"""What a freed surface holds: a value no test video produces in every byte."""


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


class DisplayDecodeLatencyType(enum.Enum):
    NATIVE = 0
    LOW = 1
    ZERO = 2


class VideoPacketFlag(enum.IntEnum):
    """``CUvideopacketflags`` (``nvcuvid.h``), an int as the binding's enum converts to."""

    ENDOFSTREAM = 0x01
    TIMESTAMP = 0x02
    DISCONTINUITY = 0x04
    ENDOFPICTURE = 0x08
    NOTIFY_EOS = 0x10


class cudaVideoChromaFormat(enum.Enum):
    Monochrome = 0
    YUV420 = 1
    YUV422 = 2
    YUV444 = 3


class Pixel_Format(enum.Enum):
    NV12 = 0
    YUV444 = 1
    P016 = 2
    RGB = 6


_FFMPEG_NAMES = {cudaVideoCodec.H264: "h264", cudaVideoCodec.HEVC: "hevc"}

unsupported: set[cudaVideoCodec] = set()
"""Codecs ``GetDecoderCaps`` reports unsupported (tests set it; :func:`reset` clears it)."""
max_size = (4096, 4096)
"""``width_max`` and ``height_max`` ``GetDecoderCaps`` reports."""


class PacketData:
    def __init__(self) -> None:
        self.bsl_data = 0
        self.bsl = 0
        self.pts = 0
        self.decode_flag = 0
        self.bDiscontinuity = False


@dataclass
class Session:
    """What one decoder object went through; kept after the decoder is gone."""

    kwargs: dict[str, Any]
    packets: list[bytes] = field(default_factory=list)
    frames: int = 0
    """Frames returned by Decode."""
    ends: int = 0
    """Empty (end of stream) packets received."""
    flags: list[int] = field(default_factory=list)
    """The ``decode_flag`` of every packet, in order."""
    returned: list[list[int]] = field(default_factory=list)
    """The time stamps of the pictures each ``Decode`` call returned, in order."""
    reconfigured: list[tuple[int, int]] = field(default_factory=list)
    released: bool = False
    """The decoder object was destroyed and its surfaces freed."""
    surfaces: list[torch.Tensor] = field(default_factory=list)
    """Its output buffers, by allocation (for tests that inspect addresses)."""
    streams_asked: list[int | None] = field(default_factory=list)
    """The ``stream`` of every ``__dlpack__`` call on its frames, in order."""


sessions: list[Session] = []
"""Every decoder made, newest last."""


def reset() -> None:
    sessions.clear()
    unsupported.clear()


class DecodedFrame:
    """A decoded surface: DLPack-capable, with a time stamp, valid until the next Decode."""

    def __init__(
        self, tensor: torch.Tensor, pts: int, fmt: Pixel_Format, gpuid: int | None
    ) -> None:
        self.tensor = tensor
        self.format = fmt
        self._pts = pts
        self._gpuid = gpuid
        """The GPU whose memory holds the frame; None: host memory (``usedevicememory=False``)."""
        self.streams_asked: list[int | None] = []

    def __dlpack__(self, stream: int | None = None) -> object:
        """Like the binding's: only ``stream`` (torch retries without newer keywords), never 0.

        On CUDA the real one makes ``stream`` wait on the frame's event when it
        is not the decoder's stream (``ExternalBuffer::dlpack``); a CPU tensor
        has no stream, and torch passes none for it.
        """
        if stream == 0:
            raise RuntimeError("Invalid value for stream parameter. Passed value of 0")
        self.streams_asked.append(stream)
        capsule = host(self.tensor).__dlpack__()
        return capsule if self._gpuid is None else cuda_capsule(capsule)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self._gpuid) if self._gpuid is not None else (1, 0)  # 1: kDLCPU

    def getPTS(self) -> int:
        return self._pts


def _p016(frame: av.VideoFrame) -> np.ndarray:
    """A 10-bit 4:2:0 frame as P016: Y rows then interleaved UV rows, samples << 6."""
    planar = frame.to_ndarray(format="yuv420p10le")
    h, w = frame.height, frame.width
    quarter = h // 4
    u = planar[h : h + quarter].reshape(h // 2, w // 2)
    v = planar[h + quarter : h + 2 * quarter].reshape(h // 2, w // 2)
    out = np.empty((h * 3 // 2, w), np.uint16)
    out[:h] = planar[:h]
    out[h:].reshape(h // 2, w // 2, 2)[..., 0] = u
    out[h:].reshape(h // 2, w // 2, 2)[..., 1] = v
    return out << 6


class Decoder:
    fail_on_packets: frozenset[int] = frozenset()
    """1-based numbers of the packets whose Decode raises, as a driver failure does."""
    refuse_on_packets: frozenset[int] = frozenset()
    """1-based numbers of the packets whose Decode refuses a mid-stream change, as NVDEC does."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.session = Session(kwargs)
        sessions.append(self.session)
        self._gpuid = kwargs["gpuid"] if kwargs["usedevicememory"] else None
        self._codec_name = _FFMPEG_NAMES[kwargs["codec"]]
        self._codec = self._parser()
        self._held: list[av.VideoFrame] = []
        """Pictures of a packet whose end the parser has not seen yet."""
        self._display: list[av.VideoFrame] = []
        """Decoded pictures in the display queue."""
        self._display_delay = 0 if kwargs["latency"] is DisplayDecodeLatencyType.LOW else 1
        self._rgb = kwargs.get("outputColorType") is OutputColorType.RGB
        self._surfaces: list[torch.Tensor] = []
        self._max: tuple[int, int] | None = None
        self._size: tuple[int, int] | None = None
        self._format = Pixel_Format.RGB if self._rgb else Pixel_Format.NV12

    # What the adapter never sees in the real library, but tests may.
    @property
    def surfaces(self) -> list[torch.Tensor]:
        return self._surfaces

    def GetPixelFormat(self) -> Pixel_Format:
        return self._format

    def _surface(self, index: int, array: np.ndarray) -> torch.Tensor:
        """Output buffer ``index``, reused from call to call, holding ``array`` now."""
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        # P016 gets a row of slack, as the binding's strides reach past the frame.
        nbytes = raw.size + (array.shape[1] * 2 if array.dtype == np.uint16 else 0)
        if index < len(self._surfaces) and self._surfaces[index].numel() != nbytes:
            self._free()
        while index >= len(self._surfaces):
            device = "cpu" if self._gpuid is None else f"cuda:{self._gpuid}"
            buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self._surfaces.append(buffer)
            self.session.surfaces.append(buffer)
        buffer = self._surfaces[index]
        buffer[: raw.size].copy_(torch.from_numpy(raw))
        if array.dtype == np.uint16:  # the binding's P016 strides: (width, 2) elements
            rows, width = array.shape
            return buffer.view(torch.uint16).as_strided((rows, width), (width, 2))
        return buffer[: raw.size].view(array.shape)

    def _free(self) -> None:
        for buffer in self._surfaces:
            buffer.fill_(FREED)
        self._surfaces = []

    def _parser(self) -> av.CodecContext:
        codec = av.CodecContext.create(self._codec_name, "r")
        codec.thread_count = 1  # frame threads would hold pictures back, as NVDEC does not
        return codec

    def _decode_packet(self, packet: av.Packet | None) -> list[av.VideoFrame]:
        try:
            return list(self._codec.decode(packet))
        except av.error.InvalidDataError:
            return []  # concealed, as NVDEC's parser does

    def _parse(self, packet: av.Packet | None, whole_picture: bool) -> list[av.VideoFrame]:
        """The pictures ready for display after ``packet`` (None: the end of the stream).

        FFmpeg decodes every packet at once (so the sequence is checked on the first,
        as ``HandleVideoSequence`` is); what it hands out for a packet whose end the
        parser has not seen waits for the next packet, as that picture's decode would.
        """
        ready, self._held = self._held, []
        if packet is None:
            ready, self._display = self._display + ready + self._decode_packet(None), []
            return ready
        if whole_picture:
            ready += self._decode_packet(packet)
        else:
            self._held = self._decode_packet(packet)
        self._display += ready
        cut = max(0, len(self._display) - self._display_delay)
        ready, self._display = self._display[:cut], self._display[cut:]
        return ready

    def Decode(self, packet: PacketData) -> list[DecodedFrame]:
        if packet.bsl == 0:
            self.session.ends += 1
            decoded = self._parse(None, False)
            self._codec = self._parser()  # ready for more
        else:
            data = ctypes.string_at(packet.bsl_data, packet.bsl)
            self.session.packets.append(data)
            if len(self.session.packets) in self.fail_on_packets:
                raise RuntimeError("CUVID error: CUDA_ERROR_LAUNCH_FAILED")
            if len(self.session.packets) in self.refuse_on_packets:
                raise RuntimeError("Reconfigure Not supported for bit depth change")
            if not (data.startswith(b"\x00\x00\x00\x01") or data.startswith(b"\x00\x00\x01")):
                raise RuntimeError("not an Annex B bitstream")
            self.session.flags.append(packet.decode_flag)
            fed = av.Packet(data)
            fed.pts = packet.pts
            decoded = self._parse(fed, bool(packet.decode_flag & VideoPacketFlag.ENDOFPICTURE))
            self._check_sequence(self._codec)
        frames = []
        for index, frame in enumerate(decoded):  # from index 0 again: last call's frames go
            size = (frame.width, frame.height)
            if self._max is None:
                self._max = (-(-frame.width // 32) * 32, -(-frame.height // 32) * 32)
            if self._size is not None and size != self._size:
                raise RuntimeError("Reconfigure Not supported without setReconfigParams")
            self._size = size
            if self._rgb:
                array, fmt = frame.to_ndarray(format="rgb24"), Pixel_Format.RGB
            elif "p10" in frame.format.name:
                array, fmt = _p016(frame), Pixel_Format.P016
            else:
                array, fmt = frame.to_ndarray(format="nv12"), Pixel_Format.NV12
            self._format = fmt
            decoded_frame = DecodedFrame(self._surface(index, array), frame.pts, fmt, self._gpuid)
            decoded_frame.streams_asked = self.session.streams_asked
            frames.append(decoded_frame)
        self.session.frames += len(frames)
        self.session.returned.append([frame.getPTS() for frame in frames])
        return frames

    def _check_sequence(self, codec: av.CodecContext) -> None:
        """What ``HandleVideoSequence`` checks once the parser has seen the sequence header."""
        if self.kwargs["codec"] in unsupported:
            raise RuntimeError("Codec not supported on this GPU")
        if codec.width > max_size[0] or codec.height > max_size[1]:
            raise RuntimeError(
                f"\nResolution          : {codec.width}x{codec.height}\n"
                f"Max Supported (wxh) : {max_size[0]}x{max_size[1]}\n"
                "Resolution not supported on this GPU"
            )

    def setReconfigParams(self, width: int = 0, height: int = 0) -> int:
        if (width, height) == (0, 0):
            return 0
        if self._max is not None and (width > self._max[0] or height > self._max[1]):
            raise RuntimeError(
                "Resize dimensions must be lower than max width and height, "
                "please recreate decoder instance"
            )
        self.session.reconfigured.append((width, height))
        if self._size != (width, height):
            self._free()  # the library frees output buffers of the old size
        self._size = None
        return 1

    def __del__(self) -> None:
        self._free()
        self.session.released = True


def CreateDecoder(
    gpuid: int = 0,
    codec: cudaVideoCodec = cudaVideoCodec.H264,
    cudacontext: int = 0,
    cudastream: int = 0,
    usedevicememory: bool = False,
    maxwidth: int = 0,
    maxheight: int = 0,
    outputColorType: OutputColorType = OutputColorType.NATIVE,
    enableSEIMessage: bool = False,
    bWaitForSessionWarmUp: bool = False,
    latency: DisplayDecodeLatencyType = DisplayDecodeLatencyType.NATIVE,
    enableDecodeStats: bool = False,
) -> Decoder:
    """The binding's keywords and defaults, no others (2.2.4's ``PyNvDecoder`` docstring)."""
    if not 0 <= gpuid < torch.cuda.device_count():
        raise RuntimeError(f"ValidateGpuId: invalid GPU id {gpuid}")
    return Decoder(dict(locals()))


def GetDecoderCaps(
    gpuid: int = 0,
    codec: cudaVideoCodec = cudaVideoCodec.H264,
    chromaformat: cudaVideoChromaFormat = cudaVideoChromaFormat.YUV420,
    bitdepth: int = 8,
) -> dict[str, int]:
    return {
        "codec_id": codec.value,
        "supported": int(codec not in unsupported),
        "width_max": max_size[0],
        "height_max": max_size[1],
    }


DRIVER_WITHOUT_VIDEO = (
    "Failed to load NVENC library: libnvidia-encode.so.1: cannot open shared object file: "
    "No such file or directory\n\n=== TROUBLESHOOTING STEPS ===\n\nThe NVENC library could "
    "not be found. This usually means:\n\n1. **Running in Docker?**"
)
"""What ``import PyNvVideoCodec`` 2.2.4 raises (a ``RuntimeError``) without ``libnvidia-encode``."""


class Importer(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import PyNvVideoCodec`` gives this module, or raises ``RuntimeError(error)`` as 2.2.4."""

    def __init__(self, error: str | None) -> None:
        self.error = error
        self.imports = 0
        """Times the import ran (a failed import is not kept in ``sys.modules``: it runs again)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "PyNvVideoCodec":
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return sys.modules[__name__]

    def exec_module(self, module: ModuleType) -> None:
        self.imports += 1
        if self.error is not None:
            raise RuntimeError(self.error)


def install(monkeypatch: pytest.MonkeyPatch, error: str | None = None) -> Importer:
    """Make ``import PyNvVideoCodec`` go through :class:`Importer` for one test."""
    importer = Importer(error)
    monkeypatch.setattr(sys, "meta_path", [importer, *sys.meta_path])
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)  # undone: removed after the test
    del sys.modules["PyNvVideoCodec"]
    return importer
