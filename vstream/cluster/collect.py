"""The control thread: every call to the workers, waited on together, and what their answers mean.

Each ready worker has one pull (``take``) in flight unless its batches wait
for the sinks; then a ``pid`` call stands in, so that its loss is still
noticed at once. An answer is a pull's records (accepted, each once and in
order, for the delivery thread: the stream's resume point moves to it here,
so a move never repeats nor skips a record), a worker ready, a stream added,
or a failure: a worker's method that raised fails its stream, its start or
the run; a call that could not reach the worker means the worker is lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from vstream.cluster.deliver import DELIVERY_DEPTH, Deliverer, Delivery
from vstream.cluster.roster import Roster
from vstream.cluster.slots import WorkerSlot, ray_cause
from vstream.cluster.stream import ClusterStream
from vstream.cluster.worker import WorkerReport
from vstream.results import FrameResult

log = logging.getLogger("vstream.cluster")

TAKE_RECORDS = 512
"""Most records one pull brings back."""

TAKE_WAIT_SECONDS = 0.25
"""How long a worker holds a pull open while it has no record."""

_POLL_SECONDS = 0.2
"""How long the thread waits on the calls at once; how often a worker behind is pinged."""

Call = tuple[WorkerSlot, str, str | None]
"""A pending call's worker, its kind (open, take, ping, finish, add, remove), its stream id."""


class Collector:
    """The control thread, and the records it has received and dropped so far."""

    def __init__(
        self,
        *,
        roster: Roster,
        deliverer: Deliverer,
        ray: Any,
        lock: threading.RLock,
        halt: threading.Event,
    ) -> None:
        self.roster = roster
        self.slots = roster.slots
        self.deliverer = deliverer
        self.thread: threading.Thread | None = None
        self.received = 0
        self.dropped: Counter[str] = Counter()
        self._ray = ray
        self._lock = lock
        self._halt = halt

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="cluster", daemon=True)
        self.thread.start()

    def _calls(self) -> dict[Any, Call]:
        """Every pending call to a worker, asking each ready worker for records (under the lock).

        A worker whose batches wait for the sinks is not asked for more; a
        ``pid`` call is kept in flight to it instead, now and then, so that its
        loss is still noticed at once.
        """
        now = time.monotonic()
        calls: dict[Any, Call] = {}
        for slot in self.slots:
            if slot.state == "starting":
                calls[slot.opening] = (slot, "open", None)
                continue
            if slot.state != "ready":
                continue
            behind = slot.pending >= DELIVERY_DEPTH
            if slot.taking is None and not slot.ended and not behind:
                slot.taking = slot.actor.take.remote(TAKE_RECORDS, TAKE_WAIT_SECONDS)
                slot.asked_at = now
            if slot.taking is not None:
                calls[slot.taking] = (slot, "take", None)
            elif behind and slot.pinging is None and now - slot.pinged_at >= _POLL_SECONDS:
                slot.pinging, slot.pinged_at = slot.actor.pid.remote(), now
            if slot.pinging is not None:
                calls[slot.pinging] = (slot, "ping", None)
            if slot.finishing is not None:
                calls[slot.finishing] = (slot, "finish", None)
            for ref, stream_id in slot.adding.items():
                calls[ref] = (slot, "add", stream_id)
            for ref in slot.removing:
                calls[ref] = (slot, "remove", None)
        return calls

    def _run(self) -> None:
        try:
            self._collect_until_halted()
        except Exception as exc:  # a bug here would stall every stream: fail them, loudly
            with self._lock:
                self.roster.fatal(exc)

    def _collect_until_halted(self) -> None:
        ray = self._ray
        while not self._halt.is_set():
            with self._lock:
                calls = self._calls()
            if not calls:
                self._halt.wait(_POLL_SECONDS)
                continue
            refs = list(calls)
            ready, rest = ray.wait(refs, num_returns=1, timeout=_POLL_SECONDS)
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                self._answered(ref, *calls[ref])

    def _answered(self, ref: Any, slot: WorkerSlot, kind: str, stream_id: str | None) -> None:
        errors = self._ray.exceptions
        if kind == "remove":
            with self._lock:
                slot.removing.discard(ref)
        try:
            value = self._ray.get(ref)
        except errors.RayTaskError as exc:
            with self._lock:
                self._refused(slot, kind, stream_id, ray_cause(exc))
            return
        except errors.RayError as exc:  # the process or its node is gone
            with self._lock:
                self.roster.lost(slot, exc)
            return
        with self._lock:
            if kind == "take":
                self._accept(slot, value)
            elif kind == "ping":
                slot.pinging = None
            elif kind == "open":
                if slot.state == "starting":
                    slot.opened(value)
                    self.roster.place_waiting()
            elif kind == "add":
                slot.adding.pop(ref, None)
            elif kind == "finish":
                slot.finishing = None

    def _refused(
        self, slot: WorkerSlot, kind: str, stream_id: str | None, error: Exception
    ) -> None:
        """A worker's method raised (under the lock): who fails depends on which."""
        if kind == "add":
            slot.adding = {r: s for r, s in slot.adding.items() if s != stream_id}
            stream = self.roster.streams.get(stream_id or "")
            if stream is not None:
                stream.fail(error)
        elif kind == "open":
            self.slots.broken(slot, error)
            self.roster.check_workers_left()
        elif kind == "remove":  # a stalled stream that ended there meanwhile: nothing to stop
            log.debug("%s: removing a stalled stream: %s", slot.name, error)
        else:
            slot.taking = slot.pinging = None
            self.roster.fatal(error)

    def _accept(self, slot: WorkerSlot, report: WorkerReport) -> None:
        """A pull's records, each once and in order, onto the delivery queue (under the lock).

        Each record accepted moves its stream's resume point: from here on, a
        move of the stream starts after it, with the analytics the worker sent
        with it, and the delivery thread writes it.
        Streams that read but got none of their records are checked for a stall.
        """
        now, wall = time.monotonic(), time.time()
        slot.taking = None
        self.received += len(report.records)
        accepted: list[tuple[ClusterStream, FrameResult]] = []
        got: Counter[str] = Counter()
        last = {r.stream_id: r.frame_index for r in report.records}
        for result in report.records:
            # Named by the worker id: a removed or moved stream's records, and an earlier
            # incarnation's of a stream added again with the same id, find no stream.
            stream = self.roster.placed.get(result.stream_id)
            if stream is None or stream.removed or not self.slots.runs_on(stream, slot):
                self.dropped["removed"] += 1
                continue
            result = replace(result, stream_id=stream.id)
            if stream.resume is not None and result.frame_index <= stream.resume.index:
                self.dropped["duplicate"] += 1
                log.error(
                    "stream %s: frame %d came again after frame %d; dropped",
                    stream.id,
                    result.frame_index,
                    stream.resume.index,
                )
                continue
            stream.delivered(result, wall)
            got[stream.id] += 1
            accepted.append((stream, result))
        for worker_id, state in report.states.items():
            # A state goes with its stream's last record of the report: kept where that
            # record was accepted, i.e. is where the stream now resumes.
            stream = self.roster.placed.get(worker_id)
            if (
                stream is not None
                and self.slots.runs_on(stream, slot)
                and stream.resume is not None
                and stream.resume.index == last[worker_id]
            ):
                stream.analytics_state = state
        if report.ended:
            slot.ended = True
        if accepted or report.streams:
            self.deliverer.submit(Delivery(slot, accepted, report.streams or {}))
        if slot.state == "ready":
            self._watch_stalls(slot, now - slot.asked_at, got)

    def _watch_stalls(self, slot: WorkerSlot, seconds: float, got: Counter[str]) -> None:
        """Count a pull open ``seconds`` against the streams of ``slot`` it brought nothing of."""
        timeout = self.roster.cluster.stall_timeout_seconds
        for stream_id in sorted(slot.streams):
            stream = self.roster.streams.get(stream_id)
            if stream is None or stream.terminal or not self.slots.runs_on(stream, slot):
                continue
            if stream.pulled(seconds, got[stream_id]) >= timeout:
                self.roster.stalled(slot, stream)
        self.roster.place_waiting()
