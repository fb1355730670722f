"""HTTP webhook output (httpx): records POSTed as a JSON array, one request per batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import httpx

from vstream.errors import VstreamError
from vstream.sinks.base import DeliveryError, Record, encode_records
from vstream.uri import webhook_display

_RETRYABLE_STATUS = {408, 425, 429}

_MISCONFIGURED_STATUS = {
    401: "check its headers (Authorization)",
    403: "check its headers (Authorization)",
    404: "check the URL",
    405: "check the URL",
    407: "check the proxy's credentials",
    410: "check the URL",
}
"""Answers about the request's address or credentials, not its records: every batch would
get the same, so the sink fails once, saying what to check."""


def _reason(exc: httpx.HTTPError) -> str:
    """Why a request failed, in words that cannot hold its URL: the error's type, and the
    system's reason where there is one (``ConnectError: Connection refused``).

    httpx's own messages may quote the URL, whose path may be the webhook's secret;
    an OS error's reason is the system's text for its number.
    """
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return f"{type(exc).__name__}: {cause.strerror}"
        cause = cause.__cause__ or cause.__context__
    return type(exc).__name__


class WebhookTransport:
    """POSTs each batch of records as a JSON array to ``url``.

    Timeouts, connection errors, 5xx, 408 and 429 are retried by the buffered
    sink; 401, 403, 404, 405, 407 and 410 say the URL or the credentials are
    wrong, and fail the sink; any other 4xx means the receiver rejects the
    records, so they are dropped (and counted) instead of being sent forever.
    """

    def __init__(
        self, *, url: str, timeout: float = 5.0, headers: Mapping[str, str] | None = None
    ) -> None:
        self.url = url
        self.address = f"webhook {webhook_display(url)}"
        sent = httpx.Headers({"content-type": "application/json"})
        sent.update(dict(headers or {}))  # a user's Content-Type wins
        self.client = httpx.Client(timeout=timeout, headers=sent)

    def send(self, records: Sequence[Record]) -> None:
        try:
            response = self.client.post(self.url, content=encode_records(records))
        except httpx.LocalProtocolError:  # its message quotes the header: never shown
            raise VstreamError(f"{self.address}: the request cannot be sent") from None
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{self.address}: {_reason(exc)}") from exc
        status = response.status_code
        if status < 300:
            return
        if status in _MISCONFIGURED_STATUS:
            raise VstreamError(
                f"{self.address} answered HTTP {status}: {_MISCONFIGURED_STATUS[status]}"
            )
        retryable = status >= 500 or status in _RETRYABLE_STATUS
        raise DeliveryError(f"{self.address} answered HTTP {status}", retryable=retryable)

    def close(self, timeout: float) -> int:
        self.client.close()
        return 0
