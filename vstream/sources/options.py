"""How a source is opened: decoder, freshness policy, reconnection, file playback.

These options are the contract between the places that describe sources (the
CLI, YAML pipelines, the HTTP API) and :func:`vstream.sources.open_source`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from vstream.decoders.base import DecoderKind
from vstream.frame import PixelFormat


class FreshnessPolicy(str, enum.Enum):
    """What a source does when the pipeline is slower than the stream."""

    LATEST = "latest"
    """Keep a small queue and drop the oldest frame: results never lag (live default)."""
    BLOCK = "block"
    """Never drop; the reader waits for the pipeline (file default)."""


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
    on_end: bool = True
    """Reconnect when a live stream ends (cameras); False lets it finish (a video over HTTP)."""


@dataclass(frozen=True)
class SourceOptions:
    """Everything about opening a source except its address and id."""

    decoder: DecoderKind = DecoderKind.AUTO
    decoder_threads: int = 0
    """CPU decoder threads per stream; 0: FFmpeg's choice (about one per core)."""
    pixel_format: PixelFormat | None = None
    """What the decoder hands over; None: its cheapest (``rgb24`` on the CPU, ``nv12`` on NVDEC)."""
    policy: FreshnessPolicy | None = None
    """None: ``latest`` for live sources, ``block`` for files."""
    queue_size: int = 2
    """Frames buffered between the reader and the pipeline."""
    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    rtsp_transport: str = "tcp"
    """``tcp`` (default: no losses behind NAT and firewalls) or ``udp`` (lower latency)."""
    input_format: str | None = None
    """FFmpeg input format to force, e.g. ``v4l2``; None: guessed (``v4l2`` for /dev/video*)."""
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
