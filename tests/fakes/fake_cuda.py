"""A FAKE CUDA device for torch on a machine without one: ``cuda:0`` whose memory is the host's.

For tests of code that must see CUDA devices, streams and events the way a
GPU shows them (the device-identity bugs of issue 20 could not show with CPU
tensors standing in for frames). What it follows from torch (2.14: its
``torch/cuda/streams.py``, ``torch/utils/dlpack.py`` and device semantics):

- **Devices have an index.** A CUDA tensor reports ``cuda:0``, never
  ``cuda``, and ``torch.device("cuda:0") != torch.device("cuda")``.
  :class:`CudaTensor` is host memory that reports ``cuda:0`` (``device``,
  ``is_cuda``, ``__dlpack_device__`` = ``(kDLCUDA, 0)``); every tensor an op
  makes from one is one too.
- **No silent mixing.** An op with a CUDA tensor and a CPU tensor of more
  than zero dimensions raises torch's "Expected all tensors to be on the same
  device"; ``numpy()`` of a CUDA tensor raises torch's ``TypeError``; only
  ``copy_``, ``to``/``cuda``/``cpu`` cross, as on a GPU.
- **Factories and transfers.** ``torch.empty``/``zeros``/``ones``/``full``/
  ``tensor`` with a CUDA ``device``, ``Tensor.to("cuda...")`` and
  ``Tensor.cuda()`` make :class:`CudaTensor`; ``pin_memory`` is the tensor.
- **DLPack.** ``torch.from_dlpack`` of an object whose ``__dlpack_device__``
  is ``(kDLCUDA, n)`` asks ``torch.cuda.current_stream("cuda:n")`` for the
  stream to pass and gives a tensor on ``cuda:n`` (torch's ``from_dlpack``).
- **Streams and events.** ``current_stream`` is per thread, the legacy
  default stream (handle 0) until ``torch.cuda.stream``/``set_stream``
  change it; streams compare by handle; every ``synchronize`` of a stream,
  an event or the device is recorded in :attr:`FakeGpu.waits`, so tests can
  tell which stream the host waited for.

One device (``cuda:0``); kernels run at once on the host, so ordering bugs
between streams do not show here (``pytest -m gpu`` is for those).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

KDL_CUDA = 2
"""DLPack's device type for CUDA memory (``DLDeviceType.kDLCUDA``)."""
DEVICE = torch.device("cuda", 0)

_BASE = torch._C.TensorBase
_CROSSING = {"copy_", "to", "cpu", "cuda"}
"""Ops (by name: :meth:`FakeGpu.install` replaces some) that take tensors of two devices."""


def _on_cuda(value: Any) -> bool:
    return value is not None and torch.device(value).type == "cuda"


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from _tensors(value)


def host(tensor: torch.Tensor) -> torch.Tensor:
    """The plain host tensor behind ``tensor`` (no copy): what the fake device holds."""
    with torch._C.DisableTorchFunctionSubclass():
        return tensor.as_subclass(torch.Tensor)


class CudaTensor(torch.Tensor):
    """Host memory that reports itself on ``cuda:0``, as a tensor in GPU memory does."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return DEVICE

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDL_CUDA, 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "numpy":
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                "the tensor to host memory first."
            )
        if name == "cpu":
            return host(args[0]).clone()
        if name == "to":
            device, dtype = _to_arguments(args[1:], kwargs)
            if device is not None and torch.device(device).type == "cpu":
                moved = host(args[0]).clone()
                return moved if dtype is None else moved.to(dtype)
            if dtype is None:
                return args[0]
            args, kwargs = (args[0], dtype), {}
        if name not in _CROSSING:
            found = list(_tensors([*args, *kwargs.values()]))
            if any(not isinstance(t, CudaTensor) and t.dim() > 0 for t in found):
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, cuda:0 and cpu!"
                )
        return super().__torch_function__(func, types, args, kwargs)


def _to_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(device, dtype)`` of a ``Tensor.to`` call (either may be None)."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for value in args:
        if isinstance(value, torch.dtype):
            dtype = value
        elif isinstance(value, str | torch.device | int):
            device = value
        elif isinstance(value, torch.Tensor):
            device, dtype = value.device, value.dtype
    return device, dtype


def on_cuda(tensor: torch.Tensor) -> CudaTensor:
    """A copy of host ``tensor`` on the fake ``cuda:0``."""
    return host(tensor).clone().as_subclass(CudaTensor)


class FakeStream:
    """A CUDA stream by its handle; the legacy default stream is handle 0."""

    def __init__(self, gpu: FakeGpu, handle: int) -> None:
        self.gpu = gpu
        self.cuda_stream = handle
        self.device = DEVICE
        self.waited_for: list[Any] = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeStream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(self.cuda_stream)

    def __repr__(self) -> str:
        return f"FakeStream({self.cuda_stream:#x})"

    def wait_stream(self, other: FakeStream) -> None:
        self.waited_for.append(other)

    def wait_event(self, event: FakeEvent) -> None:
        self.waited_for.append(event)

    def synchronize(self) -> None:
        self.gpu.waits.append(("stream", self.cuda_stream))

    def query(self) -> bool:
        return True


class FakeEvent:
    """A CUDA event; the host waiting on it is recorded with the stream it was recorded on."""

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.stream: FakeStream | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        self.stream = stream if stream is not None else self.gpu.current_stream()

    def synchronize(self) -> None:
        handle = self.stream.cuda_stream if self.stream is not None else None
        self.gpu.waits.append(("event", handle))

    def query(self) -> bool:
        return True


class FakeGpu:
    """``cuda:0`` installed over torch for one test (undone with the test's ``monkeypatch``)."""

    def __init__(self) -> None:
        self.waits: list[tuple[str, int | None]] = []
        """Host waits, in order: ``("stream" | "event" | "device", stream handle or None)``."""
        self.made: list[FakeStream] = []
        """Streams made with ``torch.cuda.Stream``."""
        self._handles = itertools.count(0x5000, 0x10)
        self._local = threading.local()
        self.default = FakeStream(self, 0)

    def current_stream(self, device: Any = None) -> FakeStream:
        return getattr(self._local, "stream", self.default)

    @contextlib.contextmanager
    def stream(self, stream: FakeStream | None) -> Iterator[None]:
        if stream is None:
            yield
            return
        previous = self.current_stream()
        self._local.stream = stream
        try:
            yield
        finally:
            self._local.stream = previous

    def set_stream(self, stream: FakeStream) -> None:
        self._local.stream = stream

    def new_stream(self, device: Any = None, priority: int = 0) -> FakeStream:
        made = FakeStream(self, next(self._handles))
        self.made.append(made)
        return made

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: 1)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)
        monkeypatch.setattr(cuda, "current_stream", self.current_stream)
        monkeypatch.setattr(cuda, "default_stream", lambda device=None: self.default)
        monkeypatch.setattr(cuda, "stream", self.stream)
        monkeypatch.setattr(cuda, "set_stream", self.set_stream)
        monkeypatch.setattr(cuda, "Stream", self.new_stream)
        monkeypatch.setattr(
            cuda, "ExternalStream", lambda handle, device=None: FakeStream(self, handle)
        )
        monkeypatch.setattr(cuda, "Event", lambda *a, **k: FakeEvent(self))
        monkeypatch.setattr(
            cuda, "synchronize", lambda device=None: self.waits.append(("device", None))
        )
        monkeypatch.setattr(cuda, "device", lambda device=None: contextlib.nullcontext())
        for name in ("empty", "zeros", "ones", "full", "tensor"):
            monkeypatch.setattr(torch, name, _factory(getattr(torch, name)))
        monkeypatch.setattr(torch, "from_dlpack", _from_dlpack(torch.from_dlpack))
        real_to = _BASE.to

        def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return _to(real_to, self, args, kwargs)

        def cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return _to(real_to, self, (DEVICE,), {})

        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "cuda", cuda)
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: self)
        return self


def _factory(real: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.pop("device", None)
        if not _on_cuda(device):
            return real(*args, device=device, **kwargs)
        kwargs.pop("pin_memory", None)
        return real(*args, **kwargs).as_subclass(CudaTensor)

    return make


_CUDA_CAPSULES: dict[int, object] = {}
"""DLPack capsules made for fake CUDA memory (:func:`cuda_capsule`), until adopted."""


def cuda_capsule(capsule: object) -> object:
    """Mark a DLPack capsule of the fake device's (host) memory as a CUDA one: adopted whole
    by ``torch.from_dlpack``, it becomes a ``cuda:0`` tensor, as a real capsule whose
    ``DLDevice`` is ``kDLCUDA`` does."""
    _CUDA_CAPSULES[id(capsule)] = capsule
    return capsule


def _from_dlpack(real: Any) -> Any:
    def adopt(external: Any) -> torch.Tensor:
        if not hasattr(external, "__dlpack__"):  # a capsule, adopted as it is
            cuda = _CUDA_CAPSULES.pop(id(external), None) is external
            tensor = real(external)
            return tensor.as_subclass(CudaTensor) if cuda else tensor
        tensor = real(external)  # asks torch.cuda.current_stream for a kDLCUDA producer
        if external.__dlpack_device__()[0] == KDL_CUDA and not isinstance(tensor, CudaTensor):
            return tensor.as_subclass(CudaTensor)
        return tensor

    return adopt


def _to(real_to: Any, tensor: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``Tensor.to``: a host tensor sent to CUDA becomes a :class:`CudaTensor` copy."""
    device, dtype = _to_arguments(args, kwargs)
    if isinstance(tensor, CudaTensor) or not _on_cuda(device):
        return real_to(tensor, *args, **kwargs)
    moved = tensor.clone() if dtype is None else real_to(tensor, dtype).clone()
    return moved.as_subclass(CudaTensor)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    """The fake ``cuda:0`` for one test."""
    return FakeGpu().install(monkeypatch)
