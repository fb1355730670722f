"""Which stream runs on which worker: placing waiting streams, moving them off lost or stuck ones.

Every method runs under the engine's lock. A stream waits (``slot`` None)
until a worker has room for it (:func:`~vstream.cluster.placement.choose_worker`);
it is placed there with its resume point, so a stream that left a lost or
stuck worker carries on after its last delivered frame. The run fails when
no worker is left, or with a bug (:meth:`Roster.fatal`), once.
"""

from __future__ import annotations

import logging
import threading

from vstream.cluster.placement import WorkerLoad, choose_worker
from vstream.cluster.slots import WorkerSlot, WorkerSlots
from vstream.cluster.stream import ClusterStream, StreamLost
from vstream.config.cluster import ClusterConfig
from vstream.errors import VstreamError, describe, first_line

log = logging.getLogger("vstream.cluster")


class Roster:
    """The streams of a cluster run, the workers they are placed on, and the moves so far."""

    def __init__(self, cluster: ClusterConfig, slots: WorkerSlots, stopping: threading.Event):
        self.cluster = cluster
        self.slots = slots
        self.stopping = stopping
        self.streams: dict[str, ClusterStream] = {}
        self.placed: dict[str, ClusterStream] = {}
        """Each placed stream by the id its worker knows (``ClusterStream.worker_id``)."""
        self.failure: BaseException | None = None
        """A bug in a worker, or every worker lost: the run fails with it."""
        self.losses = 0
        self.moves = 0
        self.stalls = 0
        self._placements = 0

    def _loads(self) -> dict[int, WorkerLoad]:
        loads = {}
        for slot in self.slots:
            if slot.state != "ready" or slot.info is None:
                continue
            active = [self.streams[s] for s in slot.streams if s in self.streams]
            active = [s for s in active if not s.terminal]
            loads[slot.slot] = WorkerLoad(
                slot=slot.slot,
                throughput=slot.info.throughput,
                streams=len(active),
                nvdec_streams=sum(s.nvdec for s in active),
                gpu=slot.info.gpu,
            )
        return loads

    def place_waiting(self) -> None:
        """Place every stream that waits for a worker, where there is room."""
        if self.stopping.is_set():
            return
        waiting = [s for s in self.streams.values() if s.slot is None and not s.terminal]
        if not waiting:
            return
        loads = self._loads()
        for stream in waiting:
            if self._stalled_everywhere(stream):
                continue
            placement = choose_worker(
                [w for w in loads.values() if self.slots[w.slot] not in stream.stalled_on],
                stream.config.decoder,
                max_streams=self.cluster.max_streams_per_worker,
                nvdec_sessions=self.cluster.nvdec_sessions_per_worker,
            )
            if placement is None:
                continue
            slot = self.slots[placement.slot]
            self._placements += 1
            worker_id = stream.placed(slot.slot, placement.nvdec, self._placements)
            self.placed[worker_id] = stream
            source = stream.config.model_copy(
                update={"id": worker_id, "decoder": placement.decoder}
            )
            ref = slot.actor.add.remote(
                stream.pipeline, source, stream.resume, stream.analytics_state
            )
            slot.adding[ref] = stream.id
            slot.streams.add(stream.id)
            load = loads[slot.slot]
            loads[slot.slot] = WorkerLoad(
                load.slot,
                load.throughput,
                load.streams + 1,
                load.nvdec_streams + placement.nvdec,
                load.gpu,
            )
            how = f"resumes after frame {stream.resume.index}" if stream.resume else "starts"
            log.info("stream %s %s on %s", stream.id, how, slot.name)

    def _stalled_everywhere(self, stream: ClusterStream) -> bool:
        """Whether ``stream`` stalled on every worker starting or ready: then it fails, once,
        rather than wait for ever for a worker it may go to."""
        live = [s for s in self.slots if s.state in ("starting", "ready")]
        if not live or any(s not in stream.stalled_on for s in live):
            return False
        stream.fail(
            StreamLost(
                f"it stalled on every worker left ({len(live)} of cluster.workers: "
                f"{self.cluster.workers}): nowhere to move it"
            )
        )
        return True

    def lost(self, slot: WorkerSlot, error: BaseException) -> None:
        """A worker's process is gone: move its streams, start a replacement."""
        if slot.state not in ("starting", "ready"):
            return
        slot.state = "lost"
        self.losses += 1
        self.slots.kill(slot)
        moved = 0
        for stream_id in sorted(slot.streams):
            stream = self.streams.get(stream_id)
            if stream is None or stream.terminal:
                continue
            self.placed.pop(stream.worker_id or "", None)
            if stream.error is not None:  # failed there: its last records went with the worker
                stream.done = True
                continue
            stream.lost_worker()
            self._moved(stream)
            moved += 1
        ended = len(slot.streams) - moved
        slot.streams.clear()
        if slot.info is None:  # a replacement lost while it started: it held no streams yet
            log.error("%s lost before it was ready: %s", slot.name, first_line(error))
        else:
            log.error(
                "%s lost: %s; moving %d streams%s",
                slot.name,
                first_line(error),
                moved,
                f" ({ended} others had ended there)" if ended else "",
            )
        if self.stopping.is_set():
            return
        self.slots.replace(slot)
        self.place_waiting()
        self.check_workers_left()

    def _moved(self, stream: ClusterStream) -> None:
        """``stream`` left its worker: count the move; past the bound, fail it."""
        self.moves += 1
        if stream.moves > self.cluster.max_stream_moves:
            stream.fail(
                StreamLost(
                    f"it left its worker (lost or stuck) {stream.moves} times, more than "
                    f"cluster.max_stream_moves ({self.cluster.max_stream_moves})"
                )
            )

    def stalled(self, slot: WorkerSlot, stream: ClusterStream) -> None:
        """``stream`` reads on ``slot`` but gives no records: move it.

        The worker answers its pulls, so it is not lost; its pipeline (or this
        stream's reader) is stuck. The stream is stopped there, whatever that
        incarnation still sends is dropped (counted as ``removed``), and it is
        placed on another worker after its last delivered frame, as after a loss.
        """
        log.error(
            "stream %s: no record from %s for %.0f s while it reads "
            "(cluster.stall_timeout_seconds); moving it",
            stream.id,
            slot.name,
            stream.idle_seconds,
        )
        self.stalls += 1
        self.placed.pop(stream.worker_id or "", None)
        slot.streams.discard(stream.id)
        slot.removing.add(slot.actor.remove.remote(stream.worker_id))
        stream.stalled(slot)
        self._moved(stream)

    def check_workers_left(self) -> None:
        """With no worker starting or ready, every stream fails, and the run with them."""
        if self.slots.any_live():
            return
        lost = VstreamError("every cluster worker was lost, and none can be started in its place")
        if self.failure is None:
            self.failure = lost
        for stream in self.streams.values():
            if not stream.terminal:
                stream.fail(lost)

    def fatal(self, error: BaseException) -> None:
        """A bug (in a worker, or in the driver's threads): the run fails with it, once."""
        if self.failure is None:
            self.failure = error
            log.error("the cluster failed: %s", describe(error))
        for stream in self.streams.values():
            if not stream.terminal:
                stream.fail(error)
