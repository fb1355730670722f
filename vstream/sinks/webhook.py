"""HTTP webhook output (httpx): records POSTed as a JSON array, one request per batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import httpx

from vstream.sinks.base import DeliveryError, Record, encode_records
from vstream.uri import redact_uri

_RETRYABLE_STATUS = {408, 425, 429}


class WebhookTransport:
    """POSTs each batch of records as a JSON array to ``url``.

    Timeouts, connection errors, 5xx, 408 and 429 are retried by the buffered
    sink; any other 4xx means the receiver rejects the records, so they are
    dropped (and counted) instead of being sent forever.
    """

    def __init__(
        self, *, url: str, timeout: float = 5.0, headers: Mapping[str, str] | None = None
    ) -> None:
        self.url = url
        self.address = f"webhook {redact_uri(url)}"
        sent = httpx.Headers({"content-type": "application/json"})
        sent.update(dict(headers or {}))  # a user's Content-Type wins
        self.client = httpx.Client(timeout=timeout, headers=sent)

    def send(self, records: Sequence[Record]) -> None:
        try:
            response = self.client.post(self.url, content=encode_records(records))
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{self.address}: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status < 300:
            return
        retryable = status >= 500 or status in _RETRYABLE_STATUS
        raise DeliveryError(f"{self.address} answered HTTP {status}", retryable=retryable)

    def close(self, timeout: float) -> int:
        self.client.close()
        return 0
