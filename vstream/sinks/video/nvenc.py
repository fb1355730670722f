"""NVENC through PyNvVideoCodec: whether the GPU has one, and the backend that uses it.

PyNvVideoCodec being installed is not enough: GPUs such as the A100 and H100
have no NVENC at all, so :func:`nvenc_unavailable` opens (and closes) a small
encoder session, once per GPU. The backend takes NV12 made on the GPU and
hands back an H.264 Annex B bitstream, sometimes a few frames late and several
access units in one piece, which :class:`_AnnexBMuxer` splits and muxes with
the time stamps of the frames given.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
from collections import deque
from pathlib import Path
from typing import Any

import torch

from vstream.errors import describe
from vstream.sinks.video.container import (
    TIME_BASE,
    Backend,
    VideoWriteError,
    frame_rate,
    open_container,
)

NVENC_PRESET = "P4"
"""NVENC's preset, from P1 (fastest) to P7 (slowest, best): the middle one."""


def _import_nvc() -> Any:
    return importlib.import_module("PyNvVideoCodec")


@functools.lru_cache(maxsize=8)
def nvenc_unavailable(gpu: int = 0) -> str | None:
    """Why NVENC cannot encode on CUDA device ``gpu``, or None when it can (probed once).

    The probe opens (and closes) a small H.264 encoder session: PyNvVideoCodec
    being installed is not enough, as GPUs such as the A100 and H100 have no
    NVENC at all.
    """
    if importlib.util.find_spec("PyNvVideoCodec") is None:
        return "PyNvVideoCodec is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        nvc = _import_nvc()
        with torch.cuda.device(gpu):
            encoder = nvc.CreateEncoder(320, 240, "NV12", False, **_gpu_option(gpu), codec="h264")
            encoder.EndEncode()
        del encoder
    except Exception as exc:  # any failure means "no NVENC here"
        return f"this GPU cannot open an NVENC session ({describe(exc)})"
    return None


def _gpu_option(gpu: int) -> dict[str, Any]:
    return {"gpuid": gpu} if gpu else {}


class _AnnexBMuxer:
    """Muxes an H.264 Annex B byte stream (one access unit per input frame, in order).

    NVENC hands back the bitstream, sometimes a few frames late and several
    access units in one piece; FFmpeg's H.264 parser splits it, and each access
    unit takes the time stamp of the oldest frame still waiting (there are no
    B-frames, so output order is input order).
    """

    def __init__(self, path: Path, fmt: str, width: int, height: int, fps: float) -> None:
        import av

        self.container = open_container(path, fmt)
        self.stream = self.container.add_stream("h264", rate=frame_rate(fps))
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv420p"
        self.stream.time_base = TIME_BASE
        self.parser = av.CodecContext.create("h264", "r")
        self.waiting: deque[int] = deque()

    def submitted(self, ticks: int) -> None:
        self.waiting.append(ticks)

    def feed(self, data: bytes | None) -> None:
        for packet in self.parser.parse(data):
            if not self.waiting:
                raise VideoWriteError("the H.264 encoder returned more pictures than it was given")
            ticks = self.waiting.popleft()
            packet.pts = packet.dts = ticks
            packet.time_base = TIME_BASE
            packet.stream = self.stream
            self.container.mux(packet)

    def close(self) -> None:
        self.feed(None)
        self.container.close()


class Nvenc(Backend):
    """NVENC through PyNvVideoCodec (``CreateEncoder`` / ``Encode`` / ``EndEncode``), NV12 input.

    Written against PyNvVideoCodec 2.x's documented API: the NV12 picture is a
    ``(H * 3 / 2, W)`` CUDA ``uint8`` tensor made on the GPU by
    :func:`vstream.annotate.convert.rgb_to_yuv420`; the bitstream is muxed by
    :class:`_AnnexBMuxer`. No B-frames, so packets come out in input order.
    """

    name = "nvenc"

    def __init__(
        self,
        path: Path,
        fmt: str,
        width: int,
        height: int,
        fps: float,
        device: torch.device,
        options: dict[str, Any],
    ) -> None:
        nvc = _import_nvc()
        self.device = device
        gpu = device.index or 0
        bitrate = options.get("bitrate") or max(500_000, round(width * height * fps * 0.1))
        gop = max(1, round(fps * 2))
        settings = {
            "codec": "h264",
            "preset": NVENC_PRESET,
            "tuning_info": "high_quality",
            "rc": "vbr",
            "bitrate": str(int(bitrate)),
            "maxbitrate": str(int(bitrate) * 2),
            "fps": str(max(1, round(fps))),
            "gop": str(gop),
            "idrperiod": str(gop),
            "bf": "0",
            "colorspace": "bt601",
        }
        on_gpu = device.type == "cuda"
        if on_gpu:
            # The writer thread (this backend's only thread) queues its conversions on a
            # stream of its own, non-blocking: waiting for them before Encode then waits for
            # nothing else, where the legacy default stream would wait for every pipeline.
            torch.cuda.set_stream(torch.cuda.Stream(device))
        with torch.cuda.device(gpu) if on_gpu else contextlib.nullcontext():
            self.encoder = nvc.CreateEncoder(
                width, height, "NV12", not on_gpu, **_gpu_option(gpu), **settings
            )
        self.muxer = _AnnexBMuxer(path, fmt, width, height, fps)
        self.container = self.muxer.container

    def encode(self, image: torch.Tensor, ticks: int) -> None:
        from vstream.annotate.convert import rgb_to_yuv420

        image = image.to(self.device)
        nv12 = rgb_to_yuv420(image, interleaved=True)
        if nv12.is_cuda:
            torch.cuda.current_stream(self.device).synchronize()  # the writer's own stream only
        else:
            nv12 = nv12.reshape(-1).numpy()  # host input (usecpuinputbuffer): 1-D bytes
        self.muxer.submitted(ticks)
        self.muxer.feed(bytes(self.encoder.Encode(nv12)))

    def finish(self) -> None:
        self.muxer.feed(bytes(self.encoder.EndEncode()))
        self.muxer.close()
