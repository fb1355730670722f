"""A pipelines file: the server, the limits, logging, and one or more pipelines.

A pipeline is one model (one :class:`~vstream.detector.Detector`) shared by
its sources, plus the sinks its records go to. ``vstream run --source`` builds
a one-pipeline, one-source document from its flags (:mod:`vstream.cli.options`),
so every entry point runs the same thing.

Relative paths (model files, video files, JSON Lines outputs) are resolved
against the directory of the config file, given as the validation context
``{"base_dir": Path}``; without it, against the working directory.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vstream.assets import is_bundled
from vstream.config.analytics import AnalyticsConfig, LineConfig, ZoneConfig
from vstream.config.base import (
    Cli,
    EmptyIsNone,
    Int,
    Name,
    Number,
    Seconds,
    StrictModel,
    base_dir,
    resolve_path,
)
from vstream.config.cluster import ClusterConfig
from vstream.config.model import (
    ModelConfig,
    PostprocessOptions,
    RuntimeOptions,
    provider_chain,
)
from vstream.config.secondary import MAX_SECONDARY, SecondaryConfig, check_kind, unique_names
from vstream.config.sinks import FRAME_SINK_TYPES, SinkConfig, fill
from vstream.config.sources import SourceConfig
from vstream.cores import PROCESS_FRAMES_PER_SECOND, counted_decoder_threads

CALLER_TAKES_RECORDS = "caller_takes_records"
"""Validation context key: the records go to the caller (:func:`vstream.detect`), so a
pipeline without sinks has somewhere to send them."""


class PipelineConfig(StrictModel):
    """One model shared by its sources, and where the records go."""

    name: Name
    model: ModelConfig
    postprocess: PostprocessOptions = Field(default_factory=PostprocessOptions)
    runtime: RuntimeOptions = Field(default_factory=RuntimeOptions)
    secondary: list[SecondaryConfig] = Field(
        default_factory=list,
        max_length=MAX_SECONDARY,
        description="models that read each detected object's crop (cascades): a label, or an "
        "embedding, per object, in the order given",
    )
    sources: list[SourceConfig] = Field(
        default_factory=list,
        max_length=10_000,
        description="may be empty: streams can be added through the API",
    )
    analytics: AnalyticsConfig = Field(
        default_factory=AnalyticsConfig,
        description="tracking, counting lines and zones; off unless asked for",
    )
    sinks: list[SinkConfig] = Field(
        default_factory=list,
        max_length=32,
        validate_default=True,
        description="where the records go: at least one (vstream.detect() hands them to its "
        "caller, so there they may be left out)",
    )

    @field_validator("sinks")
    @classmethod
    def _unique_sink_names(cls, sinks: list[Any], info: ValidationInfo) -> list[Any]:
        if not sinks and not (info.context or {}).get(CALLER_TAKES_RECORDS):
            raise ValueError(
                "at least one sink is needed, else the records go nowhere: "
                "jsonl, stdout, mqtt, redis, webhook (video and clips beside them)"
            )
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

    @field_validator("secondary")
    @classmethod
    def _unique_secondary_names(cls, secondary: list[SecondaryConfig]) -> list[SecondaryConfig]:
        unique_names(secondary)
        return secondary

    def detector_postprocess(self) -> PostprocessOptions:
        """The postprocessing the detector runs: ``postprocess``, with ``conf`` lowered to what
        the tracker's second stage needs when tracking is on
        (:meth:`~vstream.config.analytics.AnalyticsConfig.candidate_conf`); the records are
        cut back to ``postprocess.conf`` after tracking."""
        conf = self.analytics.candidate_conf(self.postprocess.conf)
        return self.postprocess.model_copy(update={"conf": conf})

    @model_validator(mode="after")
    def _appearance_is_an_embedding(self) -> PipelineConfig:
        tracking = self.analytics.tracking
        wanted = tracking.appearance if tracking is not None else None
        if wanted is None:
            return self
        check_kind(self.secondary, wanted, "embedding", "analytics.tracking.appearance")
        return self

    @model_validator(mode="after")
    def _embeddings_are_used(self) -> PipelineConfig:
        """Refuse an embedding model neither the tracker nor the records take: it would be run
        on every object for nothing. After :meth:`_appearance_is_an_embedding`, whose message
        names what ``tracking.appearance`` should be."""
        tracking = self.analytics.tracking
        appearance = tracking.appearance if tracking is not None else None
        for index, model in enumerate(self.secondary):
            if model.kind == "embedding" and model.name != appearance and not model.keep_embedding:
                raise ValueError(
                    f"secondary[{index}]: secondary {model.name!r} is an embedding read for "
                    "nothing: name it in analytics.tracking.appearance, or set "
                    "keep_embedding: true"
                )
        return self

    @model_validator(mode="after")
    def _attribute_filters_name_classifiers(self) -> PipelineConfig:
        places: list[tuple[str, LineConfig | ZoneConfig]]
        places = [("lines", item) for item in self.analytics.lines]
        places += [("zones", item) for item in self.analytics.zones]
        for section, item in places:
            for name in item.attributes or {}:
                where = f"analytics.{section} {item.name!r}: attribute"
                check_kind(self.secondary, name, "classifier", where)
        return self

    @model_validator(mode="after")
    def _filtered_classes_are_kept(self) -> PipelineConfig:
        """Refuse a line's, a zone's or a secondary model's classes that ``postprocess.classes``
        drops: it would never see them, and count or read nothing of them, silently."""
        kept = self.postprocess.classes
        if kept is None:
            return self
        places: list[tuple[str, list[int] | None]] = [
            (f"analytics.lines[{i}]: line {item.name!r}: classes", item.classes)
            for i, item in enumerate(self.analytics.lines)
        ]
        places += [
            (f"analytics.zones[{i}]: zone {item.name!r}: classes", item.classes)
            for i, item in enumerate(self.analytics.zones)
        ]
        places += [
            (f"secondary[{i}]: secondary {model.name!r}: on.classes", model.on.classes)
            for i, model in enumerate(self.secondary)
        ]
        for where, wanted in places:
            if dropped := [c for c in wanted or () if c not in kept]:
                raise ValueError(
                    f"{where} {dropped} are never detected: postprocess.classes keeps {kept} alone"
                )
        return self

    @model_validator(mode="after")
    def _one_provider_order(self) -> PipelineConfig:
        provider_chain(self.model.providers, self.runtime.provider)
        return self

    @model_validator(mode="after")
    def _one_video_per_stream(self) -> PipelineConfig:
        if len(self.sources) > 1:
            for index, sink in enumerate(self.sinks):
                if sink.type == "video" and "{stream}" not in sink.path:
                    raise ValueError(
                        f"sinks[{index}]: {len(self.sources)} streams cannot share one video; "
                        "put {stream} in its path"
                    )
        return self


_HOST_PATTERN = r"^(\*|[A-Za-z0-9_.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?$"
"""An ``allowed_hosts`` entry: a name, an IPv4 address or a bracketed IPv6 one, maybe a port."""


class PreviewConfig(StrictModel):
    """The dashboard's live previews: produced only while someone watches."""

    max_fps: Number(0, 30, open_low=True) = Field(5.0, description="previews per second, at most")
    max_width: Int(64, 3840) = Field(640, description="widest preview, in pixels")
    quality: Int(10, 95) = Field(75, description="JPEG quality")
    max_viewers: Int(1, 1000) = Field(16, description="concurrent preview connections")
    write_timeout_seconds: Seconds(0, 600) = Field(
        10.0,
        description="a viewer that takes no part of the preview for this long is dropped "
        "(its slot freed): an idle client cannot hold a viewer slot",
    )


class ConnectionsConfig(StrictModel):
    """How many connections the API holds, and how long each may wait on its client.

    Without these, a client could hold a connection (and a file descriptor)
    for as long as it liked, sending nothing or a byte at a time, and enough
    of them would leave the pipelines no descriptor to reopen a file with.
    """

    max_open: Int(4, 65536) = Field(
        256,
        description="connections held at once; past it the longest idle one is closed to make "
        "room, or the new one when all are busy. Lowered at start to half the file descriptors "
        "then free, so that the rest is kept for the pipelines",
    )
    idle_timeout_seconds: Seconds(0, 600) = Field(
        5.0,
        description="a connection with no request under way is closed after this long, new or "
        "kept alive after a response",
    )
    header_timeout_seconds: Seconds(0, 600) = Field(
        10.0,
        description="a request's line and headers must be in within this long of its first byte "
        "(else 408 and the connection is closed)",
    )
    body_timeout_seconds: Seconds(0, 600) = Field(
        30.0,
        description="a request's body must be in within this long of its headers (else 408 and "
        "the connection is closed)",
    )


class ServerConfig(StrictModel):
    """The HTTP API of ``vstream serve``."""

    host: Annotated[str, Cli("--host")] = Field(
        "127.0.0.1",
        max_length=253,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="listen address; 0.0.0.0 exposes the API to the network",
    )
    port: Annotated[Int(0, 65535), Cli("--port")] = Field(
        8080, description="0: any free port (logged at start)"
    )
    token: Annotated[SecretStr | None, EmptyIsNone] = Field(
        None, description="bearer token every request must carry; empty: none"
    )
    max_body_bytes: Int(1024, 16 * 2**20) = Field(
        64 * 1024, description="largest request body, enforced while it is read"
    )
    max_json_depth: Int(2, 256) = Field(32, description="deepest nesting of a JSON body")
    preview: PreviewConfig = Field(default_factory=PreviewConfig)
    connections: ConnectionsConfig = Field(default_factory=ConnectionsConfig)
    allowed_paths: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None,
        max_length=100,
        validate_default=True,
        description="directories a file source added through the API may lie in (symlinks "
        "resolved first); default: the config file's directory and below",
    )
    allowed_hosts: list[Annotated[str, Field(pattern=_HOST_PATTERN)]] = Field(
        default_factory=list,
        max_length=100,
        description="names (host or host:port) a client may reach the API by, in Host and "
        "Origin, besides 127.0.0.1, localhost, [::1] and the address it connected to, each with "
        "the listening port; '*': any (only behind a token)",
    )

    @field_validator("token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        """At least 8 visible ASCII characters: a header carries nothing else as sent. A
        space at either end (a secret file's last newline) is dropped from what a client
        sends, and a letter past ASCII is sent as UTF-8 and read back as Latin-1: either
        token was accepted, then no request matched it. Never quoted in the message."""
        if value is None:
            return value
        text = value.get_secret_value()
        if len(text) < 8:
            raise ValueError("must be at least 8 characters")
        if not all("!" <= char <= "~" for char in text):
            raise ValueError(
                "must be visible ASCII characters only (no space, line break or letter past "
                "ASCII: a client could never send it in a header)"
            )
        return value

    @field_validator("allowed_paths")
    @classmethod
    def _dirs(cls, value: list[str] | None, info: ValidationInfo) -> list[str]:
        # validate_default: the default is filled in here, never left unset (which would
        # check nothing).
        if value is None:
            return [str(base_dir(info).resolve())]
        return [str(resolve_path(p, info)) for p in value]

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [host.lower().rstrip(".") for host in value]

    def exposure_problem(self) -> str | None:
        """Why ``vstream serve`` refuses these settings: beyond loopback, or any host
        allowed, without a token.

        Anyone on the network could then add streams (and read files under
        ``allowed_paths``). Only ``serve`` listens, so the model does not refuse
        it for ``run``; ``validate`` reports the same line.
        """
        from vstream.uri import is_loopback

        if self.token is None and "*" in self.allowed_hosts:
            return (
                "server.allowed_hosts '*' lets any web page's requests in (DNS rebinding), and "
                'no server.token is set: set one (e.g. token: "${VSTREAM_API_TOKEN}") or name '
                "the hosts"
            )
        if self.token is not None or is_loopback(self.host):
            return None
        return (
            f"server.host {self.host} listens beyond loopback, and no server.token is set: set "
            'one (at least 8 characters, e.g. token: "${VSTREAM_API_TOKEN}") or listen on '
            "127.0.0.1"
        )


class LimitsConfig(StrictModel):
    """What one process takes on; past a limit new streams are refused (HTTP 429) with a reason."""

    max_streams: Int(1, 10_000) = Field(64, description="streams in the whole process")
    max_streams_per_pipeline: Int(1, 10_000) = Field(64, description="streams in one pipeline")
    max_decoder_threads: Int(1, 4096) = Field(
        256, description="FFmpeg decoding threads of all streams together"
    )


class LoggingConfig(StrictModel):
    format: Annotated[Literal["text", "json"], Cli("--log-format")] = Field(
        "text", description="one line of text, or one JSON object, per log record"
    )
    level: Annotated[Literal["debug", "info", "warning", "error"], Cli("--log-level")] = Field(
        "info", description="least severe records shown"
    )
    progress_seconds: Seconds(0, 3600, open_low=False) = Field(
        10.0,
        description="vstream run, where stderr is not a terminal: a progress line (frames, fps, "
        "and for files percent and ETA) every this many seconds, the first after as many; "
        "0: none",
    )


MAX_PROCESSES = 64
"""Most worker processes ``processes`` asks for (each holds its own model and CUDA context)."""


def _auto_or_count(value: Any) -> Any:
    """``processes``: auto, or a count (one message for both, rather than one per union arm)."""
    if value == "auto" or (type(value) is int and 1 <= value <= MAX_PROCESSES):
        return value
    raise ValueError(f"must be auto or an integer in [1, {MAX_PROCESSES}], got {value!r}")


class VstreamConfig(StrictModel):
    """A pipelines file: ``vstream run``, ``vstream serve`` and ``vstream validate`` read it."""

    server: ServerConfig = Field(
        default_factory=dict,  # validated (with the file's directory) like a written one
        validate_default=True,
    )
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    cluster: ClusterConfig | None = Field(
        None,
        description="place the streams on the workers of a Ray cluster; default: run every "
        "pipeline in this process",
    )
    processes: Annotated[
        Annotated[int, Field(ge=1, le=MAX_PROCESSES)] | Literal["auto"],
        BeforeValidator(_auto_or_count),
        Cli("--processes", metavar="auto|N"),
    ] = Field(
        1,
        description="worker processes on this machine that share its GPUs, the streams placed "
        "over them (a local Ray instance: pip install 'vstream[ray]'); one Python process tops "
        f"out near 1,000 frames/s on an H100; auto: enough for the sources' frame rates at "
        f"{PROCESS_FRAMES_PER_SECOND:.0f} frames/s each, within the cores, and 1 without Ray, "
        "without a GPU or for what workers do not run; 1: every stream in this process",
    )
    pipelines: list[PipelineConfig] = Field(min_length=1, max_length=64)

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

    @field_validator("pipelines")
    @classmethod
    def _one_writer_a_file(cls, pipelines: list[PipelineConfig]) -> list[PipelineConfig]:
        """Each file written by one sink, and none of them read. Two JSON Lines sinks on one
        file would truncate, cut back and rotate each other's lines; a sink writing a
        stream's video or a model would destroy it before it was read (``vstream run
        --source clip.mp4 -o clip.mp4`` left clip.mp4 empty). Paths are compared resolved,
        links followed, with ``{pipeline}`` filled in."""
        read: dict[str, str] = {}
        for i, pipeline in enumerate(pipelines):
            if not is_bundled(pipeline.model.path):
                read[os.path.realpath(pipeline.model.path)] = f"pipelines[{i}].model"
            for j, source in enumerate(pipeline.sources):
                if "://" not in source.uri and not source.uri.startswith("/dev/"):
                    read[os.path.realpath(source.uri)] = f"pipelines[{i}].sources[{j}]"
        writers: dict[str, str] = {}
        for i, pipeline in enumerate(pipelines):
            for j, sink in enumerate(pipeline.sinks):
                if sink.type != "jsonl" and not (sink.type == "video" and not sink.live):
                    continue
                path = os.path.realpath(fill(sink.path, stream="{stream}", pipeline=pipeline.name))
                here = f"pipelines[{i}].sinks[{j}]"
                if path in read:
                    raise ValueError(
                        f"{here} would write over {read[path]}, {path}, as it reads it"
                    )
                if path in writers:
                    raise ValueError(
                        f"{writers[path]} and {here} both write {path}; give each its own file"
                    )
                writers[path] = here
        return pipelines

    @field_validator("pipelines")
    @classmethod
    def _one_torch_threads(cls, pipelines: list[PipelineConfig]) -> list[PipelineConfig]:
        """``runtime.torch_threads`` is torch's, and torch has one setting per process."""
        values = {p.runtime.torch_threads for p in pipelines}
        if len(values) > 1:
            each = ", ".join(f"{p.name!r} {p.runtime.torch_threads}" for p in pipelines)
            raise ValueError(
                f"runtime.torch_threads is process-wide (torch has one setting), so every "
                f"pipeline must give the same; they give {each}"
            )
        return pipelines

    @model_validator(mode="after")
    def _one_way_to_workers(self) -> VstreamConfig:
        if self.cluster is not None and self.processes != 1:
            raise ValueError(
                f"processes ({self.processes}) and cluster: both place the streams on worker "
                "processes; give one (with cluster:, cluster.workers says how many)"
            )
        return self

    def _workers_setting(self) -> str | None:
        """The setting that puts the streams on workers, as the refusals name it; None: none does.

        ``processes: auto`` is not one: where the workers cannot run the config,
        it means 1 (:func:`vstream.cluster.processes.resolve`).
        """
        if self.cluster is not None:
            return "cluster:"
        if isinstance(self.processes, int) and self.processes > 1:
            return f"processes: {self.processes},"
        return None

    def workers_refusal(self) -> tuple[str, str] | None:
        """What in this config worker processes cannot run, and why; None: they run all of it.

        The same for ``cluster:`` and ``processes``: the workers keep the frames
        and send records only.
        """
        for pipeline in self.pipelines:
            frames = [s.type for s in pipeline.sinks if s.type in FRAME_SINK_TYPES]
            if frames:
                return (
                    f"pipeline {pipeline.name} has a {frames[0]} sink, which needs the frames",
                    "the frames stay on the workers and only records reach the driver's sinks",
                )
            device = pipeline.runtime.device
            if device.startswith("cuda:") and device != "cuda:0":
                return (
                    f"pipeline {pipeline.name} asks for device {device}",
                    "use cuda or auto: each worker sees only the GPUs Ray gives it, from cuda:0",
                )
        return None

    @model_validator(mode="after")
    def _within_limits(self) -> VstreamConfig:
        limits = self.limits
        total = sum(len(p.sources) for p in self.pipelines)
        if total > limits.max_streams:
            raise ValueError(f"{total} sources exceed limits.max_streams ({limits.max_streams})")
        for pipeline in self.pipelines:
            if len(pipeline.sources) > limits.max_streams_per_pipeline:
                raise ValueError(
                    f"pipeline {pipeline.name} has {len(pipeline.sources)} sources, more than "
                    f"limits.max_streams_per_pipeline ({limits.max_streams_per_pipeline})"
                )
        setting = self._workers_setting()
        refused = self.workers_refusal() if setting is not None else None
        if refused is not None:
            fact, why = refused
            raise ValueError(f"{fact}; with {setting} {why}")
        threads = sum(
            counted_decoder_threads(s.decoder_threads) for p in self.pipelines for s in p.sources
        )
        if threads > limits.max_decoder_threads:
            raise ValueError(
                f"the sources ask for {threads} decoder threads, more than "
                f"limits.max_decoder_threads ({limits.max_decoder_threads})"
            )
        return self
