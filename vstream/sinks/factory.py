"""Sinks from their config: a transport behind a :class:`BufferedSink`."""

from __future__ import annotations

from pathlib import Path

from vstream.config.sinks import (
    JsonlSinkConfig,
    MqttSinkConfig,
    RedisSinkConfig,
    SinkBase,
    StdoutSinkConfig,
    WebhookSinkConfig,
    fill,
)
from vstream.errors import VstreamError
from vstream.sinks.base import Transport
from vstream.sinks.buffered import BufferedSink, RetryPolicy
from vstream.sinks.jsonl import JsonLinesPerStream, JsonLinesSink


def build_transport(config: SinkBase, pipeline: str) -> Transport:
    """The transport a sink config describes; client libraries are imported only when used."""
    if isinstance(config, JsonlSinkConfig):
        options = {
            "append": config.append,
            "rotate_bytes": config.rotate_bytes,
            "rotate_seconds": config.rotate_seconds,
            "keep": config.keep,
        }
        if "{stream}" in config.path:
            return JsonLinesPerStream(config.path, pipeline, **options)
        return JsonLinesSink(Path(fill(config.path, stream="", pipeline=pipeline)), **options)
    if isinstance(config, StdoutSinkConfig):
        return JsonLinesSink(None)
    if isinstance(config, MqttSinkConfig):
        from vstream.sinks.mqtt import MqttTransport

        return MqttTransport(
            host=config.host,
            port=config.port,
            topic=config.topic,
            qos=config.qos,
            pipeline=pipeline,
            username=config.username,
            password=config.password.get_secret_value() if config.password else None,
            client_id=config.client_id,
            keepalive_seconds=config.keepalive_seconds,
            tls=config.tls,
            max_queued=config.buffer_records,
        )
    if isinstance(config, RedisSinkConfig):
        from vstream.sinks.redis_streams import RedisStreamTransport

        return RedisStreamTransport(
            url=config.url,
            key=config.stream,
            maxlen=config.maxlen,
            approximate=config.approximate,
            pipeline=pipeline,
            timeout=config.timeout_seconds,
        )
    if isinstance(config, WebhookSinkConfig):
        from vstream.sinks.webhook import WebhookTransport

        return WebhookTransport(
            url=config.url, timeout=config.timeout_seconds, headers=config.headers
        )
    raise VstreamError(f"unsupported sink type {type(config).__name__}")


def build_sink(config: SinkBase, pipeline: str) -> BufferedSink:
    """A running sink for ``config`` in ``pipeline``."""
    return BufferedSink(
        build_transport(config, pipeline),
        name=config.name or getattr(config, "type", "sink"),
        pipeline=pipeline,
        events_only=config.events_only,
        capacity=config.buffer_records,
        batch_records=config.batch_records,
        overflow=config.overflow,
        retry=RetryPolicy(
            initial_delay_seconds=config.retry.initial_delay_seconds,
            max_delay_seconds=config.retry.max_delay_seconds,
            max_attempts=config.retry.max_attempts,
        ),
        flush_timeout=config.flush_timeout_seconds,
    )
