"""Decoders: compressed video in, device tensors out.

``cpu`` is PyAV (FFmpeg) with frame threading; ``nvdec`` is PyNvVideoCodec,
which decodes straight into CUDA memory; ``auto`` picks ``nvdec`` where CUDA
and PyNvVideoCodec are both present and says so once in the log.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Mapping

import torch

from vstream.config.sources import DecoderKind
from vstream.decoders.base import Decoder, Picture, StreamInfo
from vstream.errors import SourceError
from vstream.frame import PixelFormat

log = logging.getLogger(__name__)


def nvdec_available() -> bool:
    """Whether PyNvVideoCodec is installed and torch sees a CUDA device."""
    return importlib.util.find_spec("PyNvVideoCodec") is not None and torch.cuda.is_available()


@functools.cache
def _auto_choice(device_type: str) -> DecoderKind:
    """The decoder ``auto`` means on this machine for a ``device_type`` pipeline, logged once."""
    if device_type != "cuda":
        log.debug("decoder: cpu (the pipeline runs on %s)", device_type)
        return DecoderKind.CPU
    if nvdec_available():
        log.info("decoder: nvdec (PyNvVideoCodec, frames stay in CUDA memory)")
        return DecoderKind.NVDEC
    log.info("decoder: cpu (PyNvVideoCodec is not installed; frames are copied to the GPU)")
    return DecoderKind.CPU


def resolve_decoder(kind: DecoderKind | str, device: torch.device) -> DecoderKind:
    """The concrete decoder for ``kind`` when frames must end up on ``device``."""
    kind = DecoderKind(kind)
    if kind is DecoderKind.AUTO:
        return _auto_choice(device.type)
    if kind is DecoderKind.NVDEC and device.type != "cuda":
        raise SourceError(
            f"the nvdec decoder needs a CUDA device, but the pipeline runs on {device}"
        )
    return kind


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
) -> Decoder:
    """Open ``uri`` with the decoder ``kind`` resolves to on ``device``.

    ``ffmpeg_options``, ``input_format`` and ``timeout`` reach FFmpeg's
    demuxer (PyAV's on the CPU path, PyAV's as well for network input to
    NVDEC, so both honour the same transport options and time limits);
    ``cuda_stream`` is the CUDA stream NVDEC works on, by default torch's
    current stream of the calling thread; ``threads`` caps the CPU decoder's
    threads (0: FFmpeg's choice; NVDEC needs none); ``low_delay`` asks the
    CPU decoder to hand out each picture as soon as it is decoded (live input).
    """
    chosen = resolve_decoder(kind, device)
    if chosen is DecoderKind.NVDEC:
        from vstream.decoders.nvdec import NvdecDecoder

        return NvdecDecoder(
            uri,
            device=device,
            pixel_format=pixel_format or PixelFormat.NV12,
            options=ffmpeg_options,
            input_format=input_format,
            timeout=timeout,
            stall_seconds=stall_seconds,
            cuda_stream=cuda_stream,
        )
    from vstream.decoders.cpu import PyAVDecoder

    return PyAVDecoder(
        uri,
        device=device,
        pixel_format=pixel_format or PixelFormat.RGB24,
        options=ffmpeg_options,
        input_format=input_format,
        timeout=timeout,
        stall_seconds=stall_seconds,
        threads=threads,
        low_delay=low_delay,
    )


__all__ = [
    "Decoder",
    "DecoderKind",
    "Picture",
    "StreamInfo",
    "nvdec_available",
    "open_decoder",
    "resolve_decoder",
]
