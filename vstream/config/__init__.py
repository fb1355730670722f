"""Pipelines files: what ``vstream run CONFIG``, ``serve`` and ``validate`` read."""

from vstream.config.loading import (
    ConfigError,
    ConfigIssue,
    config_schema,
    load_config,
    parse_config,
    parse_source,
)
from vstream.config.models import (
    JsonlSinkConfig,
    ModelConfig,
    MqttSinkConfig,
    PipelineConfig,
    RedisSinkConfig,
    SinkBase,
    SinkConfig,
    SourceConfig,
    StdoutSinkConfig,
    VstreamConfig,
    WebhookSinkConfig,
)

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "JsonlSinkConfig",
    "ModelConfig",
    "MqttSinkConfig",
    "PipelineConfig",
    "RedisSinkConfig",
    "SinkBase",
    "SinkConfig",
    "SourceConfig",
    "StdoutSinkConfig",
    "VstreamConfig",
    "WebhookSinkConfig",
    "config_schema",
    "load_config",
    "parse_config",
    "parse_source",
]
