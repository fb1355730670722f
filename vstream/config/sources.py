"""Source options: which decoder, how fresh, how to reconnect, which part of a file.

:class:`SourceOptions` is what :func:`vstream.sources.open_source` and the
engine's readers take; :class:`SourceConfig` adds the id and address that a
pipelines file, a ``POST /streams`` body or ``vstream run --source`` give.
"""

from __future__ import annotations

import enum
import os
import stat
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from vstream.assets import bundled, is_bundled
from vstream.config.base import (
    MAX_SECONDS,
    RELATIVE_TO_CONFIG,
    Cli,
    Flag,
    Int,
    Name,
    Number,
    Seconds,
    StrictModel,
    has_control_character,
    resolve_path,
)
from vstream.config.cadence import CadenceOptions
from vstream.frame import PixelFormat
from vstream.uri import NETWORK_SCHEMES, redact, userinfo

MAX_DECODER_THREADS = 64
"""Most FFmpeg threads one stream may ask for; the process-wide total is a deployment limit."""

V4L2_MAJOR = 81
"""Device major number of Video4Linux devices (``/dev/video*``)."""


class DecoderKind(str, enum.Enum):
    """Which decoder turns compressed video into device tensors."""

    AUTO = "auto"
    """NVDEC where CUDA and PyNvVideoCodec work (probed once), else the CPU."""
    CPU = "cpu"
    """PyAV (FFmpeg)."""
    NVDEC = "nvdec"
    """PyNvVideoCodec: decoded straight into CUDA memory."""


class FreshnessPolicy(str, enum.Enum):
    """What a stream's queue does when the pipeline is slower than the stream."""

    LATEST = "latest"
    """Drop the oldest queued frame (counted): results never lag (live default)."""
    BLOCK = "block"
    """Never drop; the reader waits for the pipeline (file default)."""


class ReconnectPolicy(StrictModel):
    """Exponential backoff with jitter for live sources."""

    initial_delay_seconds: Annotated[Seconds(0, 3600), Cli("--reconnect-delay")] = Field(
        0.5, description="first wait after a failure; doubled after each failed attempt"
    )
    max_delay_seconds: Seconds(0, 3600) = Field(30.0, description="longest wait between attempts")
    jitter: Number(0, 1) = Field(
        0.2, description="each wait is multiplied by a random factor in [1 - jitter, 1 + jitter]"
    )
    max_attempts: Annotated[Int(0, 1_000_000) | None, Cli("--reconnect-attempts")] = Field(
        None,
        description="failed reconnections in a row before the stream fails; 0: never "
        "reconnect; null: retry forever",
    )
    watchdog_seconds: Annotated[Seconds(0, 3600), Cli("--watchdog")] = Field(
        10.0, description="reconnect a live stream that gave no frame for this long"
    )
    on_end: Annotated[Flag, Cli("--reconnect-on-end")] = Field(
        True,
        description="reconnect when a live stream ends (cameras); false lets it finish "
        "(a video served over HTTP)",
    )

    @model_validator(mode="after")
    def _delays_ordered(self) -> ReconnectPolicy:
        if self.initial_delay_seconds > self.max_delay_seconds:
            raise ValueError(
                f"initial_delay_seconds ({self.initial_delay_seconds}) must not exceed "
                f"max_delay_seconds ({self.max_delay_seconds})"
            )
        return self


class SourceOptions(CadenceOptions):
    """Everything about reading a source except its address and id (its detection cadence
    included: :mod:`vstream.config.cadence`)."""

    decoder: Annotated[DecoderKind, Cli("--decoder")] = Field(
        DecoderKind.AUTO, description="auto: nvdec where it works for the stream, else cpu"
    )
    decoder_threads: Annotated[Int(0, MAX_DECODER_THREADS), Cli("--decoder-threads")] = Field(
        0,
        description="FFmpeg decoding threads for this stream; 0: half the cores shared among "
        "the streams being decoded when it opens, from 1 to 4",
    )
    pixel_format: Annotated[PixelFormat | None, Cli("--pixel-format")] = Field(
        None, description="what the decoder hands to preprocessing; default: its cheapest"
    )
    policy: Annotated[FreshnessPolicy | None, Cli("--policy")] = Field(
        None,
        description="when detection is slower than the stream: latest drops the oldest queued "
        "frame (live default), block waits (file default)",
    )
    queue_size: Annotated[Int(1, 64), Cli("--queue-size")] = Field(
        2, description="frames queued between the stream's reader and the model"
    )
    max_behind_seconds: Annotated[Seconds(0, 3600) | None, Cli("--max-behind")] = Field(
        2.0,
        description="live, latest policy: when decoding falls this far behind the camera, "
        "skip its packets (counted) to the next key frame read in step again; null: never "
        "skip for a backlog (block, HLS and DASH never do; a connection's packets before its "
        "first key frame are skipped, counted, whatever this is)",
    )
    reconnect: ReconnectPolicy = Field(default_factory=ReconnectPolicy)
    rtsp_transport: Annotated[Literal["tcp", "udp"], Cli("--rtsp-transport")] = Field(
        "tcp", description="tcp: no losses behind NAT and firewalls; udp: lower latency"
    )
    input_format: Annotated[str | None, Field(pattern=r"^[a-z0-9_]{1,32}$")] = Field(
        None, description="FFmpeg input format to force, e.g. v4l2; default: guessed"
    )
    open_timeout_seconds: Annotated[Seconds(0, 600), Cli("--open-timeout")] = Field(
        10.0, description="live: how long to wait for a connection"
    )
    read_timeout_seconds: Annotated[Seconds(0, 600), Cli("--read-timeout")] = Field(
        10.0, description="live: how long one read may wait for data"
    )
    realtime: Annotated[Flag, Cli("--realtime")] = Field(
        False, description="files: replay at the native frame rate"
    )
    loop: Annotated[Flag, Cli("--loop")] = Field(False, description="files: start again at the end")
    start_seconds: Annotated[Number(0, MAX_SECONDS) | None, Cli("--start")] = Field(
        None,
        description="files: start at this time stamp of the file's own clock, the records' "
        "pts (not time from the first frame: MPEG-TS files seldom start at 0)",
    )
    end_seconds: Annotated[Seconds() | None, Cli("--end")] = Field(
        None,
        description="files: stop at this time stamp of the file's own clock, as --start; "
        "live: stop after this many seconds",
    )
    stride: Annotated[Int(1, 10_000), Cli("--stride")] = Field(
        1, description="files: keep every n-th frame"
    )

    @model_validator(mode="after")
    def _range(self) -> SourceOptions:
        if (
            self.start_seconds is not None
            and self.end_seconds is not None
            and self.end_seconds <= self.start_seconds
        ):
            raise ValueError(
                f"end_seconds ({self.end_seconds}) must be after start_seconds "
                f"({self.start_seconds})"
            )
        return self


def check_device(path: str, *, hide_missing: bool = False) -> str:
    """``path`` if it resolves to a real V4L2 capture device, else a ValueError.

    ``hide_missing``: the same message whether or not ``path`` exists (sources
    through the API, which may not learn what lies outside ``allowed_paths``).
    """
    resolved = os.path.realpath(path)
    try:
        info = os.stat(resolved)
    except OSError:
        if hide_missing:
            raise ValueError(f"{path} is not a V4L2 capture device") from None
        raise ValueError(f"no capture device {path}") from None
    if not stat.S_ISCHR(info.st_mode) or os.major(info.st_rdev) != V4L2_MAJOR:
        raise ValueError(f"{path} is not a V4L2 capture device")
    return resolved


def _device_path(path: str) -> str | None:
    """``path`` with its ``..`` resolved if it names something in ``/dev``, else None.

    ``..`` is resolved by the text first (``/dev/../etc/passwd`` is ``/etc/passwd``),
    then the links: a link in ``/dev`` to a file elsewhere (``/dev/fd/3``) names a file,
    which must then lie under ``allowed_paths`` like any other.
    """
    normal = os.path.normpath(path)
    if not normal.startswith("/dev/") or not os.path.realpath(normal).startswith("/dev/"):
        return None
    return normal


def _allowed(path: Path, allowed: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in allowed)


def check_source_uri(uri: str, info: ValidationInfo) -> str:
    """A stream URL with a host, a V4L2 device, or a video file; file paths made absolute.

    With ``allowed_paths`` in the validation context (sources that arrive
    through the HTTP API), a file must resolve (symlinks followed) inside one
    of those directories, and a refusal does not say whether the file (or a
    user's home, ``~name``) exists. A path is a device's only where it lies in
    ``/dev`` once its ``..`` and links are resolved. A path the system cannot
    even look up (a name over 255 bytes) is a ValueError like any other bad
    value. Messages quote the URI without credentials.
    """
    uri = uri.strip()
    if not uri:
        raise ValueError("must not be empty")
    shown = redact(uri)
    if has_control_character(uri):
        # A line break would let a URI forge log lines (and hide a password's tail from masking).
        raise ValueError(f"must not contain control characters, got {shown!r}")
    context = info.context or {}
    allowed = context.get("allowed_paths")
    if is_bundled(uri):
        return str(bundled(uri))
    if "://" in uri:
        scheme = uri.split("://", 1)[0].lower()
        if scheme == "file":
            uri = urlsplit(uri).path
        elif scheme not in NETWORK_SCHEMES:
            raise ValueError(
                f"unsupported scheme {scheme!r} in {shown}; use a file path, vstream://NAME "
                "(a bundled video) or one of " + ", ".join(NETWORK_SCHEMES)
            )
        else:
            credentials = userinfo(uri)
            rest = uri.split("://", 1)[1][len(credentials) + 1 if credentials else 0 :]
            parts = urlsplit(f"{scheme}://{rest}")
            try:
                parts.port  # noqa: B018 - parsing the port validates it
            except ValueError:
                raise ValueError(f"bad port in {shown}") from None
            if not parts.hostname:
                raise ValueError(f"no host in {shown}")
            return uri
    device = _device_path(uri)
    if device is not None:
        return check_device(device, hide_missing=allowed is not None)
    outside = (
        "file sources through the API must lie under server.allowed_paths "
        f"({', '.join(str(p) for p in allowed or ())})"
    )
    try:
        path = resolve_path(uri, info)
    except (OSError, ValueError) as exc:  # a name too long to look up; ~name of no user
        if allowed is not None:
            raise ValueError(outside) from None
        if isinstance(exc, OSError):
            raise ValueError(_unusable(uri, exc)) from None
        raise
    if allowed is not None and not _allowed(path, [Path(p) for p in allowed]):
        raise ValueError(outside)
    try:
        problem = not_a_video_file(path)
    except OSError as exc:
        raise ValueError(_unusable(str(path), exc)) from None
    if problem is not None:
        raise ValueError(problem)
    return str(path)


def not_a_video_file(path: Path) -> str | None:
    """Why ``path`` is no file to read a video from (a folder, or nothing there), else None;
    OSError where the system cannot say (a name too long)."""
    if path.is_dir():
        return f"{path} is a directory, not a video file"
    return None if path.is_file() else f"video file not found: {path}"


def _unusable(path: str, exc: OSError) -> str:
    shown = path if len(path) <= 80 else path[:77] + "..."
    return f"cannot use video file {shown}: {exc.strerror or exc}"


class SourceConfig(SourceOptions):
    """One video source: a file, a camera URL or a capture device."""

    id: Name = Field(description="stream id, used in records, metrics, topics and the API")
    uri: str = Field(
        max_length=4096,
        description=f"file path ({RELATIVE_TO_CONFIG}), vstream://sample.mp4 (the bundled "
        "sample), rtsp://..., /dev/video0",
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str, info: ValidationInfo) -> str:
        return check_source_uri(value, info)

    def options(self) -> SourceOptions:
        """The options without the id and address."""
        return SourceOptions.model_validate(
            {k: getattr(self, k) for k in SourceOptions.model_fields}
        )
