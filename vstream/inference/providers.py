"""Execution-provider selection for ONNX Runtime.

Users name providers by short names (``tensorrt``, ``cuda``, ``cpu``) with
their options; this module turns that into what ``InferenceSession`` takes and
decides, together with torch, which device the pipeline runs on.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import logging
import sys
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vstream.devices import indexed
from vstream.errors import VstreamError
from vstream.inference.model import ModelSpec, TensorSpec
from vstream.inference.wheels import GPU_PROVIDERS, PROVIDER_NAMES, has_gpu_provider

log = logging.getLogger("vstream")

PROVIDER_TITLES = {"tensorrt": "TensorRT", "cuda": "CUDA", "cpu": "CPU"}


@dataclass(frozen=True)
class ProviderChoice:
    """An execution provider by short name, with its ONNX Runtime options."""

    name: str
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in PROVIDER_NAMES:
            raise VstreamError(
                f"unknown execution provider {self.name!r}; choose from {', '.join(PROVIDER_NAMES)}"
            )

    @property
    def ort_name(self) -> str:
        return PROVIDER_NAMES[self.name]


def resolve_device(requested: str, available_providers: Sequence[str]) -> torch.device:
    """Pick the torch device for ``requested`` (``auto``, ``cpu``, ``cuda`` or ``cuda:N``).

    CUDA is used only when both torch and ONNX Runtime can use it; asking for
    it on a machine without it falls back to the CPU with a one-line notice.
    The CUDA device comes back with its index (``cuda`` is the current device,
    see :mod:`vstream.devices`): tensors report theirs, and every comparison
    with them must be of like with like. A device index this machine lacks is
    an error.
    """
    if requested not in ("auto", "cpu", "cuda") and not requested.startswith("cuda:"):
        raise VstreamError(f"unknown device {requested!r}; use auto, cpu, cuda or cuda:N")
    if requested == "cpu":
        return torch.device("cpu")
    ort_has_cuda = has_gpu_provider(available_providers)
    if torch.cuda.is_available() and ort_has_cuda:
        device = indexed("cuda" if requested == "auto" else requested)
        if device.index >= torch.cuda.device_count():
            raise VstreamError(
                f"device {requested}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        return device
    if requested != "auto":
        missing = (
            "torch sees no CUDA device"
            if not torch.cuda.is_available()
            else ("the installed ONNX Runtime has no CUDA provider (install onnxruntime-gpu)")
        )
        log.warning("device %s requested but %s; running on cpu", requested, missing)
    return torch.device("cpu")


def session_providers(
    device: torch.device,
    choices: Sequence[ProviderChoice] | None,
    available_providers: Sequence[str],
    stream: int | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """The ``providers`` argument for ``InferenceSession`` on ``device``.

    On CUDA the default is CUDA then CPU. The CUDA and TensorRT providers get the
    device index and ``stream`` (the pipeline's stream, see :func:`pipeline_stream`;
    when None, torch's current stream if it is not the default one) as
    ``user_compute_stream``, so ONNX Runtime and the preprocessing are ordered
    on one stream without a sync. A stream the user gave is kept.
    """
    if device.type == "cpu":
        wanted = [c for c in choices or [] if c.name == "cpu"] or [ProviderChoice("cpu")]
    else:
        wanted = list(choices or [ProviderChoice("cuda"), ProviderChoice("cpu")])
    providers = []
    for choice in wanted:
        if choice.ort_name not in available_providers:
            log.warning("execution provider %s is not available; skipped", choice.name)
            continue
        options = dict(choice.options)
        if choice.name in GPU_PROVIDERS:
            options.setdefault("device_id", str(device.index or 0))
            handle = stream if stream is not None else torch.cuda.current_stream(device).cuda_stream
            if handle:  # ONNX Runtime treats stream 0 (torch's default) as "none given"
                options.setdefault("user_compute_stream", str(handle))
        providers.append((choice.ort_name, options))
    if not providers:
        raise VstreamError(f"none of the requested execution providers is available on {device}")
    return providers


def cuda_graphs_enabled(device: torch.device, choices: Sequence[ProviderChoice] | None) -> bool:
    """Whether ONNX Runtime will capture CUDA graphs: the CUDA provider's ``enable_cuda_graph``.

    With graphs on, every batch shape must run with fixed addresses and its
    own ``gpu_graph_id`` run option, which the engine's buckets provide.
    """
    if device.type != "cuda":
        return False
    return any(
        c.name == "cuda" and str(c.options.get("enable_cuda_graph", "0")).lower() in ("1", "true")
        for c in choices or ()
    )


def provider_load_error(ort: Any, provider: str = "cuda") -> str | None:
    """Why ONNX Runtime's library of ``provider`` (``cuda``, ``tensorrt``) does not load here,
    on one line; None when it loads.

    ONNX Runtime only logs this (a warning) and goes on without the provider;
    loading the library the same way names the missing piece (``libcudnn.so.9``,
    ``libcublasLt.so.12`` of another CUDA major than the one installed,
    ``libnvinfer.so.10``, ...).
    """
    stem = f"onnxruntime_providers_{provider}"
    name = f"{stem}.dll" if sys.platform == "win32" else f"lib{stem}.so"
    library = Path(ort.__file__).parent / "capi" / name
    if not library.exists():
        title = PROVIDER_TITLES[provider]
        return f"this onnxruntime {ort.__version__} wheel has no {title} provider library"
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return str(exc).strip().splitlines()[0]
    return None


# -- TensorRT ------------------------------------------------------------------------------------

TENSORRT_EXTRA = "pip install 'vstream[tensorrt]'"
"""What installs the TensorRT libraries ONNX Runtime's TensorRT provider links (pyproject.toml)."""

TENSORRT_LIBRARIES = ("libnvinfer.so.10", "libnvinfer_plugin.so.10", "libnvonnxparser.so.10")
"""TensorRT 10, as onnxruntime-gpu 1.31.1's ``libonnxruntime_providers_tensorrt.so`` asks for it:
it links ``libnvinfer.so.10`` and ``libnvonnxparser.so.10`` (``readelf -d``) and opens
``libnvinfer_plugin.so.10`` by name. In this order, each one's dependencies come first."""


def tensorrt_folder() -> Path | None:
    """Where the ``tensorrt-cu13-libs`` wheel put TensorRT's libraries (``tensorrt_libs``), if
    it is installed; found without importing it."""
    spec = importlib.util.find_spec("tensorrt_libs")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def load_tensorrt() -> str | None:
    """Load TensorRT's libraries into this process for ONNX Runtime's TensorRT provider; None
    when they load, else one line naming the library that does not.

    The wheel puts them in ``site-packages/tensorrt_libs``, where the dynamic
    loader does not look, and ONNX Runtime opens its provider library, which
    links them, by name. A library already loaded answers every later request
    for its name, so loading them from there first is enough; TensorRT's
    builder opens ``libnvinfer_builder_resource`` by name when it builds an
    engine, so that one is loaded too. Without the wheel, the names are looked
    up where the loader looks (``LD_LIBRARY_PATH``, ``ldconfig``): a TensorRT
    installed from NVIDIA's packages.
    """
    folder = tensorrt_folder()
    paths = [str(folder / name) if folder else name for name in TENSORRT_LIBRARIES]
    if folder is not None:
        paths += sorted(str(p) for p in folder.glob("libnvinfer_builder_resource*.so*"))
    for path in paths:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return str(exc).strip().splitlines()[0]
    return None


_NOT_IN_THE_ENGINE = frozenset(
    {"device_id", "user_compute_stream", "trt_engine_cache_path", "trt_timing_cache_path"}
)
"""TensorRT options that do not change the engine TensorRT builds (what its cache folder is
named after leaves them out)."""


def tensorrt_options(
    spec: ModelSpec,
    sizes: Sequence[int],
    size: tuple[int, int],
    cache: Path,
    given: Mapping[str, str],
) -> dict[str, str]:
    """The TensorRT provider's options for a session of ``spec`` at ``size`` in the buckets
    ``sizes``: vstream's defaults, then ``given`` (the user's, which win).

    - fp16 (``trt_fp16_enable``): TensorRT's fast path; detections differ
      slightly from fp32 (README, "TensorRT").
    - Shape profiles of the buckets: every batch size the engine runs lies in
      one profile, min the smallest bucket, opt and max the largest, so
      TensorRT builds the engine once for all of them, instead of again each
      time a batch size outside those seen so far arrives. Only dynamic inputs
      are listed (a model with none has one shape, and needs no profile).
    - The engine cache in a folder of ``cache`` per model content and engine
      options: ONNX Runtime names cached engines after the model's graph,
      not its weights, so a model file retrained and copied over the old one
      would otherwise run the old engine. The timing cache (layer timings,
      valid across models) is shared. Both folders are made here.
    """
    height, width = size
    inputs = [(spec.input, (3, height, width)), *((i, (2,)) for i in spec.size_inputs)]
    dynamic = [(t, rest) for t, rest in inputs if not _static(t)]

    def shapes(batch: int) -> str:
        return ",".join(f"{t.name}:{'x'.join(map(str, (batch, *rest)))}" for t, rest in dynamic)

    options = {"trt_fp16_enable": "True"}
    if dynamic:
        options |= {
            "trt_profile_min_shapes": shapes(sizes[0]),
            "trt_profile_opt_shapes": shapes(sizes[-1]),
            "trt_profile_max_shapes": shapes(sizes[-1]),
        }
    options |= dict(given)
    engines = cache / "engines" / f"{spec.path.stem}-{_engine_key(spec.path, options)}"
    options = {
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": str(engines),
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(cache / "timing"),
    } | options
    for key in ("trt_engine_cache_path", "trt_timing_cache_path"):
        try:
            Path(options[key]).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VstreamError(
                f"TensorRT cache folder {options[key]}: cannot create it ({exc.strerror}); "
                "set runtime.tensorrt_cache to a folder this user can write"
            ) from None
    return options


def _static(tensor: TensorSpec) -> bool:
    return all(isinstance(d, int) and d > 0 for d in tensor.shape)


def _engine_key(path: Path, options: Mapping[str, str]) -> str:
    """16 hex digits of SHA-256 over the model file and the options that shape its engine."""
    digest = hashlib.sha256()
    with path.open("rb") as model:
        while chunk := model.read(1 << 20):
            digest.update(chunk)
    kept = {k: v for k, v in options.items() if k not in _NOT_IN_THE_ENGINE}
    digest.update(json.dumps(kept, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _driver() -> Any:
    """The CUDA driver library (always installed with the driver), or None."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@contextlib.contextmanager
def current_context_kept() -> Iterator[None]:
    """Restore this thread's current CUDA context after a library call that changes it.

    PyNvVideoCodec's ``GetDecoderCaps`` and ``GetEncoderCaps`` create a context
    of their own and leave it current. ONNX Runtime's CUDA provider then makes
    its cuDNN handle in that context, and binding the pipeline's stream (made in
    the primary context) fails with ``CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH``:
    seen on an H100 when ``vstream doctor`` listed the codecs before loading a model.
    """
    driver = _driver()
    if driver is None:
        yield
        return
    current = ctypes.c_void_p()
    known = driver.cuCtxGetCurrent(ctypes.byref(current)) == 0
    try:
        yield
    finally:
        if known:
            driver.cuCtxSetCurrent(current)


def pipeline_stream(device: torch.device, handle: int | None = None) -> Any:
    """The CUDA stream a pipeline queues all its GPU work on, made by vstream (or ``handle``).

    A *blocking* stream (``cuStreamCreate`` with default flags), unlike the
    streams of torch's pool: it stays ordered with the legacy default stream,
    so frames a caller produced there (or a library that knows no streams)
    are complete before the pipeline reads them, without a host wait. Falls
    back to a stream of torch's pool where the driver library cannot be
    called. ``handle`` adopts a stream the user gave ONNX Runtime instead.

    A stream vstream made is destroyed when the returned object goes (every
    session makes one, and ``vstream doctor`` and ``vstream bench`` make many
    sessions): ``cuStreamDestroy`` returns at once and frees the stream once
    the work queued on it is done. Whatever holds the raw handle (ONNX
    Runtime's session, an NVDEC decoder on it) must hold this object too;
    decoders parked for reuse on the stream are dropped with it.
    """
    if handle is not None:
        return torch.cuda.ExternalStream(handle, device=device)
    driver = _driver()
    if driver is not None:
        with torch.cuda.device(device):
            torch.cuda.current_stream(device).query()  # the primary context, current here
            created = ctypes.c_void_p()
            if driver.cuStreamCreate(ctypes.byref(created), 0) == 0 and created.value:
                stream = torch.cuda.ExternalStream(created.value, device=device)
                finalizer = weakref.finalize(stream, _destroy_stream, driver, created.value)
                # Not at exit: the driver and PyNvVideoCodec may be torn down by then (a
                # segfault in weakref's exit hook after `vstream doctor` on an H100); the
                # process's end frees the stream anyway.
                finalizer.atexit = False
                return stream
    log.debug("cuStreamCreate unavailable: the pipeline uses a stream of torch's pool")
    return torch.cuda.Stream(device=device)


def _destroy_stream(driver: Any, handle: int) -> None:
    """Destroy a stream :func:`pipeline_stream` made, and the parked decoders bound to it."""
    nvdec = sys.modules.get("vstream.decoders.nvdec")  # imported only where NVDEC was used
    if nvdec is not None:
        nvdec.DECODERS.drop_stream(handle)
    driver.cuStreamDestroy_v2(ctypes.c_void_p(handle))
