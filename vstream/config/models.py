"""The shape of a pipelines file, as pydantic models.

One file describes the whole daemon: the HTTP server, logging, and one or
more pipelines. A pipeline is one model (one :class:`~vstream.pipeline.Detector`)
shared by its sources, plus the sinks its records go to. The same
:class:`SourceConfig` validates sources from the file and from ``POST /streams``.

Relative paths (model files, video files, JSON Lines outputs) are resolved
against the directory of the config file, given as the validation context
``{"base_dir": Path}``; without it, against the working directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vstream.frame import PixelFormat
from vstream.inference import ProviderChoice
from vstream.postprocess import OutputFormat
from vstream.sources.options import DecoderKind, FreshnessPolicy, ReconnectPolicy, SourceOptions
from vstream.uri import redact_uri

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""Stream, pipeline and sink names: safe in metric labels, topics and URLs, never a URI."""

Name = Annotated[str, Field(pattern=NAME_PATTERN)]

NETWORK_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt")


class StrictModel(BaseModel):
    """Unknown keys are errors: a misspelt option must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


def _empty_as_none(value: Any) -> Any:
    """``""`` means unset, so ``${VAR:-}`` can leave an optional setting out."""
    return None if value == "" else value


EmptyIsNone = BeforeValidator(_empty_as_none)


def base_dir(info: ValidationInfo) -> Path:
    """The directory relative paths are resolved against (see the module docstring)."""
    context = info.context or {}
    return Path(context.get("base_dir") or Path.cwd())


def resolve_path(value: str, info: ValidationInfo) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base_dir(info) / path).resolve()


def _existing_file(value: str, info: ValidationInfo, what: str) -> str:
    path = resolve_path(value, info)
    if not path.is_file():
        raise ValueError(f"{what} not found: {path}")
    return str(path)


def shown_uri(uri: str) -> str:
    """``uri`` fit to quote in a message: without credentials, even in a malformed URL."""
    shown = redact_uri(uri)
    scheme, sep, rest = shown.partition("://")
    if sep and "@" in rest:
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return shown


def check_source_uri(uri: str, info: ValidationInfo) -> str:
    """A camera/stream URL with a host, a capture device, or an existing video file.

    Returns the URI with file paths made absolute. Messages quote the URI
    without credentials.
    """
    uri = uri.strip()
    if not uri:
        raise ValueError("must not be empty")
    shown = shown_uri(uri)
    if "://" in uri:
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        if scheme == "file":
            return _existing_file(parts.path, info, "video file")
        if scheme not in NETWORK_SCHEMES:
            raise ValueError(
                f"unsupported scheme {scheme!r} in {shown}; use a file path or one of "
                + ", ".join(NETWORK_SCHEMES)
            )
        try:
            parts.port  # noqa: B018 - parsing the port validates it
        except ValueError:
            raise ValueError(f"bad port in {shown}") from None
        if not parts.hostname:
            raise ValueError(f"no host in {shown}")
        return uri
    if uri.startswith("/dev/video"):
        return uri
    return _existing_file(uri, info, "video file")


class ReconnectConfig(StrictModel):
    """Exponential backoff with jitter for live sources (see ReconnectPolicy)."""

    initial_delay_seconds: float = Field(0.5, gt=0)
    max_delay_seconds: float = Field(30.0, gt=0)
    jitter: float = Field(0.2, ge=0, le=1)
    max_attempts: int | None = Field(None, ge=1, description="null: retry forever")
    watchdog_seconds: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _delays_ordered(self) -> ReconnectConfig:
        if self.initial_delay_seconds > self.max_delay_seconds:
            raise ValueError("initial_delay_seconds must not exceed max_delay_seconds")
        return self

    def to_policy(self) -> ReconnectPolicy:
        return ReconnectPolicy(**self.model_dump())


class SourceConfig(StrictModel):
    """One video source: a file, a camera URL or a capture device."""

    id: Name = Field(description="stream id, used in records, metrics, topics and the API")
    uri: str = Field(description="file path (relative to the config file), rtsp://..., /dev/video0")
    decoder: DecoderKind = DecoderKind.AUTO
    decoder_threads: int = Field(
        0, ge=0, description="CPU decoder threads; 0: FFmpeg's choice (about one per core)"
    )
    pixel_format: PixelFormat | None = Field(
        None, description="what the decoder hands over; default: its cheapest"
    )
    policy: FreshnessPolicy | None = Field(
        None, description="latest (drop old frames) or block; default: latest live, block files"
    )
    queue_size: int = Field(2, ge=1, le=1000)
    reconnect: ReconnectConfig = Field(default_factory=ReconnectConfig)
    rtsp_transport: Literal["tcp", "udp"] = "tcp"
    open_timeout_seconds: float = Field(10.0, gt=0)
    read_timeout_seconds: float = Field(10.0, gt=0)
    realtime: bool = Field(False, description="files: replay at the native frame rate")
    loop: bool = Field(False, description="files: start again at the end")
    start_seconds: float | None = Field(None, ge=0)
    end_seconds: float | None = Field(None, gt=0)
    stride: int = Field(1, ge=1, description="files: keep every n-th frame")

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str, info: ValidationInfo) -> str:
        return check_source_uri(value, info)

    @model_validator(mode="after")
    def _range(self) -> SourceConfig:
        if (
            self.start_seconds is not None
            and self.end_seconds is not None
            and self.end_seconds <= self.start_seconds
        ):
            raise ValueError("end_seconds must be after start_seconds")
        return self

    def to_options(self) -> SourceOptions:
        """The options :func:`vstream.sources.open_source` takes."""
        return SourceOptions(
            decoder=self.decoder,
            decoder_threads=self.decoder_threads,
            pixel_format=self.pixel_format,
            policy=self.policy,
            queue_size=self.queue_size,
            reconnect=self.reconnect.to_policy(),
            rtsp_transport=self.rtsp_transport,
            open_timeout_seconds=self.open_timeout_seconds,
            read_timeout_seconds=self.read_timeout_seconds,
            realtime=self.realtime,
            loop=self.loop,
            start_seconds=self.start_seconds,
            end_seconds=self.end_seconds,
            stride=self.stride,
        )


def _image_size(value: Any) -> Any:
    """``640`` or ``[height, width]``: one clear message instead of one per union branch."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, list | tuple) and len(value) == 2:
        return tuple(value)
    raise ValueError(f"must be an integer or [height, width], got {value!r}")


ImageSize = Annotated[
    int | tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None,
    BeforeValidator(_image_size),
]


def _class_names(value: Any) -> Any:
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    raise ValueError(f"must be a list of names or a mapping of class id to name, got {value!r}")


class ProviderConfig(StrictModel):
    """An ONNX Runtime execution provider and its options (strings, as ORT takes them)."""

    name: Literal["tensorrt", "cuda", "cpu"]
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)

    def to_choice(self) -> ProviderChoice:
        return ProviderChoice(self.name, {k: str(v) for k, v in self.options.items()})


class ModelConfig(StrictModel):
    """The ONNX detector shared by a pipeline's sources."""

    path: str = Field(description="ONNX file, relative to the config file")
    imgsz: ImageSize = Field(None, description="input size for dynamic models: 640 or [h, w]")
    dtype: Literal["auto", "float32", "float16"] = Field(
        "auto", description="expected input type; the model's own is used, a mismatch is an error"
    )
    format: OutputFormat | None = Field(None, description="default: detected from the output")
    class_names: Annotated[
        list[str] | dict[Annotated[str, Field(pattern=r"^\d+$")], str] | None,
        BeforeValidator(_class_names),
    ] = Field(None, description="default: the model's metadata")
    providers: list[ProviderConfig] | None = Field(None, description="in order of preference")
    intra_op_threads: int = Field(0, ge=0, description="0: ONNX Runtime's default")
    spin_wait: bool = Field(
        False,
        description="let ONNX Runtime's threads spin between parallel sections: faster when "
        "the model has the CPU to itself, slower when decoding shares its cores",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        return _existing_file(value, info, "model file")


class PostprocessSettings(StrictModel):
    conf: float = Field(0.25, ge=0, le=1)
    iou: float = Field(0.45, ge=0, le=1)
    classes: list[Annotated[int, Field(ge=0)]] | None = None
    max_det: int = Field(300, ge=1)


class RuntimeSettings(StrictModel):
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda|cuda:\d+)$")
    batch_size: int | None = Field(None, ge=1, description="frames per inference; default 1")
    batch_timeout_seconds: float = Field(
        0.04,
        ge=0,
        le=10,
        description="how long a partly filled batch waits for frames of other streams",
    )
    torch_threads: int = Field(
        1, ge=1, description="torch threads of the preprocessing and postprocessing stages"
    )


class RetryConfig(StrictModel):
    """How a sink retries when its destination is unavailable."""

    initial_delay_seconds: float = Field(0.2, gt=0)
    max_delay_seconds: float = Field(10.0, gt=0)
    max_attempts: int | None = Field(
        None, ge=1, description="failed attempts before a batch is dropped; null: forever"
    )


class SinkBase(StrictModel):
    name: Name | None = Field(None, description="label in metrics; default: the sink type")
    events_only: bool = Field(False, description="only frames with detections")
    buffer_records: int = Field(10000, ge=1, description="records held while the sink is slow")
    batch_records: int = Field(100, ge=1, description="most records sent at once")
    retry: RetryConfig = Field(default_factory=RetryConfig)
    flush_timeout_seconds: float = Field(
        10.0, ge=0, description="at shutdown, how long to keep delivering what is buffered"
    )


class JsonlSinkConfig(SinkBase):
    type: Literal["jsonl"]
    path: str = Field(description="JSON Lines file, relative to the config file")
    rotate_bytes: int | None = Field(None, ge=1, description="start a new file past this size")
    rotate_seconds: float | None = Field(None, gt=0, description="start a new file this often")
    keep: int = Field(5, ge=1, description="rotated files kept as PATH.1 (newest) .. PATH.N")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        path = resolve_path(value, info)
        if not path.parent.is_dir():
            raise ValueError(f"directory not found: {path.parent}")
        return str(path)


class StdoutSinkConfig(SinkBase):
    type: Literal["stdout"]


def _topic_template(value: str) -> str:
    if not value or any(c in value for c in "+#\0"):
        raise ValueError("must be a non-empty MQTT topic without wildcards (+, #)")
    unknown = set(re.findall(r"{([^}]*)}", value)) - {"stream", "pipeline"}
    if unknown:
        raise ValueError(
            f"unknown placeholder {{{sorted(unknown)[0]}}}; use {{stream}} or {{pipeline}}"
        )
    return value


class MqttSinkConfig(SinkBase):
    type: Literal["mqtt"]
    host: str = Field(min_length=1)
    port: int = Field(1883, ge=1, le=65535)
    topic: str = Field("vstream/{stream}", description="placeholders: {stream}, {pipeline}")
    qos: Literal[0, 1, 2] = 1
    username: Annotated[str | None, EmptyIsNone] = None
    password: Annotated[SecretStr | None, EmptyIsNone] = None
    client_id: Annotated[str | None, EmptyIsNone] = None
    keepalive_seconds: int = Field(30, ge=5)
    tls: bool = False

    _topic = field_validator("topic")(_topic_template)


class RedisSinkConfig(SinkBase):
    type: Literal["redis"]
    url: str = Field("redis://127.0.0.1:6379/0", description="redis://[:password@]host:port/db")
    stream: str = Field("vstream:{stream}", description="stream key; {stream}, {pipeline}")
    maxlen: int | None = Field(100000, ge=1, description="trim each stream to about this length")
    approximate: bool = Field(True, description="MAXLEN ~ (cheaper trimming)")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
            raise ValueError(
                f"must be a redis://, rediss:// or unix:// URL, got {shown_uri(value)}"
            )
        return value

    @field_validator("stream")
    @classmethod
    def _stream(cls, value: str) -> str:
        unknown = set(re.findall(r"{([^}]*)}", value)) - {"stream", "pipeline"}
        if not value or unknown:
            raise ValueError("must be a non-empty key; placeholders: {stream}, {pipeline}")
        return value


class WebhookSinkConfig(SinkBase):
    type: Literal["webhook"]
    url: str = Field(description="records are POSTed as a JSON array")
    timeout_seconds: float = Field(5.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict, description="e.g. Authorization")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// URL, got {shown_uri(value)}")
        return value


SinkConfig = Annotated[
    JsonlSinkConfig | StdoutSinkConfig | MqttSinkConfig | RedisSinkConfig | WebhookSinkConfig,
    Field(discriminator="type"),
]

SINK_TYPES = ("jsonl", "stdout", "mqtt", "redis", "webhook")


class PipelineConfig(StrictModel):
    """One model shared by its sources, and where the records go."""

    name: Name
    model: ModelConfig
    postprocess: PostprocessSettings = Field(default_factory=PostprocessSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    sources: list[SourceConfig] = Field(
        default_factory=list, description="may be empty: streams can be added through the API"
    )
    sinks: list[SinkConfig] = Field(min_length=1)

    @field_validator("sinks")
    @classmethod
    def _unique_sink_names(cls, sinks: list[Any]) -> list[Any]:
        seen: dict[str, int] = {}
        for index, sink in enumerate(sinks):
            name = sink.name or sink.type
            if name in seen:
                raise ValueError(
                    f"sinks[{seen[name]}] and sinks[{index}] are both named {name!r}; "
                    "give each a distinct name"
                )
            seen[name] = index
        return sinks

    def detector_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`vstream.pipeline.Detector`."""
        model, post = self.model, self.postprocess
        names = model.class_names
        return {
            "model": model.path,
            "device": self.runtime.device,
            "imgsz": model.imgsz,
            "conf": post.conf,
            "iou": post.iou,
            "classes": post.classes,
            "max_det": post.max_det,
            "batch_size": self.runtime.batch_size,
            "output_format": model.format,
            "class_names": {int(k): v for k, v in names.items()}
            if isinstance(names, dict)
            else names,
            "providers": [p.to_choice() for p in model.providers] if model.providers else None,
            "intra_op_threads": model.intra_op_threads,
            "spin_wait": model.spin_wait,
        }


class ServerConfig(StrictModel):
    host: str = Field("127.0.0.1", description="listen address; 0.0.0.0 exposes the API")
    port: int = Field(8080, ge=0, le=65535, description="0: any free port (logged at start)")
    token: Annotated[SecretStr | None, EmptyIsNone] = Field(
        None, description="bearer token every request must carry; empty: none"
    )

    @field_validator("token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 8:
            raise ValueError("must be at least 8 characters")
        return value


class LoggingConfig(StrictModel):
    format: Literal["text", "json"] = "text"
    level: Literal["debug", "info", "warning", "error"] = "info"


class VstreamConfig(StrictModel):
    """A pipelines file: ``vstream run``, ``vstream serve`` and ``vstream validate`` read it."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    pipelines: list[PipelineConfig] = Field(min_length=1)

    @field_validator("pipelines")
    @classmethod
    def _unique_names(cls, pipelines: list[PipelineConfig]) -> list[PipelineConfig]:
        names: dict[str, int] = {}
        streams: dict[str, str] = {}
        for i, pipeline in enumerate(pipelines):
            if pipeline.name in names:
                raise ValueError(
                    f"pipelines[{names[pipeline.name]}] and pipelines[{i}] are both named "
                    f"{pipeline.name!r}"
                )
            names[pipeline.name] = i
            for j, source in enumerate(pipeline.sources):
                here = f"pipelines[{i}].sources[{j}]"
                if source.id in streams:
                    raise ValueError(
                        f"{streams[source.id]} and {here} both have id {source.id!r}; "
                        "stream ids must be unique"
                    )
                streams[source.id] = here
        return pipelines
