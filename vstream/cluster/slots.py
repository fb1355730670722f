"""The driver's worker slots: starting the Ray actors, waiting for them, killing and replacing them.

A slot is one place in the cluster for a worker (``cluster.workers`` of
them). A worker lost at run time is replaced in its slot, at most
``cluster.max_worker_restarts`` times in all; a worker that cannot load its
models is not retried. Which streams a slot holds, and where they go when it
is lost, is :mod:`vstream.cluster.roster`'s business.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vstream.cluster.connect import RayConnection
from vstream.cluster.worker import WorkerInfo
from vstream.config.cluster import ClusterConfig
from vstream.config.pipelines import PipelineConfig
from vstream.errors import VstreamError, describe, first_line

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from vstream.cluster.stream import ClusterStream

log = logging.getLogger("vstream.cluster")

WORKER_CONCURRENCY = 8
"""Calls a worker runs at once: the pull, adds and removals, the finish."""


@dataclass(eq=False)
class WorkerSlot:
    """One worker as the driver sees it; a replacement takes over the slot of a lost one."""

    slot: int
    actor: Any
    opening: Any
    """The pending ``open`` call, until the worker has loaded its models."""
    state: str = "starting"
    """starting (placed or waiting for resources, loading), ready, failed, lost, stopped."""
    info: WorkerInfo | None = None
    taking: Any = None
    finishing: Any = None
    ended: bool = False
    """Finished and emptied (after :meth:`~vstream.cluster.driver.ClusterEngine.stop`)."""
    streams: set[str] = field(default_factory=set)
    adding: dict[Any, str] = field(default_factory=dict)
    """Pending ``add`` calls and their stream ids: a failure fails that stream."""
    removing: set[Any] = field(default_factory=set)
    """Pending ``remove`` calls of streams moved off this worker because they stalled."""
    asked_at: float = 0.0
    """When the pending pull was asked (monotonic): how long it was open, for stalls."""
    pending: int = 0
    """Its batches accepted and not yet in the sinks (up to
    :data:`~vstream.cluster.deliver.DELIVERY_DEPTH`)."""
    pinging: Any = None
    """While no pull is asked (the sinks are behind): a ``pid`` call, whose failure is how a
    loss is noticed then."""
    pinged_at: float = 0.0

    @property
    def name(self) -> str:
        where = f" (pid {self.info.pid} on {self.info.host})" if self.info else ""
        return f"worker {self.slot}{where}"

    def opened(self, info: WorkerInfo) -> None:
        """The worker has loaded its models: it is ready for streams."""
        self.info, self.state, self.opening = info, "ready", None
        log.info(
            "%s ready: %s, %.0f frames/s on a blank batch", self.name, info.device, info.throughput
        )


def gpus_per_worker(
    cluster: ClusterConfig, pipelines: Sequence[PipelineConfig], have: float
) -> float:
    """The GPUs each worker reserves (``have``: the cluster's GPUs).

    As configured; else, where CUDA may run and the cluster has GPUs, 1, or
    on a local instance with more workers than GPUs an equal share of one:
    ``1 / ceil(workers / GPUs)``, so that Ray places every worker at once,
    ``ceil(workers / GPUs)`` to a GPU (its fractional ``num_gpus``; it never
    splits a worker over two GPUs). A joined cluster keeps 1 a worker: it may
    grow to give every worker a GPU of its own.
    """
    wanted = cluster.gpus_per_worker
    if wanted is None:
        cuda = any(p.runtime.device != "cpu" for p in pipelines)
        if not cuda or have < 1:
            return 0.0
        if cluster.address is None:
            return 1.0 / math.ceil(cluster.workers / math.floor(have))
        return 1.0
    if cluster.address is None and wanted * cluster.workers > have:
        raise VstreamError(
            f"cluster.workers ({cluster.workers}) x cluster.gpus_per_worker ({wanted:g}) "
            f"needs more GPUs than this machine's {have:g}"
        )
    return wanted


def ray_cause(exc: Exception) -> Exception:
    """The exception a worker's method raised, out of Ray's wrapper."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc


class WorkerSlots:
    """Every worker slot of a run, indexed by slot number, and the restarts spent on them."""

    def __init__(
        self, connection: RayConnection, cluster: ClusterConfig, torch_threads: int
    ) -> None:
        self.cluster = cluster
        self.restarts = 0
        self._connection = connection
        self._ray = connection.ray
        self._torch_threads = torch_threads
        self._slots: list[WorkerSlot] = []
        self._actor_class: Any = None
        self._specs: list[PipelineConfig] = []
        self._gpus = 0.0

    def __iter__(self) -> Iterator[WorkerSlot]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def __getitem__(self, slot: int) -> WorkerSlot:
        return self._slots[slot]

    def open(self, actor_class: Any, specs: list[PipelineConfig], gpus: float) -> None:
        """Start ``cluster.workers`` workers and wait until they have loaded their models."""
        self._actor_class, self._specs, self._gpus = actor_class, specs, gpus
        self._slots = [self._spawn(slot) for slot in range(self.cluster.workers)]
        self._await_open()

    def _spawn(self, slot: int) -> WorkerSlot:
        actor = self._actor_class.options(
            num_cpus=self.cluster.cpus_per_worker,
            num_gpus=self._gpus,
            max_concurrency=WORKER_CONCURRENCY,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        ).remote(self._torch_threads)
        opening = actor.open.remote(self._specs, self.cluster.max_buffered_records)
        return WorkerSlot(slot, actor, opening)

    def _await_open(self) -> None:
        """Wait for the first workers to load their models; fail with the first reason not to."""
        deadline = time.monotonic() + self.cluster.start_timeout_seconds
        waiting = {slot.opening: slot for slot in self._slots}
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise VstreamError(
                    f"{len(waiting)} of {len(self._slots)} Ray workers did not start within "
                    f"cluster.start_timeout_seconds ({self.cluster.start_timeout_seconds:g} s): "
                    f"each asks for {self.cluster.cpus_per_worker:g} CPU and {self._gpus:g} GPU; "
                    f"the cluster has {self._connection.resources()}"
                )
            ready, _ = self._ray.wait(list(waiting), num_returns=1, timeout=min(left, 1.0))
            for ref in ready:
                slot = waiting.pop(ref)
                try:
                    slot.opened(self._ray.get(ref))
                except self._ray.exceptions.RayActorError as exc:
                    raise VstreamError(
                        f"{slot.name} died while loading its models: {first_line(exc)}"
                    ) from None
                except self._ray.exceptions.RayTaskError as exc:
                    raise ray_cause(exc) from None

    def replace(self, slot: WorkerSlot) -> None:
        """Start a replacement in the slot of a lost worker, while restarts are left."""
        if self.restarts < self.cluster.max_worker_restarts:
            self.restarts += 1
            self._slots[slot.slot] = self._spawn(slot.slot)
            log.info(
                "worker %d: starting a replacement (%d of cluster.max_worker_restarts %d)",
                slot.slot,
                self.restarts,
                self.cluster.max_worker_restarts,
            )
        else:
            slot.state = "failed"
            log.error(
                "worker %d: not replaced, cluster.max_worker_restarts (%d) reached",
                slot.slot,
                self.cluster.max_worker_restarts,
            )

    def broken(self, slot: WorkerSlot, error: BaseException) -> None:
        """A replacement could not load its models: that fails once, it is not retried."""
        slot.state = "failed"
        self.kill(slot)
        log.error("%s could not start: %s; not replaced", slot.name, describe(error))

    def kill(self, slot: WorkerSlot) -> None:
        try:
            self._ray.kill(slot.actor, no_restart=True)
        except Exception as exc:  # already gone, or the cluster is: nothing left to stop
            log.debug("%s: kill: %s", slot.name, exc)

    def any_live(self) -> bool:
        """Some worker is starting or ready: the run can go on."""
        return any(s.state in ("starting", "ready") for s in self._slots)

    def runs_on(self, stream: ClusterStream, slot: WorkerSlot) -> bool:
        """``stream`` is placed on this very worker (not on a replacement in its slot)."""
        return stream.slot is not None and self._slots[stream.slot] is slot
