"""How a source is opened: decoder, freshness policy, reconnection, file playback.

These options are the contract between the places that describe sources (the
CLI, YAML pipelines, the HTTP API) and :func:`vstream.sources.open_source`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class FreshnessPolicy(str, enum.Enum):
    """What a source does when the pipeline is slower than the stream."""

    LATEST = "latest"
    """Keep a small queue and drop the oldest frame: results never lag (live default)."""
    BLOCK = "block"
    """Never drop; the reader waits for the pipeline (file default)."""


class DecoderKind(str, enum.Enum):
    AUTO = "auto"
    """NVDEC where CUDA and PyNvVideoCodec are present, else the CPU."""
    CPU = "cpu"
    """PyAV (FFmpeg) with frame threading."""
    NVDEC = "nvdec"
    """PyNvVideoCodec: decoded straight into CUDA memory."""


@dataclass(frozen=True)
class ReconnectPolicy:
    """Exponential backoff with jitter for live sources."""

    initial_delay_seconds: float = 0.5
    max_delay_seconds: float = 30.0
    jitter: float = 0.2
    """Each delay is multiplied by a random factor in [1 - jitter, 1 + jitter]."""
    max_attempts: int | None = None
    """Consecutive failed attempts before the source fails; None retries forever."""
    watchdog_seconds: float = 10.0
    """A live stream with no frame for this long is treated as stalled and reconnected."""


@dataclass(frozen=True)
class SourceOptions:
    """Everything about opening a source except its address and id."""

    decoder: DecoderKind = DecoderKind.AUTO
    policy: FreshnessPolicy | None = None
    """None: ``latest`` for live sources, ``block`` for files."""
    queue_size: int = 2
    """Frames buffered between the reader and the pipeline."""
    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    rtsp_transport: str = "tcp"
    open_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 10.0
    realtime: bool = False
    """Files: replay at the native frame rate instead of as fast as possible."""
    loop: bool = False
    """Files: start again at the end (demos and soak tests)."""
    start_seconds: float | None = None
    end_seconds: float | None = None
    stride: int = 1
    """Files: keep every n-th frame."""
