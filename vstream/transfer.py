"""The device boundary: the one place where data leaves the device for the host.

Frames, model inputs and raw model outputs stay on the device. Only the
compact detections tensor of a batch (seven floats per box) crosses here, so
the cost of the boundary is counted in bytes per box, not per pixel; every
byte handed over is counted in :data:`transfers`, which is how the benchmark
reports what crossed. On CUDA the copy lands in a pinned host buffer that is
reused from batch to batch (:class:`HostStaging`): a DMA transfer without a
staging copy inside the driver, and no allocation per batch.

This is also the one place the host waits for the GPU: on an event recorded
right after the copy, on the stream the copy was queued on (the pipeline's
stream; see :mod:`vstream.inference.session`). An event, not a stream or
device synchronisation: work other threads queued after it is not waited for.
Every wait is counted (:attr:`TransferCounter.host_waits`).
"""

from __future__ import annotations

import threading

import numpy as np
import torch


class TransferCounter:
    """Bytes and batches handed to the host by :func:`to_host`, process-wide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0
        self.batches = 0
        self.host_waits = 0
        """Times the host waited for the device here (one per batch on CUDA, none on the CPU)."""
        self.implicit_syncs: dict[str, int] = {}
        """Host waits hidden in device ops that cannot avoid one (a device ``nonzero`` must
        learn its output size), counted by reason by the code that makes them."""

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes += nbytes
            self.batches += 1

    def waited(self) -> None:
        with self._lock:
            self.host_waits += 1

    def implicit_sync(self, reason: str) -> None:
        """Count one unavoidable implicit synchronisation (call it where the op is issued)."""
        with self._lock:
            self.implicit_syncs[reason] = self.implicit_syncs.get(reason, 0) + 1

    def snapshot(self) -> tuple[int, int]:
        """``(bytes, batches)`` so far; differences of two snapshots measure a run."""
        with self._lock:
            return self.bytes, self.batches


transfers = TransferCounter()


class HostStaging:
    """One host buffer, pinned on CUDA machines, that every copy of a pipeline lands in.

    It grows (doubling) when a batch has more detections than it holds and
    otherwise keeps its address. The array :func:`to_host` returns is a view
    of it, valid until the next copy: callers turn it into records at once.
    """

    def __init__(self, *, pinned: bool = True) -> None:
        self.pinned = pinned
        self._buffer = torch.empty(0, dtype=torch.uint8)
        self._copied: torch.cuda.Event | None = None

    @property
    def buffer(self) -> torch.Tensor:
        """The host buffer copies land in (pinned on CUDA machines)."""
        return self._buffer

    def copied(self) -> torch.cuda.Event:
        """The event recorded after each copy into this buffer, made once."""
        if self._copied is None:
            self._copied = torch.cuda.Event()
        return self._copied

    def view(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """A host tensor of ``shape`` and ``dtype`` inside the buffer."""
        nbytes = shape.numel() * dtype.itemsize
        if nbytes > self._buffer.numel():
            capacity = max(nbytes, 2 * self._buffer.numel(), 4096)
            self._buffer = torch.empty(capacity, dtype=torch.uint8, pin_memory=self.pinned)
        return self._buffer[:nbytes].view(dtype).view(shape)


def to_host(detections: torch.Tensor, staging: HostStaging | None = None) -> np.ndarray:
    """Hand the detections tensor of a batch to the host as a numpy array.

    A CPU tensor is already in host memory and is returned without a copy; a
    device tensor is copied, into ``staging`` when given, queued on the
    current stream, and the host waits on an event recorded right after it.
    """
    detections = detections.detach()
    transfers.add(detections.numel() * detections.element_size())
    if detections.device.type == "cpu":
        return detections.numpy()
    transfers.waited()
    if staging is None:
        return detections.to("cpu").numpy()  # a blocking copy: the host waits for the stream
    host = staging.view(detections.shape, detections.dtype)
    host.copy_(detections, non_blocking=True)
    copied = staging.copied()
    copied.record(torch.cuda.current_stream(detections.device))
    copied.synchronize()  # the one host wait of a batch: this copy, not the whole stream
    return host.numpy()
