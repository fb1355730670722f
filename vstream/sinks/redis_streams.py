"""Redis Streams output (redis-py): ``XADD`` per frame record, trimmed with ``MAXLEN``.

Exactly once, even across timeouts. A batch is one MULTI/EXEC transaction,
but a timeout can fire after Redis executed it: sending it again would add
every entry twice. So each entry gets its id from vstream, not from Redis:
``<sink start in ms>-<n>``, with ``n`` counting the entries of that key. A
batch sent again carries the same ids, and Redis refuses an id that is not
above the stream's last one; on a retry that refusal means "already there",
and the entry counts as delivered. On a first attempt it means another
writer uses the key (or the clock went back), which is a misconfiguration,
reported once. One vstream sink should write each key.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from vstream.errors import VstreamError
from vstream.sinks.base import DeliveryError, Record, encode_records, stream_key
from vstream.uri import redact

_REFUSED = (redis.AuthenticationError, redis.exceptions.AuthorizationError)
"""A wrong or missing password, an ACL's no: redis-py raises them as connection errors, but
connecting again cannot change them; the sink fails."""

_TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
)
"""Retried: the server unreachable, slow, loading its data, at ``maxmemory`` until its
readers trim, or a replica until a failover is over."""

_TRANSIENT_REPLIES = ("MISCONF ", "BUSY ")
"""The same, in replies redis-py raises as plain ``ResponseError``: the server cannot save
(its disk is full), or a script holds it."""
_ID_TOO_SMALL = "equal or smaller than the target stream top item"


class KeyConflict(Exception):
    """An entry id was refused on its first attempt: someone else writes the key."""


class RedisStreamTransport:
    """Appends each record to a Redis stream (one key per video stream by default).

    Entries carry ``stream``, ``frame`` and ``record`` (the whole JSON record).
    redis-py's own retries are off: the buffered sink retries.
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
        self.address = f"redis {redact(url)}"
        self.client = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self._epoch_ms = int(time.time() * 1000)
        self._counts: dict[str, int] = {}
        self._pending: dict[int, tuple[Record, str, str]] = {}
        """Record, key and id of each record of the batch in hand, by ``id(record)``.

        The entry holds the record itself, so its ``id()`` cannot be reused
        while it is here; a new batch replaces the old one."""

    def send(self, records: Sequence[Record]) -> None:
        previous = self._pending
        self._pending = {}
        retry = bool(records)
        for record in records:
            held = previous.get(id(record))
            if held is not None and held[0] is record:
                self._pending[id(record)] = held
                continue
            retry = False
            key = stream_key(self.key, record, self.pipeline)
            self._counts[key] = self._counts.get(key, 0) + 1
            self._pending[id(record)] = (record, key, f"{self._epoch_ms}-{self._counts[key]}")
        batch = self.client.pipeline(transaction=True)
        for record in records:
            _, key, entry_id = self._pending[id(record)]
            fields = {
                "stream": str(record.get("stream", "")),
                "frame": str(record.get("frame", "")),
                "record": encode_records(record),
            }
            batch.xadd(key, fields, id=entry_id, maxlen=self.maxlen, approximate=self.approximate)
        try:
            replies = batch.execute(raise_on_error=False)
        except _REFUSED as exc:
            raise VstreamError(
                f"{self.address} refused the client: {exc} (check the URL's user and password)"
            ) from None
        except redis.RedisError as exc:
            raise self._transient(exc) from exc
        for reply in replies:
            if not isinstance(reply, Exception):
                continue
            if _ID_TOO_SMALL not in str(reply):
                raise self._transient(reply)
            if not retry:
                raise KeyConflict(
                    f"{self.address}: an entry id was refused on its first attempt ({reply}); "
                    "another writer uses the key"
                )
            # A retry of a batch that did arrive before its timeout fired: already there.
        self._pending = {}

    def _transient(self, exc: Exception) -> Exception:
        """``exc`` as a :class:`DeliveryError` where waiting may mend it; else as it is."""
        if isinstance(exc, _TRANSIENT) or str(exc).startswith(_TRANSIENT_REPLIES):
            return DeliveryError(f"{self.address}: {type(exc).__name__}: {exc}")
        return exc

    def close(self, timeout: float) -> int:
        self.client.close()
        return 0
