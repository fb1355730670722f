"""Sink options: where records go, how much is buffered, what happens when a sink is slow."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from vstream.config.base import (
    EmptyIsNone,
    Flag,
    Int,
    Name,
    Seconds,
    StrictModel,
    resolve_path,
)
from vstream.uri import (
    PUBLISH_SCHEMES,
    is_publish_url,
    publish_display,
    redact,
    webhook_display,
)


class RetryConfig(StrictModel):
    """How a sink retries while its destination is unavailable."""

    initial_delay_seconds: Seconds(0, 600) = Field(0.2, description="first wait after a failure")
    max_delay_seconds: Seconds(0, 3600) = Field(10.0, description="longest wait between attempts")
    max_attempts: Int(1, 1_000_000) | None = Field(
        None, description="failed attempts before a batch is dropped; null: until shutdown"
    )


class SinkBase(StrictModel):
    name: Name | None = Field(None, description="label in metrics and logs; default: the type")
    events_only: Flag = Field(False, description="only frames that have detections or events")
    buffer_records: Int(1, 1_000_000) = Field(
        10_000, description="records held while the destination is slow or down"
    )
    batch_records: Int(1, 10_000) = Field(100, description="most records sent at once")
    overflow: Literal["drop_oldest", "block"] = Field(
        "drop_oldest",
        description="when the buffer is full: drop the oldest records (counted), or make the "
        "pipeline wait (nothing lost, but a dead destination stalls detection)",
    )
    retry: RetryConfig = Field(default_factory=RetryConfig)
    flush_timeout_seconds: Seconds(0, 600, open_low=False) = Field(
        10.0, description="at shutdown, how long to keep delivering what is buffered"
    )


MIN_FREE_BYTES = 256 * 1024**2
"""Free space a video file or clips leave on their disk: the records need it more."""


def _min_free_bytes(what: str) -> Any:
    return Field(
        MIN_FREE_BYTES,
        description=f"{what} while the disk has less free than this (counted, logged once); "
        "0: no check",
    )


SPECIAL_ROOTS = ("/proc", "/sys", "/dev")
"""Where files are the kernel's settings and the machine's devices, never records: writing
a record to ``/proc/sys/kernel/hostname`` as root renames the machine."""


def special_place(path: str | Path) -> str | None:
    """Why ``path`` (links resolved) is no place for output: under /proc, /sys or /dev; or None."""
    real = os.path.realpath(path)
    root = next((r for r in SPECIAL_ROOTS if real == r or real.startswith(r + "/")), None)
    return None if root is None else f"{real} is under {root}: no place for output"


def unfit_output(path: str | Path, descriptor: int | None = None) -> str | None:
    """Why records must not be written to the file ``path``, or None.

    Refused: :func:`special_place`, and an existing file that is not a regular
    file (a device or a pipe: opening one may block or have effects). With
    ``descriptor``, the file already opened is checked instead of the name
    (what the name points to may have changed since it was checked).
    """
    real = os.path.realpath(f"/proc/self/fd/{descriptor}" if descriptor is not None else path)
    if real == os.devnull:
        return None  # the one device that is harmless: it discards
    if (why := special_place(real)) is not None:
        return why
    try:
        status = os.fstat(descriptor) if descriptor is not None else os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        return None  # not there: the sink makes it (the caller checks that it can)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return None if stat.S_ISREG(status.st_mode) else f"{real} is not a regular file"


def _writable_directory(directory: Path) -> None:
    """Raise unless a file can really be made in ``directory`` (one is made and removed).

    ``os.access`` is not enough: it says yes to root for ``/proc`` and other
    file systems that refuse new files, which the sink would then find out at
    start, after ``vstream validate`` had passed the file.
    """
    try:
        descriptor, name = tempfile.mkstemp(prefix=".vstream-check-", dir=directory)
    except OSError as exc:
        raise ValueError(f"directory not writable: {directory}: {exc.strerror}") from None
    os.close(descriptor)
    os.unlink(name)


def _creatable(path: Path) -> None:
    """Raise unless the nearest existing ancestor of ``path`` is a writable directory.

    Missing directories are created by the sink when it opens (as ``mkdir -p``).
    """
    existing = next(p for p in path.parents if p.exists())
    if (why := special_place(existing)) is not None:
        raise ValueError(why)
    if not existing.is_dir():
        raise ValueError(f"not a directory: {existing}")
    _writable_directory(existing)


def writable_file(value: str, info: ValidationInfo) -> str:
    """``value`` resolved, if a file can be written there (its directories may be missing).

    An existing file is opened for appending (nothing written); a new one's
    directory is tried with a file of its own: the checks the sink's opening makes.
    """
    path = resolve_path(value, info)
    if path.is_dir():
        raise ValueError(f"{path} is a directory, not a file")
    # Checked before anything is opened: opening a device, a pipe or a kernel setting
    # for writing may block or have effects even if nothing is written.
    if (why := unfit_output(path)) is not None:
        raise ValueError(why)
    if path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        except OSError as exc:
            raise ValueError(f"not writable: {path}: {exc.strerror}") from None
    else:
        _creatable(path)
    return str(path)


class JsonlSinkConfig(SinkBase):
    type: Literal["jsonl"]
    path: str = Field(
        max_length=4096,
        description="JSON Lines file, relative to the config file; {stream} (a file per "
        "stream) and {pipeline} are filled in",
    )
    overflow: Literal["drop_oldest", "block"] = Field(
        "block", description="a local file keeps up: by default nothing is dropped"
    )
    rotate_bytes: Int(1024, 2**40) | None = Field(
        None, description="start a new file past this size"
    )
    rotate_seconds: Seconds(1, 10_000_000) | None = Field(
        None, description="start a new file this often"
    )
    keep: Int(1, 1000) = Field(5, description="rotated files kept as PATH.1 (newest) .. PATH.N")
    append: Flag = Field(
        True,
        description="add to an existing file (a restarted daemon loses nothing); false "
        "replaces it at the first record written (vstream run --output: a run that fails "
        "before one keeps the file as it was)",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        return _stream_path(value, info)


class StdoutSinkConfig(SinkBase):
    type: Literal["stdout"]
    overflow: Literal["drop_oldest", "block"] = Field(
        "block", description="the reader of stdout sets the pace: by default nothing is dropped"
    )


PLACEHOLDERS = ("stream", "pipeline")
"""What a sink's path, URL, topic or key may hold, filled in per record or per stream."""


def fill(template: str, *, stream: str, pipeline: str) -> str:
    """``template`` with ``{stream}`` and ``{pipeline}`` filled in: the one rule for every sink."""
    return template.replace("{stream}", stream).replace("{pipeline}", pipeline)


def _keyed_template(value: str, what: str) -> str:
    unknown = set(re.findall(r"{([^}]*)}", value)) - set(PLACEHOLDERS)
    if unknown:
        raise ValueError(
            f"unknown placeholder {{{sorted(unknown)[0]}}} in the {what}; "
            "use {stream} or {pipeline}"
        )
    return value


def _topic_template(value: str) -> str:
    if not value or any(c in value for c in "+#\0"):
        raise ValueError("must be a non-empty MQTT topic without wildcards (+, #)")
    return _keyed_template(value, "topic")


Host = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9_.:\[\]-]+$")]
Port = Int(1, 65535)


class MqttSinkConfig(SinkBase):
    type: Literal["mqtt"]
    host: Host
    port: Port = 1883
    topic: str = Field(
        "vstream/{stream}", max_length=1024, description="placeholders: {stream}, {pipeline}"
    )
    qos: Literal[0, 1, 2] = 1
    username: Annotated[Annotated[str, Field(max_length=256)] | None, EmptyIsNone] = None
    password: Annotated[SecretStr | None, EmptyIsNone] = None
    client_id: Annotated[Annotated[str, Field(max_length=256)] | None, EmptyIsNone] = None
    keepalive_seconds: Int(5, 3600) = 30
    tls: Flag = False

    _topic = field_validator("topic")(_topic_template)


class RedisSinkConfig(SinkBase):
    type: Literal["redis"]
    url: str = Field(
        "redis://127.0.0.1:6379/0",
        max_length=4096,
        description="redis://[:password@]host:port/db",
    )
    stream: str = Field(
        "vstream:{stream}", max_length=1024, description="stream key; {stream}, {pipeline}"
    )
    maxlen: Int(1, 10**9) | None = Field(
        100_000, description="trim each stream to about this length"
    )
    approximate: Flag = Field(True, description="MAXLEN ~ (cheaper trimming)")
    timeout_seconds: Seconds(0, 300) = Field(
        5.0, description="how long one command may take before the sink retries"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
            raise ValueError(f"must be a redis://, rediss:// or unix:// URL, got {redact(value)}")
        database = parts.path.strip("/") if parts.scheme != "unix" else ""
        if database and not database.isdigit():  # redis-py would write to database 0 instead
            raise ValueError(f"its database must be a number, got {database!r} in {redact(value)}")
        import redis  # here, not at import: only a config with a Redis sink needs it

        try:  # what redis-py cannot use (a port, an option's value) is refused now
            redis.Redis.from_url(value).close()
        except ValueError as exc:
            raise ValueError(f"{str(exc).rstrip('.')} in {redact(value)}") from None
        return value

    @field_validator("stream")
    @classmethod
    def _stream(cls, value: str) -> str:
        if not value:
            raise ValueError("must be a non-empty key; placeholders: {stream}, {pipeline}")
        return _keyed_template(value, "stream key")


class WebhookSinkConfig(SinkBase):
    type: Literal["webhook"]
    url: str = Field(max_length=4096, description="records are POSTed as a JSON array")
    timeout_seconds: Seconds(0, 300) = Field(5.0, description="how long one request may take")
    headers: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,100}$")],
        Annotated[str, Field(max_length=8192)],
    ] = Field(default_factory=dict, max_length=50, description="e.g. Authorization")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// URL, got {webhook_display(value)}")
        return value

    @field_validator("headers")
    @classmethod
    def _header_values(cls, headers: dict[str, str]) -> dict[str, str]:
        """No line breaks or other control characters (a YAML block's or a secret file's
        last newline): HTTP cannot send them, and the value (a token) is never shown."""
        for name, value in headers.items():
            if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
                raise ValueError(
                    f"the value of header {name} holds a line break or another control "
                    "character, which HTTP cannot send (a newline at its end?)"
                )
        return headers


def _stream_path(value: str, info: ValidationInfo) -> str:
    """A path that may hold ``{stream}`` and ``{pipeline}``, checked as :func:`writable_file`."""
    _keyed_template(value, "path")
    path = resolve_path(fill(value, stream="x", pipeline="x"), info)
    writable_file(str(path), info)
    return str(resolve_path(value, info))


def _publish_url(value: str) -> str:
    """An ``rtmp(s)://host[:port]/app/key`` URL that may hold ``{stream}``; the key never shown."""
    _keyed_template(value, "url")
    shown = publish_display(value)
    if any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError(f"{shown}: a publish URL cannot hold spaces or control characters")
    parts = urlsplit(fill(value, stream="x", pipeline="x"))
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise ValueError(f"{shown}: the port must be a number in [1, 65535]") from None
    if not parts.hostname:
        raise ValueError(f"{shown}: a publish URL needs a host")
    if len([segment for segment in parts.path.split("/") if segment]) < 2:
        raise ValueError(
            f"{shown}: a publish URL names an application and a stream key: "
            "rtmp://HOST[:PORT]/APP/KEY"
        )
    return value


VIDEO_CONTAINERS = {
    ".mp4": "mp4",
    ".m4v": "mp4",
    ".mov": "mov",
    ".mkv": "matroska",
    ".ts": "mpegts",
}
"""FFmpeg's muxer for each file extension an annotated video may have."""


def video_container(path: str | Path) -> str:
    """The FFmpeg muxer for the annotated video ``path``, from its extension, or ValueError."""
    suffix = Path(path).suffix.lower()
    if suffix not in VIDEO_CONTAINERS:
        raise ValueError(
            f"{path}: unsupported file extension {suffix or '(none)'!r} for an annotated "
            f"video; use one of {', '.join(sorted(VIDEO_CONTAINERS))}"
        )
    return VIDEO_CONTAINERS[suffix]


def _video_target(value: str, info: ValidationInfo) -> str:
    if is_publish_url(value):
        return _publish_url(value)
    if "://" in value:
        schemes = ", ".join(f"{scheme}://" for scheme in PUBLISH_SCHEMES)
        raise ValueError(
            f"{redact(value.split('://', 1)[0])}:// is not an output; give a file path or {schemes}"
        )
    video_container(value)
    return _stream_path(value, info)


X264Preset = Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium"]
"""The libx264 presets an annotated video may use: the slower ones cannot keep up with a stream."""

VideoEncoder = Literal["auto", "nvenc", "cpu"]
"""Who encodes an annotated video: NVENC where the GPU has it (auto), NVENC, or libx264."""

VideoOverflow = Literal["block", "drop"]
"""What an annotated video does when its encoder falls behind: wait for it, or drop frames."""

CRF_RANGE = (0, 51)
"""libx264's constant rate factor: 0 is lossless, 51 the smallest file."""

QUEUE_FRAMES_RANGE = (1, 256)
"""Pictures an annotated video may hold for its encoder (each ``W * H * 3`` bytes)."""


class VideoSinkConfig(StrictModel):
    """The annotated video of each stream: boxes, labels, tracks, lines, zones and counts."""

    type: Literal["video"]
    name: Name | None = Field(None, description="label in metrics and logs; default: video")
    path: str = Field(
        max_length=4096,
        description="MP4, MOV, MKV or TS file (relative to the config file), or rtmp://HOST"
        "[:PORT]/APP/KEY (or rtmps://) to publish live to a media server; {stream} is "
        "replaced by the stream id (needed with several streams)",
    )
    encoder: VideoEncoder = Field(
        "auto", description="auto: NVENC where the GPU has it, else libx264 through PyAV"
    )
    overflow: VideoOverflow | None = Field(
        None,
        description="when the encoder falls behind: block makes detection wait (every frame "
        "kept; the default for files), drop drops frames of the video (counted; the default "
        "for rtmp:// outputs); detection records are never lost",
    )
    preset: X264Preset = Field("veryfast", description="libx264 speed/size trade-off")
    crf: Int(*CRF_RANGE) = Field(23, description="libx264 quality: lower is better and larger")
    queue_frames: Int(*QUEUE_FRAMES_RANGE) = Field(8, description="frames waiting for the encoder")
    min_free_bytes: Int(0, 2**50) = _min_free_bytes("a video file skips frames")

    _path = field_validator("path")(_video_target)

    @property
    def live(self) -> bool:
        """Whether the video is published to a media server rather than written to a file."""
        return is_publish_url(self.path)

    @property
    def policy(self) -> VideoOverflow:
        """``overflow``, or its default: a file keeps every frame, a live output never waits."""
        return self.overflow or ("drop" if self.live else "block")


ClipEvent = Literal["line_crossing", "zone_enter", "zone_exit", "loitering"]
"""The analytics' events a clip can start on."""


class ClipsSinkConfig(StrictModel):
    """Event clips: the original video around each event, remuxed (no re-encoding), and a JPEG."""

    type: Literal["clips"]
    name: Name | None = Field(None, description="label in metrics and logs; default: clips")
    directory: str = Field(max_length=4096, description="where clips go; relative to the config")
    pre_roll_seconds: Seconds(0, 300, open_low=False) = Field(
        5.0, description="video kept before each event"
    )
    post_roll_seconds: Seconds(0, 300, open_low=False) = Field(
        5.0, description="video after each event (after the last event of a merged clip)"
    )
    merge_seconds: Seconds(0, 300, open_low=False) = Field(
        2.0,
        description="an event this long or less after the previous event of the clip being "
        "recorded joins that clip instead of starting its own; 0: one clip per event",
    )
    events: list[ClipEvent] = Field(
        default_factory=lambda: list[ClipEvent](["line_crossing", "zone_enter", "loitering"]),
        max_length=4,
        description="event types that start a clip",
    )
    classes: list[Int(0, 100_000)] | None = Field(
        None, max_length=1000, description="also start a clip when one of these classes is seen"
    )
    max_count: Int(1, 1_000_000) = Field(200, description="clips kept; the oldest go first")
    max_bytes: Int(1_000_000, 2**44) = Field(
        2 * 1024**3, description="bytes of clips kept; the oldest go first"
    )
    min_free_bytes: Int(0, 2**50) = _min_free_bytes("no clip is written")

    @field_validator("directory")
    @classmethod
    def _directory(cls, value: str, info: ValidationInfo) -> str:
        _keyed_template(value, "directory")
        if "{stream}" in value:
            raise ValueError(
                "one directory holds the clips of every stream of the pipeline (each clip "
                "named by its stream): {stream} cannot be filled in here; {pipeline} can"
            )
        path = resolve_path(fill(value, stream="", pipeline="x"), info)  # a name: one segment
        if (why := special_place(path)) is not None:
            raise ValueError(why)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} is not a directory")
        if path.exists():
            _writable_directory(path)
        else:
            _creatable(path)
        return str(resolve_path(value, info))


SinkConfig = Annotated[
    JsonlSinkConfig
    | StdoutSinkConfig
    | MqttSinkConfig
    | RedisSinkConfig
    | WebhookSinkConfig
    | VideoSinkConfig
    | ClipsSinkConfig,
    Field(discriminator="type"),
]

SINK_TYPES = ("jsonl", "stdout", "mqtt", "redis", "webhook", "video", "clips")
FRAME_SINK_TYPES = ("video", "clips")
"""Sinks that take the frames themselves, not only the records."""
