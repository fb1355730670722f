"""Sinks off the inference thread: a bounded buffer, a sender thread, retries, counters.

The inference loop only appends records to a buffer and never waits for a
broker, a disk or a URL. When the destination is down, records wait in the
buffer and the sender retries with exponential backoff; when the buffer is
full the oldest records are dropped and counted, so a slow sink costs
records, visibly, but never stalls the pipeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from vstream.results import FrameResult
from vstream.sinks.base import DeliveryError, Record, Transport
from vstream.uri import redact_uri

log = logging.getLogger("vstream.sinks")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff between failed attempts at one batch."""

    initial_delay_seconds: float = 0.2
    max_delay_seconds: float = 10.0
    max_attempts: int | None = None
    """Failed attempts after which the batch is dropped; None: retry until shutdown."""


@dataclass
class SinkStats:
    """Counters of one sink, read by the metrics endpoint."""

    delivered: int = 0
    """Records the destination (or its client library) accepted."""
    retries: int = 0
    """Attempts made again after a failure."""
    failures: int = 0
    """Failed attempts (each may have been retried)."""
    dropped: int = 0
    """Records given up: buffer overflow, out of attempts, rejected, or unsent at shutdown."""


class BufferedSink:
    """Runs ``transport`` on its own thread behind a buffer of at most ``capacity`` records.

    Records are delivered in the order they were written, in batches of up
    to ``batch_records``. With ``events_only`` only frames that have
    detections are kept. :meth:`close` delivers what is buffered for up to
    ``flush_timeout`` seconds, then counts the rest as dropped.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        name: str,
        pipeline: str = "",
        events_only: bool = False,
        capacity: int = 10000,
        batch_records: int = 100,
        retry: RetryPolicy | None = None,
        flush_timeout: float = 10.0,
    ) -> None:
        self.transport = transport
        self.name = name
        self.pipeline = pipeline
        self.events_only = events_only
        self.capacity = capacity
        self.batch_records = batch_records
        self.retry = retry or RetryPolicy()
        self.flush_timeout = flush_timeout
        self.stats = SinkStats()
        self._buffer: deque[Record] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._outage = False
        self._thread = threading.Thread(target=self._run, name=f"sink-{name}", daemon=True)
        self._thread.start()

    @property
    def label(self) -> str:
        return f"sink {self.name}" + (f" (pipeline {self.pipeline})" if self.pipeline else "")

    @property
    def buffered(self) -> int:
        """Records waiting to be sent."""
        return len(self._buffer)

    def write(self, results: list[FrameResult]) -> None:
        """Queue the records of ``results``; never blocks on the destination."""
        records = [r.to_record() for r in results if r.detections or not self.events_only]
        if not records:
            return
        with self._cond:
            if self._closing:
                self._drop(len(records), "after shutdown began")
                return
            overflow = len(self._buffer) + len(records) - self.capacity
            for _ in range(max(0, overflow)):
                if self._buffer:
                    self._buffer.popleft()
                else:
                    records.pop(0)
            if overflow > 0:
                self._drop(overflow, "buffer full, oldest records dropped")
            self._buffer.extend(records)
            self._cond.notify()

    def _drop(self, count: int, why: str) -> None:
        with self._cond:
            first = self.stats.dropped == 0 or not self._outage
            self.stats.dropped += count
        if first:
            log.warning("%s: %d records dropped: %s", self.label, count, why)

    def _next_batch(self) -> list[Record] | None:
        """The next records to send; None once closing and done (or out of time)."""
        with self._cond:
            while not self._buffer and not self._closing:
                self._cond.wait()
            if not self._buffer or time.monotonic() >= self._deadline:
                return None
            count = min(self.batch_records, len(self._buffer))
            return [self._buffer.popleft() for _ in range(count)]

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._deliver(batch)

    def _deliver(self, batch: list[Record]) -> None:
        """Send ``batch`` until it is through, given up, or shutdown's time is up."""
        attempts = 0
        delay = self.retry.initial_delay_seconds
        while batch:
            if attempts and self._closing and time.monotonic() >= self._deadline:
                self._drop(len(batch), "not delivered before the flush timeout")
                return
            try:
                self.transport.send(batch)
                delivered, error = len(batch), None
            except DeliveryError as exc:
                delivered, error = exc.delivered, exc
            except Exception as exc:  # a client library's own error types
                delivered, error = 0, DeliveryError(f"{type(exc).__name__}: {exc}")
            self.stats.delivered += delivered
            batch = batch[delivered:]
            if error is None:
                self._recovered(attempts)
                return
            attempts += 1
            self.stats.failures += 1
            if not error.retryable or (
                self.retry.max_attempts is not None and attempts >= self.retry.max_attempts
            ):
                reason = "rejected" if not error.retryable else f"{attempts} failed attempts"
                log.warning("%s: %s (%s)", self.label, redact_uri(str(error)), reason)
                self._drop(len(batch), reason)
                return
            if not self._outage:
                self._outage = True
                log.warning(
                    "%s: %s; retrying, buffering up to %d records",
                    self.label,
                    redact_uri(str(error)),
                    self.capacity,
                )
            self.stats.retries += 1
            wait = min(delay, max(0.0, self._deadline - time.monotonic()))
            with self._cond:
                self._cond.wait_for(lambda: False, timeout=wait)
            delay = min(delay * 2, self.retry.max_delay_seconds)

    def _recovered(self, attempts: int) -> None:
        if self._outage:
            self._outage = False
            log.info(
                "%s: delivering again after %d failed attempts (%d records dropped so far)",
                self.label,
                attempts,
                self.stats.dropped,
            )

    def start_flush(self) -> None:
        """Stop taking records and start the flush timeout; :meth:`close` waits for the flush.

        Calling this on every sink first lets several sinks flush at the same time.
        """
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + self.flush_timeout
            self._cond.notify_all()

    def close(self) -> None:
        """Stop taking records, deliver what is buffered (up to the flush timeout), close."""
        self.start_flush()
        self._thread.join(max(0.0, self._deadline - time.monotonic()) + 5.0)
        with self._cond:
            left = len(self._buffer)
            self._buffer.clear()
        if left:
            self._drop(left, "not delivered before the flush timeout")
        unconfirmed = self.transport.close(max(0.0, self._deadline - time.monotonic()))
        if unconfirmed:
            self._drop(unconfirmed, "sent but not acknowledged before shutdown")
