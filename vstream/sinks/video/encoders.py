"""Which encoder an annotated video gets, and the table of how encoders are tuned.

NVENC through PyNvVideoCodec where the GPU has one (probed once by opening a
small encoder session: :func:`vstream.sinks.video.nvenc.nvenc_unavailable`),
otherwise FFmpeg's libx264 through PyAV. Many data-centre GPUs (A100, H100)
have no NVENC, so libx264 is a real path: ``encoder="auto"`` picks NVENC only
for frames on a CUDA device whose probe succeeds, and says which it chose once
in the log.

The choices, presets, bounds and defaults below are the ``video`` sink's
options (:class:`vstream.config.sinks.VideoSinkConfig`), read from there and
written nowhere else, so that a writer made from Python takes exactly the
values a pipelines file may give.
"""

from __future__ import annotations

import logging
import threading
from typing import get_args

import torch

from vstream.config.sinks import VideoEncoder, VideoSinkConfig, X264Preset
from vstream.sinks.video import nvenc
from vstream.sinks.video.container import VideoWriteError

log = logging.getLogger(__name__)

_OPTIONS = VideoSinkConfig.model_fields
DEFAULT_ENCODER: VideoEncoder = _OPTIONS["encoder"].default
DEFAULT_PRESET: str = _OPTIONS["preset"].default
"""libx264 preset: measured by ``benchmarks/annotate.py`` as the speed/size balance for live use."""
DEFAULT_CRF: int = _OPTIONS["crf"].default
DEFAULT_QUEUE_FRAMES: int = _OPTIONS["queue_frames"].default
"""Pictures waiting for the encoder (each ``W * H * 3`` bytes where it was drawn)."""
X264_PRESETS: tuple[str, ...] = get_args(X264Preset)
"""The presets of the ``video`` sink's options (:data:`vstream.config.sinks.X264Preset`)."""


def check_choice(name: str, value: object, choices: tuple[object, ...]) -> None:
    """Refuse ``value`` unless it is one of the option's ``choices`` (read from the config)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_range(name: str, value: int, bounds: tuple[int, int]) -> None:
    """Refuse ``value`` outside the option's ``bounds`` (read from the config)."""
    low, high = bounds
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


_choices_logged: set[tuple[str, str]] = set()
_choices_lock = threading.Lock()


def log_choice_once(choice: str, reason: str) -> None:
    """Say which encoder was chosen and why, once a process however many videos it writes."""
    with _choices_lock:
        if (choice, reason) in _choices_logged:
            return
        _choices_logged.add((choice, reason))
    log.info("annotated video: encoder %s (%s)", choice, reason)


def resolve_encoder(
    encoder: VideoEncoder | str, device: torch.device | str | None = None
) -> tuple[str, str]:
    """``("nvenc" | "cpu", why)`` for the requested ``encoder`` and the frames' ``device``.

    ``nvenc`` on a GPU without NVENC is a :class:`VideoWriteError`; ``auto``
    falls back to the CPU there (and for CPU frames, whatever the machine has).
    """
    check_choice("encoder", encoder, get_args(VideoEncoder))
    if encoder == "cpu":
        return "cpu", "libx264 through PyAV, as configured"
    dev = torch.device(device) if device is not None else torch.device("cpu")
    gpu = (dev.index or 0) if dev.type == "cuda" else 0
    if encoder == "nvenc":
        why_not = nvenc.nvenc_unavailable(gpu)
        if why_not is not None:
            raise VideoWriteError(f"annotated video: the nvenc encoder cannot be used: {why_not}")
        return "nvenc", "NVENC through PyNvVideoCodec, as configured"
    if dev.type != "cuda":
        return "cpu", "libx264 through PyAV: frames are on the CPU"
    why_not = nvenc.nvenc_unavailable(gpu)
    if why_not is not None:
        return "cpu", f"libx264 through PyAV: {why_not}"
    return "nvenc", "NVENC through PyNvVideoCodec"
