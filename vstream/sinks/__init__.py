"""Sinks: where frame records go.

Every sink is a *transport* (a file, stdout, MQTT, Redis Streams, a webhook)
run behind a :class:`BufferedSink`, off the pipeline's threads. The client
libraries load only when their sink is used.
"""

from vstream.lazy import lazy_exports

__all__ = [
    "BufferedSink",
    "DeliveryError",
    "JsonLinesSink",
    "Record",
    "RetryPolicy",
    "SinkStats",
    "Transport",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BufferedSink": "vstream.sinks.buffered",
        "RetryPolicy": "vstream.sinks.buffered",
        "SinkStats": "vstream.sinks.buffered",
        "DeliveryError": "vstream.sinks.base",
        "Record": "vstream.sinks.base",
        "Transport": "vstream.sinks.base",
        "JsonLinesSink": "vstream.sinks.jsonl",
    },
)
