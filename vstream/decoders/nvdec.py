"""The NVDEC decoder: PyNvVideoCodec decodes into CUDA memory; every frame is then vstream's own.

Packets come from the shared PyAV demuxer rather than PyNvVideoCodec's own
``CreateDemuxer``, because that one takes no open/read timeout or RTSP
transport option, and a dead camera would hang the reader thread. H.264 and
HEVC packets are rewritten to Annex B (what NVDEC parses) by FFmpeg's
bitstream filter and handed to ``Decoder.Decode`` as ``PacketData`` by address.

**Frame ownership.** ``Decode`` returns the decoder's own output buffers, and
PyNvVideoCodec reuses them on its next ``Decode`` call (it fills them from
index 0 again; only frames taken with ``GetLockedFrame`` are spared) and
frees them when the decoder object goes away. A frame handed to the pipeline
waits in the intake, in a batch and in the outputs long after that, so it
must not point there. Each surface is therefore adopted with
``torch.from_dlpack`` (no copy) and immediately copied, device to device and
on the decoder's own CUDA stream, into a buffer of a :class:`FrameRing` that
vstream owns: the copy is queued before the next ``Decode`` call can queue
its write into the same surface, so stream order alone makes it safe, with no
host synchronisation. The pixels never leave the GPU.

**One stream.** The decoder is created with ``cudastream`` set to the
pipeline's CUDA stream (the reader thread's current stream), in the device's
primary context (the one torch uses), so decoding, the copy and the
preprocessing that reads the frame are ordered on one stream. A caller on
the legacy default stream (stream 0: a script iterating a source on its main
thread) gets a stream vstream made instead, because PyNvVideoCodec
synchronises the host with stream 0 after every frame (``NvDecoder.cpp``,
``HandlePictureDisplay``); the caller's stream then waits for the copies by
an event, and the decoding stream waits for the caller's stream before each
``Decode``, so a ring buffer is never written while a read of its last frame
is still queued there.

The price of one stream: NVDEC's decode of a picture waits for the work
queued on the decoder's stream (``NvDecoder::HandlePictureDecode`` ends in
``cuEventSynchronize``, seen in a native stack on an H100), so a reader's
``Decode`` waits for the model's batches queued before it. Work on other
streams does not hold it (BENCHMARKS.md, "Live streams on one H100").

**Live input** (``low_delay``). NVDEC's parser holds a picture back until the
next packet begins (it cannot tell where a picture ends), and PyNvVideoCodec's
default display queue holds one more (``ulMaxDisplayDelay`` 1): a live picture
would leave the decoder two packets after its own, 67 ms at 30 frames/s and
200 ms at 10. For live input every packet is marked as one whole picture
(``CUVID_PKT_ENDOFPICTURE``: FFmpeg's demuxer hands out whole H.264 and HEVC
pictures) and the decoder is made with ``DisplayDecodeLatencyType.LOW`` (no display queue,
presentation order kept), so a picture comes out of its own packet's
``Decode`` unless B-frames make it wait for later ones. Files keep the default,
which overlaps decoding one picture with handing out the last.

**Reuse.** Creating an NVDEC session costs tens of milliseconds and a
reconnecting camera or a looping file would pay it on every pass. When a
pass ends the decoder is flushed and parked in a :class:`DecoderCache`; the
next pass of a stream with the same codec and output on the same stream takes
it back (``setReconfigParams`` when the size changed), as PyNvVideoCodec's own
decoder cache does.

**What NVDEC does not take.** Streams NVDEC cannot decode here (a codec it
lacks, 10-bit or 4:2:2/4:4:4 video, a size beyond the GPU's limits) raise
:class:`NvdecUnsupported` before any frame, so :func:`vstream.decoders.open_decoder`
can decode that one stream on the CPU instead. A 10-bit frame that arrives
anyway (P016 output, the container did not say) is cut to 8 bits on the
device rather than failing the stream.

**Devices.** The decoder's device is resolved to its index (``cuda`` is the
current device, :mod:`vstream.devices`): the surfaces PyNvVideoCodec exports
are on ``cuda:N``, and ``gpuid`` must name the same GPU.

Written against PyNvVideoCodec 2.x (``CreateDecoder``, ``PacketData``,
``cudaVideoCodec``, ``OutputColorType``, ``GetDecoderCaps``,
``setReconfigParams``, DLPack frames with ``getPTS``); covered by contract
tests against a fake that reuses and frees its surfaces as the library does,
exports them as CUDA memory and is imported the way the library is.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import av
import torch

from vstream.decoders.base import Picture
from vstream.decoders.colour import colour_space
from vstream.decoders.demux import Demuxer
from vstream.devices import indexed, same_device
from vstream.errors import SourceError, SourceUnavailable, first_line
from vstream.frame import ColourSpace, PixelFormat

log = logging.getLogger(__name__)

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

ANNEX_B_START_CODES = (b"\x00\x00\x01", b"\x00\x00\x00\x01")

HEADERS_FILTER = "dump_extra=freq=keyframe"
"""For Annex B input whose parameter sets come beside the stream (an RTSP camera's SDP):
FFmpeg's filter that puts them in front of every key frame."""

WHOLE_PICTURE_PACKETS = frozenset({"h264", "hevc"})
"""Codecs whose packets FFmpeg's demuxer hands out as exactly one picture each (its parser
joins a picture's NAL units), so that live input may mark every packet as one
(``CUVID_PKT_ENDOFPICTURE``). VP9 and AV1 packets can carry several frames, one of them
shown; their parser is left to find the pictures' ends."""

NVDEC_PIXEL_FORMATS = frozenset({"yuv420p", "yuvj420p", "nv12"})
"""Source layouts decoded on NVDEC: 8-bit 4:2:0. Others (10-bit, 4:2:2, 4:4:4) go to the CPU.

PyNvVideoCodec 2.x exports 10-bit (P016) frames through DLPack with strides
in mixed units, and its reconfiguration cannot change bit depth, so 10-bit
streams are decoded by FFmpeg, which converts them exactly.
"""

DEFAULT_RING_DEPTH = 8
"""Frame buffers a decoder starts with: a stream's queue, a batch being gathered and one in flight.

The ring grows past this when more of a stream's frames are alive at once
(larger batches, more buffers in flight, outputs holding frames); it never
overwrites a frame that is still referenced.
"""

PROBE_CLIP = Path(__file__).resolve().parents[1] / "assets" / "probe.mp4"
"""A 4-frame 96x64 H.264 clip (2 KB) decoded once to prove NVDEC works.

Made by ``tools/demo_assets/probe_clip.py``.
"""


class NvdecUnsupported(SourceError):
    """NVDEC cannot decode this stream here; the CPU decoder can (the caller may fall back)."""


def load_pynvvideocodec() -> ModuleType:
    """Import PyNvVideoCodec, or say on one line what is missing (a :class:`SourceError`).

    Importing it is not only finding it: PyNvVideoCodec 2.2 loads
    ``libnvidia-encode`` (the driver's NVENC library) in its ``__init__`` and
    raises ``RuntimeError`` with a page of troubleshooting when that fails, as
    in a container without the driver's ``video`` capability; its native
    module needs ``libcuda`` (``ImportError``). Either way NVDEC is not usable
    here, and the CPU decoder can take over.
    """
    try:
        return importlib.import_module("PyNvVideoCodec")
    except ImportError as exc:
        if getattr(exc, "name", None) == "PyNvVideoCodec":
            raise SourceError(
                "the nvdec decoder needs PyNvVideoCodec: pip install 'vstream[gpu]'"
            ) from exc
        raise SourceError(f"PyNvVideoCodec cannot be imported: {first_line(exc)}") from exc
    except Exception as exc:  # 2.2 raises RuntimeError when a driver library is missing
        raise SourceError(f"PyNvVideoCodec cannot be imported: {first_line(exc)}") from exc


def _refusal(exc: BaseException) -> str | None:
    """NVDEC's reason for refusing a stream, on one line; None when ``exc`` is something else.

    PyNvVideoCodec's ``NvDecoder`` checks the stream against the GPU's decode
    capabilities when the parser meets its sequence header, inside ``Decode``,
    and throws "Codec not supported on this GPU", "... Resolution not supported
    on this GPU", "MBCount not supported ...", "No supported output format
    found" or "Reconfigure Not supported for ..." (a mid-stream change it
    cannot follow); the multi-line ones start with a line break.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = "; ".join(lines)
    lowered = text.lower()
    if "not supported" in lowered or "no supported output format" in lowered:
        return text
    return None


_storage_use_count: Callable[[int], int] | None
try:
    _storage_use_count = torch._C._storage_Use_Count
except AttributeError:  # a torch without it: every frame gets a fresh buffer (still owned)
    _storage_use_count = None


def _use_count(tensor: torch.Tensor) -> int:
    """References to ``tensor``'s storage; called only where torch has the count."""
    assert _storage_use_count is not None
    return _storage_use_count(tensor.untyped_storage()._cdata)


class FrameRing:
    """Device buffers of one frame shape that decoded surfaces are copied into, reused safely.

    :meth:`take` hands out a new view of a buffer that no tensor refers to
    any more (its storage's use count is back to the ring's own reference), so
    a frame still waiting in a queue, a batch or an output is never written
    over; when every buffer is still referenced, the ring grows by one
    (counted in :attr:`grown`). Reuse needs no host synchronisation: every
    read of a frame was queued before its last reference went, on the
    decoder's stream or on one the decoder's stream waits for before the next
    copy (see :class:`NvdecDecoder`).
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        depth: int = DEFAULT_RING_DEPTH,
    ) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.depth = max(1, depth)
        self.buffers: list[torch.Tensor] = []
        self.grown = 0
        """Buffers added beyond :attr:`depth` because that many frames were alive at once."""
        self._baseline: list[int] = []
        self._next = 0

    def _allocate(self) -> torch.Tensor:
        buffer = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        self.buffers.append(buffer)
        self._baseline.append(_use_count(buffer) if _storage_use_count else 0)
        if len(self.buffers) > self.depth:
            self.grown += 1
        return buffer

    def _free(self, index: int) -> bool:
        return _use_count(self.buffers[index]) == self._baseline[index]

    def take(self) -> torch.Tensor:
        """A buffer for the next frame, as a view the frame alone holds."""
        if _storage_use_count is None:
            return torch.empty(self.shape, dtype=self.dtype, device=self.device)
        count = len(self.buffers)
        for step in range(count):
            index = (self._next + step) % count
            if self._free(index):
                self._next = index + 1
                return self.buffers[index].view(self.shape)
        self._next = 0
        return self._allocate().view(self.shape)

    def owns(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lies in one of this ring's buffers."""
        pointer = tensor.untyped_storage().data_ptr()
        return any(b.untyped_storage().data_ptr() == pointer for b in self.buffers)


@dataclass(eq=False)
class _Session:
    """One PyNvVideoCodec decoder, the size it is set up for, and the ring its frames go to."""

    decoder: Any
    key: tuple[Any, ...]
    size: tuple[int, int]
    ring: FrameRing | None = None
    done: Any = None
    """A CUDA event recorded after the last copy out of the decoder's surfaces (once parked)."""


def _release(session: _Session) -> None:
    """Drop a decoder for good: its surfaces are freed, so wait until nothing reads them."""
    from vstream.inference.providers import current_context_kept

    if session.done is not None:
        session.done.synchronize()  # not per frame: once, when a decoder is destroyed
    with current_context_kept():  # PyNvVideoCodec may leave another context current
        session.decoder = None
    session.ring = None


class DecoderCache:
    """Idle NVDEC decoders, kept for the next connection or loop pass of a stream like theirs.

    A decoder is reused only for the same GPU, CUDA stream, codec and output
    colour type; at most ``capacity`` idle decoders are kept (least recently
    parked dropped first), since each holds its surfaces in GPU memory.
    """

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self.reused = 0
        """Decoders handed out again instead of created."""
        self._idle: list[_Session] = []
        self._lock = threading.Lock()

    def take(self, key: tuple[Any, ...]) -> _Session | None:
        with self._lock:
            for position in range(len(self._idle) - 1, -1, -1):
                if self._idle[position].key == key:
                    self.reused += 1
                    return self._idle.pop(position)
        return None

    def give(self, session: _Session) -> None:
        with self._lock:
            self._idle.append(session)
            dropped = self._idle[: max(0, len(self._idle) - self.capacity)]
            del self._idle[: len(dropped)]
        for old in dropped:
            _release(old)

    def clear(self) -> None:
        with self._lock:
            dropped, self._idle = self._idle, []
        for old in dropped:
            _release(old)

    def drop_stream(self, handle: int) -> None:
        """Drop the decoders parked for CUDA stream ``handle``, which is being destroyed."""
        with self._lock:
            dropped = [s for s in self._idle if s.key[2] == handle]
            self._idle = [s for s in self._idle if s.key[2] != handle]
        for old in dropped:
            _release(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._idle)


DECODERS = DecoderCache()
"""The process's idle NVDEC decoders."""

_own_streams: dict[int, Any] = {}
_own_streams_lock = threading.Lock()


def _own_decoding_stream(device: torch.device) -> Any:
    """One stream per device for decoders whose caller is on the legacy default stream."""
    from vstream.inference.providers import pipeline_stream

    with _own_streams_lock:
        if device.index not in _own_streams:
            _own_streams[device.index] = pipeline_stream(device)
        return _own_streams[device.index]


_caps_lock = threading.Lock()
_caps: dict[tuple[int, int, str], Mapping[str, Any] | None] = {}


def decoder_caps(nvc: ModuleType, gpu: int, codec: str) -> Mapping[str, Any] | None:
    """NVDEC's capabilities for 8-bit 4:2:0 ``codec`` on ``gpu`` (None when unknown), asked once.

    ``GetDecoderCaps`` creates a CUDA context of its own (and leaves it
    current, so the thread's context is restored after it), so the answer is
    kept for the life of the process. PyNvVideoCodec 2.x asks device 0
    whatever ``gpuid`` says (``PyNvDecoderCaps``), so on a machine with
    different GPUs the answer for another index is GPU 0's.
    """
    key = (id(nvc), gpu, codec)
    with _caps_lock:
        if key not in _caps:
            from vstream.inference.providers import current_context_kept

            query = getattr(nvc, "GetDecoderCaps", None)
            try:
                with current_context_kept():
                    found = (
                        query(gpuid=gpu, codec=getattr(nvc.cudaVideoCodec, codec))
                        if query
                        else None
                    )
            except Exception as exc:  # the binding raises several types
                log.debug("GetDecoderCaps(%s) failed: %s", codec, first_line(exc))
                found = None
            _caps[key] = dict(found) if found else None
        return _caps[key]


class NvdecDecoder:
    """Decodes with NVDEC; frames are NV12 (or RGB) CUDA tensors in buffers vstream owns.

    ``device`` is a CUDA device (``cuda`` is the current one);
    ``cuda_stream`` is the raw handle of the stream decoding is ordered on
    (torch's current stream when None); ``ring_depth`` is how many frame buffers the
    decoder starts with; ``cache`` is where decoders are parked between
    passes (None: never reused); ``low_delay`` (live input) hands each picture out
    from its own packet's ``Decode`` and stamps it with the time that packet was
    read and the backlog then (:attr:`Picture.packet`). See :class:`Demuxer` for the
    input arguments.
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
        ring_depth: int = DEFAULT_RING_DEPTH,
        cache: DecoderCache | None = DECODERS,
        low_delay: bool = False,
        max_behind_seconds: float | None = None,
    ) -> None:
        if pixel_format is PixelFormat.YUV420P:
            raise SourceError("the nvdec decoder produces nv12 or rgb24, not yuv420p")
        self.device = indexed(device)
        if self.device.type != "cuda":
            raise SourceError(f"the nvdec decoder needs a CUDA device, not {self.device}")
        self._nvc = load_pynvvideocodec()
        self.pixel_format = pixel_format
        self.ring_depth = ring_depth
        self._cache = cache
        self._healthy = True
        self._ended = False
        self._warned_10bit = False
        self._stream, self._stream_handle = self._decoding_stream(cuda_stream)
        self.low_delay = low_delay
        self.demuxer = Demuxer(
            uri,
            options=options,
            input_format=input_format,
            timeout=timeout,
            stall_seconds=stall_seconds,
            stamp_packets=low_delay,
            max_behind_seconds=max_behind_seconds,
        )
        try:
            self.info = self.demuxer.info
            self._codec = self._supported_codec()
            self._whole_picture = (
                int(self._nvc.VideoPacketFlag.ENDOFPICTURE)
                if low_delay and self.info.codec in WHOLE_PICTURE_PACKETS
                else 0
            )
            """``PacketData.decode_flag`` of every packet: a whole picture, for live input."""
            self._time_base = self.demuxer.stream.time_base
            self._colour = self._stream_colour()
            self._bsf = self._annex_b_filter()
            self._session: _Session | None = self._acquire()
        except BaseException:
            self.demuxer.close()
            raise

    # -- setting up --------------------------------------------------------------------------

    def _decoding_stream(self, handle: int | None) -> tuple[Any, int]:
        """The torch stream decoding is ordered on and its raw handle.

        Never stream 0: on it PyNvVideoCodec synchronises after every frame.
        """
        stream: torch.cuda.Stream
        if handle is not None:
            stream = torch.cuda.ExternalStream(handle, device=self.device)
        else:
            stream = torch.cuda.current_stream(self.device)
        if stream.cuda_stream == 0:
            stream = _own_decoding_stream(self.device)
        return stream, stream.cuda_stream

    def _supported_codec(self) -> str:
        """The cudaVideoCodec member for this stream; :class:`NvdecUnsupported` if NVDEC can't."""
        name = self.demuxer.display_name
        codec = CODECS.get(self.info.codec)
        if codec is None:
            raise NvdecUnsupported(
                f"{name}: NVDEC cannot decode {self.info.codec} (use the cpu decoder)"
            )
        pix_fmt = self.demuxer.stream.codec_context.pix_fmt
        if pix_fmt is not None and pix_fmt not in NVDEC_PIXEL_FORMATS:
            raise NvdecUnsupported(
                f"{name}: {self.info.codec} {pix_fmt} video: NVDEC decodes 8-bit 4:2:0 here"
            )
        caps = decoder_caps(self._nvc, self.device.index, codec)
        if caps is not None:
            if not caps.get("supported", 1):
                raise NvdecUnsupported(f"{name}: this GPU's NVDEC has no {self.info.codec} decoder")
            width_max, height_max = caps.get("width_max", 0), caps.get("height_max", 0)
            if (
                width_max
                and height_max
                and (self.info.width > width_max or self.info.height > height_max)
            ):
                raise NvdecUnsupported(
                    f"{name}: {self.info.width}x{self.info.height} is beyond this GPU's NVDEC "
                    f"({width_max}x{height_max})"
                )
        return codec

    @property
    def _colour_type(self) -> Any:
        types = self._nvc.OutputColorType
        return types.RGB if self.pixel_format is PixelFormat.RGB24 else types.NATIVE

    def _key(self) -> tuple[Any, ...]:
        return (
            id(self._nvc),
            self.device.index,
            self._stream_handle,
            self._codec,
            self.pixel_format,
            self.low_delay,
        )

    def _acquire(self) -> _Session:
        """A parked decoder of the same kind, set up for this stream's size, else a new one."""
        key = self._key()
        size = (self.info.width, self.info.height)
        session = self._cache.take(key) if self._cache is not None else None
        if session is not None:
            if session.size == size:
                return session
            try:
                session.done.synchronize()  # reconfiguring frees the old output buffers
                session.decoder.setReconfigParams(width=size[0], height=size[1])
                session.size = size
                return session
            except Exception as exc:  # larger than the decoder was made for: make a new one
                log.debug("%s: NVDEC decoder not reusable (%s)", self.demuxer.display_name, exc)
                _release(session)
        return _Session(self._create_decoder(), key, size)

    def _create_decoder(self) -> Any:
        from vstream.inference.providers import current_context_kept

        nvc = self._nvc
        try:
            with current_context_kept():  # as GetDecoderCaps, it may leave its own current
                return nvc.CreateDecoder(
                    gpuid=self.device.index,
                    codec=getattr(nvc.cudaVideoCodec, self._codec),
                    cudacontext=0,  # 0: the device's primary context, which torch uses too
                    cudastream=self._stream_handle,
                    usedevicememory=True,
                    outputColorType=self._colour_type,
                    latency=(
                        nvc.DisplayDecodeLatencyType.LOW
                        if self.low_delay
                        else nvc.DisplayDecodeLatencyType.NATIVE
                    ),
                )
        except Exception as exc:
            raise SourceError(
                f"{self.demuxer.display_name}: cannot create the NVDEC decoder: {first_line(exc)}"
            ) from exc

    def _annex_b_filter(self) -> av.bitstream.BitStreamFilterContext | None:
        """FFmpeg's filter that makes the packets what NVDEC's parser reads: Annex B, with
        the parameter sets (SPS, PPS; VPS for HEVC) in the bitstream, since the parser
        reads them nowhere else.

        MP4's ``avcC``/``hvcC`` packets become Annex B, headers put in front of key frames.
        Annex B input passes that filter unchanged, so where its headers come beside the
        stream as Annex B (an RTSP camera's SDP) :data:`HEADERS_FILTER` puts them there:
        a camera that sends them in the SDP alone would otherwise never decode (stalled,
        reconnected, forever)."""
        name = ANNEX_B_FILTERS.get(self.info.codec)
        if name is None:
            return None
        extradata = self.demuxer.stream.codec_context.extradata
        if extradata and extradata.startswith(ANNEX_B_START_CODES):
            name = HEADERS_FILTER
        return av.bitstream.BitStreamFilterContext(name, self.demuxer.stream)

    def _stream_colour(self) -> ColourSpace:
        """The stream's colour space, by the rule the CPU decoder follows (NVDEC keeps the
        coded samples: a yuvj420p stream's stay full range)."""
        codec = self.demuxer.stream.codec_context
        return colour_space(codec.colorspace, codec.color_range, codec.pix_fmt)

    # -- decoding ----------------------------------------------------------------------------

    @property
    def corrupt_packets(self) -> int:
        return self.demuxer.corrupt_packets

    @property
    def packets_skipped(self) -> int:
        return self.demuxer.packets_skipped

    @property
    def ring(self) -> FrameRing | None:
        """The buffers this decoder's frames live in (None before the first frame)."""
        return self._session.ring if self._session is not None else None

    def seek(self, seconds: float) -> None:
        self.demuxer.seek(seconds)

    def _packet_data(self, packet: av.Packet | None) -> object:
        """``PacketData`` pointing at ``packet``'s bytes (kept alive by the caller); None: flush."""
        data = self._nvc.PacketData()
        if packet is None:
            data.bsl, data.bsl_data = 0, 0
            return data
        data.bsl, data.bsl_data = packet.buffer_size, packet.buffer_ptr
        data.decode_flag = self._whole_picture
        if packet.pts is not None:
            data.pts = packet.pts
        return data

    def _on_decoder_stream(self, current: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Queue work on the decoder's stream (a no-op when it is already the ``current`` one,
        by default the thread's)."""
        if current is None:
            current = torch.cuda.current_stream(self.device)
        if current == self._stream:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._stream)

    def _wait_for_readers(self, current: Any) -> None:
        """Order the next writes into the ring after the reads the taking stream (``current``)
        has queued."""
        if current != self._stream:
            self._stream.wait_stream(current)

    def _hand_over(self, current: Any) -> None:
        """Order the consumer's stream (``current``) after the copies when it is not the
        decoder's stream."""
        if current != self._stream:
            copied = torch.cuda.Event()
            copied.record(self._stream)
            current.wait_event(copied)

    def _eight_bit(self, surface: torch.Tensor) -> torch.Tensor:
        """``surface`` as 8-bit samples; P016 (10-bit in the high bits) keeps its high byte."""
        if surface.dtype == torch.uint8:
            return surface
        if surface.dtype != torch.uint16 or surface.dim() != 2:
            raise SourceError(
                f"{self.demuxer.display_name}: NVDEC returned {surface.dtype} frames of shape "
                f"{tuple(surface.shape)}"
            )
        if not self._warned_10bit:
            self._warned_10bit = True
            log.info("%s: 10-bit frames, cut to 8 bits on the GPU", self.demuxer.display_name)
        rows, width = surface.shape
        # PyNvVideoCodec 2.x gives P016 a column stride of 2 elements; the rows are `width` apart.
        rows_of_samples = surface.as_strided((rows, width), (width, 1), surface.storage_offset())
        return rows_of_samples.view(torch.uint8)[:, 1::2]  # little endian: the high byte

    def _ring_for(self, surface: torch.Tensor) -> FrameRing:
        session = self._session
        assert session is not None
        shape = tuple(surface.shape)
        if session.ring is None or session.ring.shape != shape:
            session.ring = FrameRing(shape, torch.uint8, self.device, self.ring_depth)
        return session.ring

    def _own(self, decoded: Any, current: Any) -> torch.Tensor:
        """Copy one decoded surface into a buffer of the ring, before the decoder reuses it
        (``current``: the thread's stream)."""
        with self._on_decoder_stream(current):
            # The capsule asked for on the decoder's stream (never 0), as torch.from_dlpack
            # would ask it, but directly: torch first tries keywords the binding lacks,
            # and builds and catches a TypeError for every frame.
            surface = torch.from_dlpack(decoded.__dlpack__(stream=self._stream.cuda_stream))
            if not same_device(surface.device, self.device):
                raise SourceError(
                    f"NVDEC returned a frame on {surface.device}, expected {self.device}"
                )
            surface = self._eight_bit(surface)
            data = self._ring_for(surface).take()
            data.copy_(surface)  # device to device, on the stream the next Decode writes on
        return data

    def _picture(self, data: torch.Tensor, pts: int | None) -> Picture:
        if self.pixel_format is PixelFormat.RGB24:
            height, width = data.shape[0], data.shape[1]
        else:
            height, width = data.shape[0] * 2 // 3, data.shape[1]
        return Picture(
            data=data,
            pixel_format=self.pixel_format,
            width=width,
            height=height,
            pts_seconds=(
                float(pts * self._time_base)
                if pts is not None and self._time_base is not None
                else None
            ),
            colour=self._colour,
            packet=self.demuxer.packet_stamp(pts),
        )

    def _decode(self, packet: av.Packet | None) -> list[Picture]:
        """Decode one packet (None: end of stream) into owned pictures.

        NVDEC's parser conceals damaged data itself; an exception from
        ``Decode`` is NVDEC refusing the stream (:class:`NvdecUnsupported`:
        the CPU decoder can take over), or a driver, CUDA or binding failure,
        which no reconnection fixes, so it fails the stream once instead of
        counting as damage.
        """
        session = self._session
        if session is None:
            raise SourceError(f"{self.demuxer.display_name}: the NVDEC decoder is closed")
        try:
            # The thread's stream, asked once a packet (torch builds a new object each time).
            current = torch.cuda.current_stream(self.device)
            self._wait_for_readers(current)
            decoded = list(session.decoder.Decode(self._packet_data(packet)))
            pictures = [self._picture(self._own(d, current), d.getPTS()) for d in decoded]
        except SourceError:
            self._healthy = False
            raise
        except Exception as exc:
            self._healthy = False
            refusal = _refusal(exc)
            if refusal is not None:
                raise NvdecUnsupported(
                    f"{self.demuxer.display_name}: NVDEC refused the stream: {refusal}"
                ) from exc
            raise SourceError(
                f"{self.demuxer.display_name}: NVDEC failed: {type(exc).__name__}: "
                f"{first_line(exc)}"
            ) from exc
        if pictures:
            self._hand_over(current)
        if packet is None:
            self._ended = True
        return pictures

    def _annex_b(self, packet: av.Packet | None) -> list[av.Packet | None]:
        """``packet`` as Annex B; at the end of stream, what the filter held back, then None.

        A packet too damaged to convert is counted and skipped, as the CPU decoder
        skips one FFmpeg's decoder rejects.
        """
        if self._bsf is None:
            return [packet]
        try:
            converted = self._bsf.filter(packet)
        except av.error.InvalidDataError as exc:
            self.demuxer.damaged("annex b", exc)
            converted = []
        return [*converted, *([None] if packet is None else [])]

    def pictures(self) -> Iterator[Picture]:
        """Every picture of the stream in presentation order, in buffers vstream owns.

        A connection that ends on an error (:class:`SourceUnavailable`) first hands out
        what the filter and the parser hold back, flushed as at the end of a stream.
        """
        try:
            for packet in self.demuxer.packets():
                flush = packet.size == 0
                if packet.is_corrupt:
                    self.demuxer.damaged("flagged by the demuxer")
                for annex_b in self._annex_b(None if flush else packet):
                    for picture in self._decode(annex_b):
                        self.demuxer.progress()
                        yield picture
        except SourceUnavailable:
            if self._healthy and not self._ended:
                for annex_b in self._annex_b(None):
                    yield from self._decode(annex_b)
            raise

    def close(self) -> None:
        """Park the decoder for the next pass (flushed), or drop it; release the input.

        Frames already handed out stay valid: they live in the ring, not in
        the decoder's surfaces.
        """
        session, self._session = self._session, None
        try:
            if session is not None:
                self._park(session)
        finally:
            self.demuxer.close()

    def _park(self, session: _Session) -> None:
        if self._cache is not None and self._healthy and not self._ended:
            try:  # a pass cut short (reconnect, stop): flush the parser before reuse
                with self._on_decoder_stream():
                    session.decoder.Decode(self._packet_data(None))
            except Exception as exc:
                log.debug("%s: NVDEC flush failed (%s)", self.demuxer.display_name, exc)
                self._healthy = False
        session.done = torch.cuda.Event()
        session.done.record(self._stream)
        if self._cache is not None and self._healthy:
            self._cache.give(session)
        else:
            _release(session)


@dataclass(frozen=True)
class ProbeResult:
    """Whether NVDEC decoded the probe clip correctly here, and one line saying why (not)."""

    available: bool
    reason: str


def probe(device: torch.device) -> ProbeResult:
    """Decode the bundled probe clip through :class:`NvdecDecoder` and check it against FFmpeg.

    Catches what an import cannot: no ``libnvcuvid`` (a container started
    without the ``video`` driver capability), a GPU without NVDEC, a broken
    binding, a PyNvVideoCodec that cannot be imported. The result is meant to
    be cached by the caller.
    """
    try:
        decoder = NvdecDecoder(str(PROBE_CLIP), device=device, cache=None)
    except Exception as exc:  # the binding and the driver raise several types
        return ProbeResult(False, first_line(exc))
    try:
        frames = [p.data for p in decoder.pictures() if p.data is not None]
        with av.open(str(PROBE_CLIP)) as container:
            expected = [f.to_ndarray(format="nv12") for f in container.decode(video=0)]
        if len(frames) != len(expected):
            return ProbeResult(False, f"NVDEC decoded {len(frames)} of {len(expected)} frames")
        worst = 0.0
        for got, want in zip(frames, expected, strict=True):
            reference = torch.from_numpy(want).to(got.device)  # once per process, 9 KB
            if tuple(got.shape) != tuple(reference.shape):
                return ProbeResult(False, f"NVDEC frames have shape {tuple(got.shape)}")
            worst = max(worst, float((got.float() - reference.float()).abs().mean()))
        if worst > 2.0:
            return ProbeResult(False, f"NVDEC frames differ from FFmpeg's by {worst:.1f} levels")
        return ProbeResult(
            True, f"decoded the probe clip: {len(frames)} frames, {worst:.2f} levels from FFmpeg"
        )
    except Exception as exc:  # the binding raises several types
        return ProbeResult(False, first_line(exc))
    finally:
        decoder.close()
