"""The device boundary: the one place where data crosses between the host and the device.

Frames, model inputs and raw model outputs stay on the device. Only the
compact detections tensor of a batch (seven floats per box; a pose model adds its
keypoints, an OBB model its rotated box) crosses back
here, so the cost of the boundary is counted in bytes per box, not per pixel;
every byte handed over is counted in :data:`transfers`, which is how the
benchmark and ``vstream doctor`` report what crossed. On CUDA the copy lands
in a pinned host buffer that is reused from batch to batch
(:class:`HostStaging`): a DMA transfer without a staging copy inside the
driver, and no allocation per batch.

This is also the one place the host waits for the GPU: on an event recorded
right after the copy, on the stream the copy was queued on (the pipeline's
stream; see :mod:`vstream.inference.session`). An event, not a stream or
device synchronisation: work other threads queued after it is not waited for.
Every wait is counted (:attr:`TransferCounter.host_waits`), and so is every
wait hidden in a device operation that cannot avoid one
(:attr:`TransferCounter.implicit_syncs`, see :mod:`vstream.postprocess.decode`).

The other direction, :func:`upload`, is for what starts on the host (frames
of the CPU decoder, small tables): through pinned memory, so that the copy
never makes the host wait for the stream.
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
        self.uploaded_bytes = 0
        """Bytes :func:`upload` copied to a device (CPU-decoded frames, small tables)."""
        self.host_waits = 0
        """Times the host waited for the device here (one per batch on CUDA, none on the CPU)."""
        self.implicit_syncs: dict[str, int] = {}
        """Host waits hidden in device ops that cannot avoid one (a device ``nonzero`` must
        learn its output size), counted by reason where the op is issued; on the CPU the
        same ops are counted although nothing waits there."""

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes += nbytes
            self.batches += 1

    def uploaded(self, nbytes: int) -> None:
        with self._lock:
            self.uploaded_bytes += nbytes

    def waited(self) -> None:
        with self._lock:
            self.host_waits += 1

    def implicit_sync(self, reason: str) -> None:
        """Count one unavoidable implicit synchronisation (call it where the op is issued)."""
        with self._lock:
            self.implicit_syncs[reason] = self.implicit_syncs.get(reason, 0) + 1

    def implicit_sync_total(self) -> int:
        with self._lock:
            return sum(self.implicit_syncs.values())

    def snapshot(self) -> tuple[int, int]:
        """``(bytes, batches)`` so far; differences of two snapshots measure a run."""
        with self._lock:
            return self.bytes, self.batches


transfers = TransferCounter()


class HostStaging:
    """A host buffer per thread, pinned on CUDA machines, that a pipeline's copies land in.

    Each thread that calls :func:`to_host` with it gets a buffer (and an
    event) of its own, so postprocessing may run on several threads at once.
    A buffer grows (doubling) when a batch has more detections than it holds
    and otherwise keeps its address. The array :func:`to_host` returns is a
    view of it, valid until that thread's next copy: callers turn it into
    records at once.
    """

    def __init__(self, *, pinned: bool = True) -> None:
        self.pinned = pinned
        self._local = threading.local()

    @property
    def buffer(self) -> torch.Tensor:
        """This thread's host buffer (pinned on CUDA machines)."""
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = self._local.buffer = torch.empty(0, dtype=torch.uint8)
        return buffer

    def copied(self) -> torch.cuda.Event:
        """The event recorded after each of this thread's copies, made once per thread."""
        event = getattr(self._local, "copied", None)
        if event is None:
            # Blocking: the waiting thread sleeps until the copy is done. A default event is
            # waited for by spinning, which burns a core for as long as the GPU works.
            event = self._local.copied = torch.cuda.Event(blocking=True)
        return event

    def view(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """A host tensor of ``shape`` and ``dtype`` inside this thread's buffer."""
        nbytes = shape.numel() * dtype.itemsize
        buffer = self.buffer
        if nbytes > buffer.numel():
            capacity = max(nbytes, 2 * buffer.numel(), 4096)
            buffer = self._local.buffer = torch.empty(
                capacity, dtype=torch.uint8, pin_memory=self.pinned
            )
        return buffer[:nbytes].view(dtype).view(shape)


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


def upload(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` on ``device``, queued on the current stream; the host does not wait.

    On the CPU this is ``host`` itself. To CUDA it goes through pinned memory
    from torch's caching host allocator, then ``non_blocking``: a blocking
    copy would end with ``cudaStreamSynchronize`` (torch's
    ``memcpy_and_sync``), and even an asynchronous copy from pageable memory
    may synchronise the stream while the driver stages it (CUDA's "API
    synchronization behavior"). Torch records an event on the pinned block,
    which is not handed out again before the copy has read it.
    """
    if device.type == "cpu":
        return host
    transfers.uploaded(host.numel() * host.element_size())
    return host.pin_memory().to(device, non_blocking=True)


def settle(device: torch.device) -> None:
    """Wait until ``device`` has done all the work queued on it; nothing on the CPU.

    Only to stop a clock in a measurement (``vstream doctor``, ``vstream
    bench``), so a GPU stage is timed by its work, not its kernel launches;
    never in the pipeline, where the host waits only at :func:`to_host`.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
