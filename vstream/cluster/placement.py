"""Which worker takes a stream: the one with the most room for it, by capacity.

A worker's capacity is its model's throughput (frames per second, measured
when it starts), the streams it already holds, and, on a GPU, its NVDEC
sessions. A stream goes to the worker whose load after taking it,
``(streams + 1) / throughput``, is lowest, so a worker twice as fast gets
twice the streams; a worker that holds ``max_streams_per_worker`` takes no
more. Streams whose decoder is ``nvdec`` go only where an NVDEC session is
free; ``auto`` streams use one where it is free and decode on the worker's
CPU otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vstream.config.sources import DecoderKind


@dataclass(frozen=True)
class WorkerLoad:
    """A ready worker as placement sees it."""

    slot: int
    throughput: float
    """Frames per second its model ran at when it started (a relative weight)."""
    streams: int
    """Streams it holds now (finished ones no longer count)."""
    nvdec_streams: int
    """Of those, the ones decoding with NVDEC."""
    gpu: bool


@dataclass(frozen=True)
class Placement:
    """Where a stream goes, and whether it decodes with NVDEC there."""

    slot: int
    nvdec: bool
    decoder: DecoderKind
    """The decoder it is opened with there: ``cpu`` when an ``auto`` stream found no session."""


def choose_worker(
    workers: Sequence[WorkerLoad],
    decoder: DecoderKind,
    *,
    max_streams: int,
    nvdec_sessions: int,
) -> Placement | None:
    """The worker with the most room for a stream read with ``decoder``; None when none has."""
    best: tuple[float, int, Placement] | None = None
    for worker in workers:
        if worker.streams >= max_streams:
            continue
        session_free = worker.gpu and worker.nvdec_streams < nvdec_sessions
        if decoder is DecoderKind.NVDEC and not session_free:
            continue
        if decoder is DecoderKind.CPU or not worker.gpu:
            placement = Placement(worker.slot, nvdec=False, decoder=decoder)
        elif session_free:
            placement = Placement(worker.slot, nvdec=True, decoder=decoder)
        else:
            placement = Placement(worker.slot, nvdec=False, decoder=DecoderKind.CPU)
        load = (worker.streams + 1) / max(worker.throughput, 1e-6)
        key = (load, worker.slot, placement)
        if best is None or key[:2] < best[:2]:
            best = key
    return best[2] if best is not None else None
