"""Sinks off the pipeline's threads: a bounded buffer, a sender thread, retries, counters.

The pipeline only appends records to a buffer. What a full buffer does is
the sink's ``overflow`` policy: ``drop_oldest`` (network sinks) drops the
oldest records, counted, so a slow broker never stalls detection;
``block`` (files, stdout) makes the pipeline wait, so nothing is lost.

Faults are classified. A :class:`~vstream.sinks.base.DeliveryError` is a
transient fault of the destination (broker down, timeout, HTTP 503): the
batch is retried with exponential backoff, or dropped and counted when the
destination rejects it for good. Anything else a transport raises is a bug
or a misconfiguration: the sink fails once, loudly, with state ``failed``;
what it held and what comes later is dropped and counted, never retried.

Drops are logged at most once per ``log_interval`` seconds per sink, with
the count since the last line; the exact totals are logged when the sink
closes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

from vstream.errors import describe
from vstream.logs import Tally
from vstream.results import FrameResult
from vstream.sinks.base import DeliveryError, Record, Transport
from vstream.uri import redact

log = logging.getLogger("vstream.sinks")

Overflow = Literal["drop_oldest", "block"]

_JOIN_STEP_SECONDS = 0.1
"""How often :meth:`BufferedSink.close` looks again at its deadline while it waits."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff between failed attempts at one batch."""

    initial_delay_seconds: float = 0.2
    max_delay_seconds: float = 10.0
    max_attempts: int | None = None
    """Failed attempts after which the batch is dropped; None: retry until shutdown."""


@dataclass
class SinkStats:
    """Counters of one sink, read by the metrics endpoint; written under the sink's lock.

    Once the sink has closed, ``produced == delivered + dropped``: every record
    it was given is one or the other, whichever way it ended.
    """

    produced: int = 0
    """Records the sink was given (after ``events_only``), counted as they are written."""
    delivered: int = 0
    """Records the destination (or its client library) accepted."""
    retries: int = 0
    """Attempts made again after a failure."""
    failures: int = 0
    """Failed attempts (each may have been retried)."""
    dropped: int = 0
    """Records given up: buffer overflow, rejected, failed sink, or unsent at shutdown."""


class BufferedSink:
    """Runs ``transport`` on its own thread behind a buffer of at most ``capacity`` records.

    Records are delivered in the order they were written, in batches of up
    to ``batch_records``. With ``events_only`` only frames that have
    detections or events are kept. :meth:`close` delivers what is buffered
    for up to ``flush_timeout`` seconds, then counts the rest as dropped,
    including a batch the sender still holds ``send_grace`` seconds later
    (a send stuck on a stalled broker): its outcome, whenever it comes, is
    not counted again.
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
        overflow: Overflow = "drop_oldest",
        retry: RetryPolicy | None = None,
        flush_timeout: float = 10.0,
        send_grace: float = 5.0,
        log_interval: float = 10.0,
    ) -> None:
        self.transport = transport
        self.name = name
        self.pipeline = pipeline
        self.events_only = events_only
        self.capacity = capacity
        self.batch_records = batch_records
        self.overflow = overflow
        self.retry = retry or RetryPolicy()
        self.flush_timeout = flush_timeout
        self.send_grace = send_grace
        self.log_interval = log_interval
        self.stats = SinkStats()
        self.error: BaseException | None = None
        """What failed the sink, if anything did; it then delivers nothing more."""
        self._buffer: deque[Record] = deque()
        self._in_hand = 0
        """Records the sender took from the buffer and has not counted yet."""
        self._settled = False
        """:meth:`close` has counted everything: what the sender reports later is not counted."""
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._outage: str | None = None
        self._drops = Tally(log_interval)
        self._thread = threading.Thread(target=self._run, name=f"sink-{name}", daemon=True)
        self._thread.start()

    @property
    def label(self) -> str:
        return f"sink {self.name}" + (f" (pipeline {self.pipeline})" if self.pipeline else "")

    @property
    def buffered(self) -> int:
        """Records waiting to be sent."""
        return len(self._buffer)

    @property
    def holding_back(self) -> bool:
        """Whether a write waits for room (``block``: the buffer is full), and so the
        pipeline's results, and its model, wait for this sink."""
        return self.overflow == "block" and len(self._buffer) >= self.capacity

    @property
    def state(self) -> str:
        """``ok``, ``retrying`` (destination unavailable) or ``failed``."""
        if self.error is not None:
            return "failed"
        return "retrying" if self._outage else "ok"

    @property
    def outage(self) -> str | None:
        """While the sink retries: why its destination takes nothing (e.g. the disk is full)."""
        return self._outage

    def keeps(self, result: FrameResult) -> bool:
        return not self.events_only or bool(result.detections) or bool(result.events)

    def write(self, results: list[FrameResult]) -> None:
        """Queue the records of ``results``; waits only with the ``block`` policy."""
        records = [r.to_record() for r in results if self.keeps(r)]
        if not records:
            return
        with self._cond:
            self.stats.produced += len(records)
            if self.overflow == "block":
                # Records that do not fit go in as the sender makes room: a write larger
                # than the free space waits for it, part by part, and drops nothing.
                while (
                    len(self._buffer) + len(records) > self.capacity
                    and not self._closing
                    and not self.error
                ):
                    room = self.capacity - len(self._buffer)
                    if room > 0:
                        self._buffer.extend(records[:room])
                        del records[:room]
                        self._cond.notify_all()
                    self._cond.wait(0.5)
            # Checked after the wait too: close may have counted the buffer by then.
            if self._closing or self.error is not None:
                if isinstance(self.error, BrokenPipeError):
                    self.stats.dropped += len(records)
                    return
                why = "the sink has failed" if self.error is not None else "after shutdown began"
                self._drop(len(records), why)
                return
            overflow = len(self._buffer) + len(records) - self.capacity
            if overflow > 0:
                dropped_old = min(overflow, len(self._buffer))
                for _ in range(dropped_old):
                    self._buffer.popleft()
                del records[: overflow - dropped_old]
                self._drop(overflow, "buffer full, oldest records dropped")
            self._buffer.extend(records)
            self._cond.notify_all()

    def _drop(self, count: int, why: str) -> None:
        """Count ``count`` dropped records; log at most once per interval."""
        with self._cond:
            self.stats.dropped += count
            count = self._drops.add(count)
            total = self.stats.dropped
        if count:
            log.warning(
                "%s: %d records dropped (%s); %d in all so far", self.label, count, why, total
            )

    def _next_batch(self) -> list[Record] | None:
        """The next records to send; None once closing and done (or out of time, or failed)."""
        with self._cond:
            while not self._buffer and not self._closing:
                self._cond.wait()
            if not self._buffer or time.monotonic() >= self._deadline or self.error is not None:
                return None
            count = min(self.batch_records, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(count)]
            self._in_hand = count
            self._cond.notify_all()
            return batch

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._deliver(batch)
            except Exception as exc:  # not a delivery fault: a bug or a misconfiguration
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            if self._settled:  # close has counted the batch; its transport may be gone
                return
            self.error = exc
            lost = self._in_hand + len(self._buffer)
            self._in_hand = 0
            self._buffer.clear()
            self._cond.notify_all()
            if isinstance(exc, BrokenPipeError):
                # The reader went away (`vstream run | head`): an ending, not a fault to report.
                self.stats.dropped += lost
                return
        log.error("%s: failed: %s; it delivers nothing more", self.label, redact(describe(exc)))
        self._drop(lost, "the sink has failed")

    def _count(self, delivered: int = 0, dropped: int = 0, why: str = "") -> None:
        """Count records of the batch in hand as delivered or dropped, unless close already did."""
        with self._cond:
            if self._settled:
                return
            self._in_hand -= delivered + dropped
            self.stats.delivered += delivered
            if dropped:
                self._drop(dropped, why)

    def _deliver(self, batch: list[Record]) -> None:
        """Send ``batch`` until it is through, given up, or shutdown's time is up."""
        attempts = 0
        delay = self.retry.initial_delay_seconds
        while batch:
            if attempts and self._closing and time.monotonic() >= self._deadline:
                self._count(dropped=len(batch), why="not delivered before the flush timeout")
                return
            try:
                self.transport.send(batch)
                delivered, error = len(batch), None
            except DeliveryError as exc:
                delivered, error = exc.delivered, exc
            self._count(delivered=delivered)
            batch = batch[delivered:]
            if error is None:
                self._recovered(attempts)
                return
            attempts += 1
            with self._cond:
                self.stats.failures += 1
            if not error.retryable or (
                self.retry.max_attempts is not None and attempts >= self.retry.max_attempts
            ):
                reason = "rejected" if not error.retryable else f"{attempts} failed attempts"
                # Said with the drops, at most once an interval: a receiver that rejects
                # every batch would otherwise write a line each.
                self._count(dropped=len(batch), why=f"{reason}: {redact(str(error))}")
                return
            first, self._outage = not self._outage, redact(str(error))  # the latest reason
            if first:
                log.warning(
                    "%s: %s; retrying, buffering up to %d records",
                    self.label,
                    self._outage,
                    self.capacity,
                )
            with self._cond:
                self.stats.retries += 1
                # The delay, or less when the flush's end comes first (hurry() brings it closer).
                until = time.monotonic() + delay
                while (left := min(until, self._deadline) - time.monotonic()) > 0:
                    self._cond.wait(left)
            delay = min(delay * 2, self.retry.max_delay_seconds)

    def _recovered(self, attempts: int) -> None:
        if self._outage:
            self._outage = None
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

    def hurry(self, seconds: float) -> None:
        """Shutdown was forced (a second signal): stop taking records, and flush for at most
        ``seconds`` more; :meth:`close` then counts what is left as dropped."""
        with self._cond:
            self._closing = True
            self._deadline = min(self._deadline, time.monotonic() + seconds)
            self._cond.notify_all()

    def close(self) -> None:
        """Deliver what is buffered (up to the flush timeout), close, log the exact totals.

        A sender still inside ``send`` after the grace (a broker that stopped
        answering) is left to finish on its own: its batch is counted as dropped
        here, so the totals add up whatever that send does later.
        """
        self.start_flush()
        # In steps: hurry() may bring the deadline closer while this waits.
        while self._thread.is_alive():
            left = self._deadline + self.send_grace - time.monotonic()
            if left <= 0:
                break
            self._thread.join(min(left, _JOIN_STEP_SECONDS))
        with self._cond:
            left, in_hand = len(self._buffer), self._in_hand  # in hand: the sender is stuck
            self._buffer.clear()
            self._in_hand = 0
            self._settled = True
        if left + in_hand:
            self._drop(left + in_hand, "not delivered before the flush timeout")
        try:
            unconfirmed = self.transport.close(max(0.0, self._deadline - time.monotonic()))
        except Exception as exc:  # closing a broken transport must not hide the totals
            log.warning("%s: closing failed: %s", self.label, redact(describe(exc)))
            unconfirmed = 0
        if unconfirmed:
            with self._cond:
                self.stats.delivered -= unconfirmed
            self._drop(unconfirmed, "sent but not acknowledged before shutdown")
        stats = self.stats
        level = logging.WARNING if stats.dropped or self.error else logging.INFO
        if isinstance(self.error, BrokenPipeError):
            level = logging.DEBUG
        log.log(
            level,
            "%s: %d records produced: %d delivered, %d dropped%s",
            self.label,
            stats.produced,
            stats.delivered,
            stats.dropped,
            " (failed)" if self.error is not None else "",
        )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
