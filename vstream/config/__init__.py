"""Every option vstream has, as pydantic models, and how pipelines files are read.

- :mod:`~vstream.config.base`: strict, bounded types and the CLI marker;
- :mod:`~vstream.config.sources`: decoder, freshness, reconnection, file playback;
- :mod:`~vstream.config.model`: the model, postprocessing, runtime (device, batching);
- :mod:`~vstream.config.tracking`, :mod:`~vstream.config.analytics`: the tracker, lines, zones;
- :mod:`~vstream.config.sinks`: where records go;
- :mod:`~vstream.config.cluster`: streams placed on the workers of a Ray cluster;
- :mod:`~vstream.config.pipelines`: the whole file (server, limits, logging, cluster, pipelines);
- :mod:`~vstream.config.loading`: YAML with line numbers and ``${ENV}`` interpolation.

Nothing here imports torch, ONNX Runtime or PyAV, nor any part of vstream that reads
the options (only small leaves: uri, frame, errors, lazy), so every part may read them.
"""

from vstream.lazy import lazy_exports

__all__ = [
    "SINK_TYPES",
    "ClipsSinkConfig",
    "ClusterConfig",
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
    "PreviewConfig",
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
    "VideoSinkConfig",
    "VstreamConfig",
    "WebhookSinkConfig",
    "config_schema",
    "load_config",
    "parse_config",
    "parse_data",
    "parse_source",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ConfigError": "vstream.config.loading",
        "ClipsSinkConfig": "vstream.config.sinks",
        "ClusterConfig": "vstream.config.cluster",
        "VideoSinkConfig": "vstream.config.sinks",
        "PreviewConfig": "vstream.config.pipelines",
        "RuntimeOptions": "vstream.config.model",
        "ProviderConfig": "vstream.config.model",
        "PostprocessOptions": "vstream.config.model",
        "ModelConfig": "vstream.config.model",
        "ConfigIssue": "vstream.config.loading",
        "DecoderKind": "vstream.config.sources",
        "FreshnessPolicy": "vstream.config.sources",
        "JsonlSinkConfig": "vstream.config.sinks",
        "LimitsConfig": "vstream.config.pipelines",
        "LoggingConfig": "vstream.config.pipelines",
        "MqttSinkConfig": "vstream.config.sinks",
        "PipelineConfig": "vstream.config.pipelines",
        "ReconnectPolicy": "vstream.config.sources",
        "RedisSinkConfig": "vstream.config.sinks",
        "SINK_TYPES": "vstream.config.sinks",
        "ServerConfig": "vstream.config.pipelines",
        "SinkBase": "vstream.config.sinks",
        "SinkConfig": "vstream.config.sinks",
        "SourceConfig": "vstream.config.sources",
        "SourceOptions": "vstream.config.sources",
        "StdoutSinkConfig": "vstream.config.sinks",
        "VstreamConfig": "vstream.config.pipelines",
        "WebhookSinkConfig": "vstream.config.sinks",
        "config_schema": "vstream.config.loading",
        "load_config": "vstream.config.loading",
        "parse_config": "vstream.config.loading",
        "parse_data": "vstream.config.loading",
        "parse_source": "vstream.config.loading",
    },
)
