"""Every option vstream has, as pydantic models, and how pipelines files are read.

- :mod:`~vstream.config.base`: strict, bounded types and the CLI marker;
- :mod:`~vstream.config.sources`: decoder, freshness, reconnection, file playback;
- :mod:`~vstream.config.model`: the model, postprocessing, runtime (device, batching);
- :mod:`~vstream.config.sinks`: where records go;
- :mod:`~vstream.config.pipelines`: the whole file (server, limits, logging, pipelines);
- :mod:`~vstream.config.loading`: YAML with line numbers and ``${ENV}`` interpolation.

Nothing here imports torch, ONNX Runtime or PyAV.
"""

from vstream.config.loading import (
    ConfigError,
    ConfigIssue,
    config_schema,
    load_config,
    parse_config,
    parse_data,
    parse_source,
)
from vstream.config.model import ModelConfig, PostprocessOptions, ProviderConfig, RuntimeOptions
from vstream.config.pipelines import (
    LimitsConfig,
    LoggingConfig,
    PipelineConfig,
    ServerConfig,
    VstreamConfig,
)
from vstream.config.sinks import (
    SINK_TYPES,
    JsonlSinkConfig,
    MqttSinkConfig,
    RedisSinkConfig,
    SinkBase,
    SinkConfig,
    StdoutSinkConfig,
    WebhookSinkConfig,
)
from vstream.config.sources import (
    DecoderKind,
    FreshnessPolicy,
    ReconnectPolicy,
    SourceConfig,
    SourceOptions,
)

__all__ = [
    "SINK_TYPES",
    "ConfigError",
    "ConfigIssue",
    "DecoderKind",
    "FreshnessPolicy",
    "JsonlSinkConfig",
    "LimitsConfig",
    "LoggingConfig",
    "ModelConfig",
    "MqttSinkConfig",
    "PipelineConfig",
    "PostprocessOptions",
    "ProviderConfig",
    "ReconnectPolicy",
    "RedisSinkConfig",
    "RuntimeOptions",
    "ServerConfig",
    "SinkBase",
    "SinkConfig",
    "SourceConfig",
    "SourceOptions",
    "StdoutSinkConfig",
    "VstreamConfig",
    "WebhookSinkConfig",
    "config_schema",
    "load_config",
    "parse_config",
    "parse_data",
    "parse_source",
]
