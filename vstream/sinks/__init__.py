"""Sinks: where frame records go.

:class:`JsonLinesSink` writes synchronously (``vstream run``); the daemon runs
every sink as a transport behind a :class:`BufferedSink`, off the inference
thread. The MQTT, Redis and webhook transports live in their own modules
(``vstream.sinks.mqtt``, ``.redis_streams``, ``.webhook``) so that their client
libraries load only when used.
"""

from vstream.sinks.base import DeliveryError, Record, Transport
from vstream.sinks.buffered import BufferedSink, RetryPolicy, SinkStats
from vstream.sinks.jsonl import JsonLinesSink

__all__ = [
    "BufferedSink",
    "DeliveryError",
    "JsonLinesSink",
    "Record",
    "RetryPolicy",
    "SinkStats",
    "Transport",
]
