"""Redis Streams output (redis-py): ``XADD`` per frame record, trimmed with ``MAXLEN``."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from vstream.sinks.base import DeliveryError, Record, stream_key
from vstream.uri import redact_uri


class RedisStreamTransport:
    """Appends each record to a Redis stream (one key per video stream).

    Entries carry ``stream``, ``frame`` and ``record`` (the whole JSON record).
    A batch is sent as one MULTI/EXEC transaction, so after a failure it was
    either written whole or not at all and can be sent again without
    duplicates. redis-py's own retries are off: the buffered sink retries.
    """

    def __init__(
        self,
        *,
        url: str,
        key: str = "vstream:{stream}",
        maxlen: int | None = 100000,
        approximate: bool = True,
        pipeline: str = "",
        timeout: float = 5.0,
    ) -> None:
        self.key, self.maxlen, self.approximate, self.pipeline = key, maxlen, approximate, pipeline
        self.address = f"redis {redact_uri(url)}"
        self.client = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def send(self, records: Sequence[Record]) -> None:
        batch = self.client.pipeline(transaction=True)
        for record in records:
            fields = {
                "stream": str(record.get("stream", "")),
                "frame": str(record.get("frame", "")),
                "record": json.dumps(record, separators=(",", ":")),
            }
            batch.xadd(
                stream_key(self.key, record, self.pipeline),
                fields,
                maxlen=self.maxlen,
                approximate=self.approximate,
            )
        try:
            batch.execute()
        except redis.RedisError as exc:
            raise DeliveryError(f"{self.address}: {exc}") from exc

    def close(self, timeout: float) -> int:
        self.client.close()
        return 0
