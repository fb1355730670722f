"""Decoders: compressed video in, device tensors out.

``cpu`` is PyAV (FFmpeg) with frame threading; ``nvdec`` is PyNvVideoCodec,
which decodes straight into CUDA memory. Whether NVDEC works is found once per
device by decoding a tiny bundled clip (an import proves nothing: a container
without the ``video`` driver capability imports PyNvVideoCodec fine and fails
at the first frame). ``auto`` picks ``nvdec`` where that probe passed and says
so once in the log. A stream NVDEC cannot decode (a codec it lacks, 10-bit
video, a size beyond the GPU) is decoded on the CPU instead, that stream
alone, with one notice line, whether that shows before decoding or only
when NVDEC's parser meets the stream.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from vstream.config.sources import DecoderKind
from vstream.decoders.base import Decoder, Picture, StreamInfo
from vstream.devices import indexed
from vstream.errors import SourceError, SourceUnavailable
from vstream.frame import PixelFormat
from vstream.uri import redact_uri

if TYPE_CHECKING:
    from vstream.decoders.nvdec import NvdecDecoder

log = logging.getLogger(__name__)

_lock = threading.Lock()
_probed: dict[tuple[str, int], tuple[bool, str]] = {}
_choices: dict[tuple[str, int], DecoderKind] = {}
_cpu_streams: dict[str, str] = {}
"""Streams (by address without credentials) that NVDEC could not decode, and why."""
_MAX_REMEMBERED = 10_000


def _key(device: torch.device) -> tuple[str, int]:
    """``device`` as a key, ``cuda`` and ``cuda:N`` of the current device being one."""
    device = indexed(device)
    return device.type, device.index or 0


def _probe(device: torch.device) -> tuple[bool, str]:
    if device.type != "cuda":
        return False, f"the pipeline runs on {device}"
    if importlib.util.find_spec("PyNvVideoCodec") is None:
        return False, "PyNvVideoCodec is not installed (pip install 'vstream[gpu]')"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device"
    from vstream.decoders.nvdec import probe

    result = probe(device)
    return result.available, result.reason


def nvdec_status(device: torch.device | str | None = None) -> tuple[bool, str]:
    """``(works, why)`` for NVDEC on ``device`` (default ``cuda``), probed once per device.

    Whatever stops NVDEC here (PyNvVideoCodec failing to import, no
    ``libnvcuvid``, a binding error) is the answer, cached: never raised,
    never retried.
    """
    device = indexed("cuda" if device is None else device)
    with _lock:
        key = _key(device)
        if key not in _probed:
            _probed[key] = _probe(device)
        return _probed[key]


def nvdec_available(device: torch.device | str | None = None) -> bool:
    """Whether NVDEC decoded the bundled probe clip correctly on ``device`` (default ``cuda``)."""
    return nvdec_status(device)[0]


def reset_probe() -> None:
    """Forget what was probed and chosen (tests; a process normally probes once)."""
    with _lock:
        _probed.clear()
        _choices.clear()
        _cpu_streams.clear()


def _auto_choice(device: torch.device) -> DecoderKind:
    """The decoder ``auto`` means on this machine for a pipeline on ``device``, logged once."""
    if device.type != "cuda":
        with _lock:
            if _key(device) not in _choices:
                _choices[_key(device)] = DecoderKind.CPU
                log.debug("decoder: cpu (the pipeline runs on %s)", device.type)
            return DecoderKind.CPU
    works, why = nvdec_status(device)
    with _lock:
        if _key(device) not in _choices:
            if works:
                log.info("decoder: nvdec (%s; frames stay in CUDA memory)", why)
            else:
                log.info("decoder: cpu (NVDEC unavailable: %s; frames are copied to the GPU)", why)
            _choices[_key(device)] = DecoderKind.NVDEC if works else DecoderKind.CPU
        return _choices[_key(device)]


def resolve_decoder(kind: DecoderKind | str, device: torch.device) -> DecoderKind:
    """The concrete decoder for ``kind`` when frames must end up on ``device``."""
    kind = DecoderKind(kind)
    device = indexed(device)
    if kind is DecoderKind.AUTO:
        return _auto_choice(device)
    if kind is DecoderKind.NVDEC:
        if device.type != "cuda":
            raise SourceError(
                f"the nvdec decoder needs a CUDA device, but the pipeline runs on {device}"
            )
        works, why = nvdec_status(device)
        if not works:
            raise SourceError(f"the nvdec decoder does not work here: {why}")
    return kind


def _fall_back(uri: str, reason: str) -> None:
    """Remember that ``uri`` decodes on the CPU; say so once per stream."""
    name = redact_uri(uri)
    with _lock:
        if name in _cpu_streams:
            return
        if len(_cpu_streams) >= _MAX_REMEMBERED:
            _cpu_streams.clear()
        _cpu_streams[name] = reason
    log.warning("%s; decoding this stream on the CPU", reason)


_PTS_TOLERANCE = 1e-4
"""Seconds within which two time stamps are the same picture."""


class CpuWhenRefused:
    """An NVDEC decoder that hands its stream to the CPU decoder if NVDEC refuses it.

    Not every refusal shows before decoding: ``GetDecoderCaps`` may answer
    nothing, and a profile, level or mid-stream size change is only met by
    NVDEC's parser inside ``Decode``. The stream then goes on on the CPU
    (one notice line, and at every later reconnection or loop pass):

    - before its first picture, from where it was asked to start;
    - a file that declares its duration, after the last picture handed out
      (every frame once, in order);
    - a live stream, by ending this connection as a transient fault, so the
      source reconnects, now to the CPU decoder.
    """

    def __init__(self, nvdec: NvdecDecoder, open_cpu: Callable[[], Decoder], uri: str) -> None:
        self._decoder: Decoder = nvdec
        self._open_cpu = open_cpu
        self._uri = uri
        self._start_seconds: float | None = None
        self._corrupt_before = 0
        self._skipped_before = 0

    @property
    def name(self) -> str:
        return self._decoder.name

    @property
    def info(self) -> StreamInfo:
        return self._decoder.info

    @property
    def demuxer(self) -> Any:
        return self._decoder.demuxer

    @property
    def corrupt_packets(self) -> int:
        return self._corrupt_before + self._decoder.corrupt_packets

    @property
    def packets_skipped(self) -> int:
        return self._skipped_before + self._decoder.packets_skipped

    def seek(self, seconds: float) -> None:
        self._start_seconds = seconds
        self._decoder.seek(seconds)

    def pictures(self) -> Iterator[Picture]:
        from vstream.decoders.nvdec import NvdecUnsupported

        handed_out, last_pts = 0, None
        try:
            for picture in self._decoder.pictures():
                handed_out, last_pts = handed_out + 1, picture.pts_seconds
                yield picture
            return
        except NvdecUnsupported as exc:
            _fall_back(self._uri, str(exc))
            refusal = exc
        resumable = self.info.duration_seconds is not None and last_pts is not None
        if handed_out and not resumable:
            raise SourceUnavailable(f"{refusal}; reconnecting to decode it on the CPU") from refusal
        nvdec, tap = self._decoder, self.demuxer.tap
        self._corrupt_before += nvdec.corrupt_packets
        self._skipped_before += nvdec.packets_skipped
        nvdec.close()
        self._decoder = self._open_cpu()
        self.demuxer.tap = tap
        start = last_pts if handed_out else self._start_seconds
        if start is not None:
            self._decoder.seek(start)
        for picture in self._decoder.pictures():
            pts = picture.pts_seconds
            if last_pts is not None and pts is not None and pts <= last_pts + _PTS_TOLERANCE:
                continue
            yield picture

    def close(self) -> None:
        self._decoder.close()


def open_decoder(
    uri: str,
    *,
    kind: DecoderKind | str = DecoderKind.AUTO,
    device: torch.device,
    pixel_format: PixelFormat | None = None,
    ffmpeg_options: Mapping[str, str] | None = None,
    input_format: str | None = None,
    timeout: tuple[float, float] | None = None,
    stall_seconds: float | None = None,
    cuda_stream: int | None = None,
    threads: int = 0,
    low_delay: bool = False,
    max_behind_seconds: float | None = None,
) -> Decoder:
    """Open ``uri`` with the decoder ``kind`` resolves to on ``device``.

    ``ffmpeg_options``, ``input_format`` and ``timeout`` reach FFmpeg's
    demuxer (PyAV's on the CPU path, PyAV's as well for network input to
    NVDEC, so both honour the same transport options and time limits);
    ``cuda_stream`` is the CUDA stream NVDEC works on, by default torch's
    current stream of the calling thread (the reader's: the pipeline's
    stream); ``threads`` caps the CPU decoder's threads (0: a share of the
    cores among the streams open, see :func:`vstream.cores.auto_decoder_threads`;
    NVDEC needs none); ``low_delay`` (live input) asks either decoder to hand out
    each picture as soon as it is decoded, stamped with the time its packet was read
    and the stream's backlog then (:attr:`Picture.packet`); ``max_behind_seconds``
    (live input) skips packets, counted, when the stream falls that far behind its
    camera (:class:`~vstream.decoders.backlog.CatchUp`).

    When NVDEC is chosen but cannot decode this stream (its codec, bit depth,
    chroma format or size), the stream is decoded on the CPU, with one notice
    line, now and at every later reconnection or loop pass; when that only
    shows once decoding has begun, :class:`CpuWhenRefused` hands it over.
    """
    device = indexed(device)
    demuxing: dict[str, Any] = {
        "device": device,
        "options": ffmpeg_options,
        "input_format": input_format,
        "timeout": timeout,
        "stall_seconds": stall_seconds,
        "max_behind_seconds": max_behind_seconds,
    }

    def open_cpu() -> Decoder:
        from vstream.decoders.cpu import PyAVDecoder

        return PyAVDecoder(
            uri,
            pixel_format=pixel_format or PixelFormat.RGB24,
            threads=threads,
            low_delay=low_delay,
            **demuxing,
        )

    chosen = resolve_decoder(kind, device)
    if chosen is DecoderKind.NVDEC and redact_uri(uri) not in _cpu_streams:
        from vstream.decoders.nvdec import NvdecDecoder, NvdecUnsupported

        try:
            nvdec = NvdecDecoder(
                uri,
                pixel_format=pixel_format or PixelFormat.NV12,
                cuda_stream=cuda_stream,
                low_delay=low_delay,
                **demuxing,
            )
        except NvdecUnsupported as exc:
            _fall_back(uri, str(exc))
        else:
            return CpuWhenRefused(nvdec, open_cpu, uri)
    return open_cpu()


__all__ = [
    "CpuWhenRefused",
    "Decoder",
    "DecoderKind",
    "Picture",
    "StreamInfo",
    "nvdec_available",
    "nvdec_status",
    "open_decoder",
    "resolve_decoder",
]
