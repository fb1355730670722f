"""What this machine has: driver, CUDA, torch, ONNX Runtime, TensorRT, PyNvVideoCodec, NVDEC, NVENC
and CUDA MPS.

Each item is found on its own and a failure to find one is written into the
report instead of raised: the environment is what a user attaches to an
issue, and it is most needed exactly when something on the machine is
broken. :func:`gpu_problem` is the one question the checks ask of it: can
the GPU path run here at all.
"""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from vstream import __version__
from vstream.errors import first_line


def environment() -> dict[str, Any]:
    """What this machine has, each item found independently (a failure is reported, not raised)."""
    return {
        "vstream": __version__,
        "python": f"{platform.python_version()} ({platform.platform()})",
        "nvidia_driver": _safely(_driver),
        "torch": _safely(_torch_info),
        "onnxruntime": _safely(_ort_info),
        "tensorrt": _safely(_tensorrt_info),
        "pynvvideocodec": _version("PyNvVideoCodec") or "not installed",
        "letterbox_kernel": _safely(_kernel_info),
        "codecs": _safely(_codec_support),
        "cuda_mps": _safely(_mps),
    }


def gpu_problem() -> str | None:
    """Why the GPU path cannot run here, or None when torch and ONNX Runtime both have CUDA."""
    import torch

    from vstream.inference.wheels import load_onnxruntime

    if not torch.cuda.is_available():
        return (
            f"torch sees no CUDA device (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'none'})"
        )
    if "CUDAExecutionProvider" not in load_onnxruntime().get_available_providers():
        return "the installed ONNX Runtime has no CUDA provider (pip install 'vstream[gpu]')"
    return None


def _safely(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception as exc:  # the environment report never fails the command
        return f"unknown ({first_line(exc)})"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> dict[str, Any]:
    found: dict[str, Any] = {}
    proc = Path("/proc/driver/nvidia/version")
    if proc.exists():
        match = re.search(r"Kernel Module\s+([\d.]+)", proc.read_text(errors="replace"))
        found["version"] = match.group(1) if match else "unknown"
    if shutil.which("nvidia-smi"):
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if done.returncode == 0:
            found["gpus"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    import ctypes

    try:
        library = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
        version = ctypes.c_int()
        if library.cuDriverGetVersion(ctypes.byref(version)) == 0:
            found["cuda_driver_api"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        found["cuda_driver_api"] = "libcuda not found (no NVIDIA driver)"
    return found or {"version": "no NVIDIA driver found"}


def _torch_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "version": torch.__version__,
        "built_for_cuda": torch.version.cuda or "no (CPU build)",
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["devices"] = []
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            info["devices"].append(f"{torch.cuda.get_device_name(index)} (sm_{major}{minor})")
    return info


def _ort_info() -> dict[str, Any]:
    from vstream.inference.wheels import load_onnxruntime, runtime_wheels_found

    wheels = runtime_wheels_found()
    info: dict[str, Any] = {
        "wheels": [str(wheel) for wheel in wheels],
        "cpu_and_gpu_wheels_both_installed": len(wheels) > 1,
        "folders": {wheel.name: str(wheel.folder) for wheel in wheels},
    }
    if wheels:
        ort = load_onnxruntime()
        info["version"] = ort.__version__
        info["providers"] = list(ort.get_available_providers())
    return info


def _tensorrt_info() -> dict[str, Any]:
    """Whether ``runtime.provider: tensorrt`` can run here: ONNX Runtime's TensorRT provider,
    TensorRT's libraries loading as a session loads them, and where engines are cached."""
    import ctypes

    from vstream.config.model import tensorrt_cache
    from vstream.inference.providers import (
        PROVIDER_NAMES,
        TENSORRT_EXTRA,
        TENSORRT_LIBRARIES,
        load_tensorrt,
        tensorrt_folder,
    )
    from vstream.inference.wheels import load_onnxruntime

    info: dict[str, Any] = {"cache": str(tensorrt_cache(None))}
    ort = load_onnxruntime()
    if PROVIDER_NAMES["tensorrt"] not in ort.get_available_providers():
        info["provider"] = f"not in this onnxruntime {ort.__version__} (onnxruntime-gpu has it)"
        return info
    info["provider"] = "yes"
    problem = load_tensorrt()
    if problem is not None:
        info["libraries"] = f"do not load: {problem} ({TENSORRT_EXTRA})"
        return info
    info["libraries"] = f"load, from {tensorrt_folder() or 'the loader path'}"
    version = ctypes.CDLL(TENSORRT_LIBRARIES[0]).getInferLibVersion()  # loaded above: by name
    info["version"] = f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    return info


def _kernel_info() -> dict[str, Any] | str:
    """What ``runtime.letterbox_kernel`` is built with: cuda-bindings and its NVRTC (no GPU
    needed to tell)."""
    bindings = _version("cuda-bindings")
    if bindings is None:
        return "cuda-bindings not installed (pip install 'vstream[gpu]')"
    from cuda.bindings import nvrtc

    error, major, minor = nvrtc.nvrtcVersion()
    if int(error) != 0:
        return f"cuda-bindings {bindings}; NVRTC: {getattr(error, 'name', error)}"
    return {"cuda_bindings": bindings, "nvrtc": f"{major}.{minor}"}


def _mps() -> str:
    from vstream.cluster.mps import control_pipe

    pipe = control_pipe()
    return f"running (control pipe {pipe})" if pipe else "not running"


def _codec_support() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "torch sees no CUDA device"}
    if importlib.util.find_spec("PyNvVideoCodec") is None:
        return {"skipped": "PyNvVideoCodec is not installed"}
    from vstream.decoders.nvdec import CODECS, decoder_caps, load_pynvvideocodec
    from vstream.inference.providers import current_context_kept

    nvc = load_pynvvideocodec()
    decode = {}
    for name, member in CODECS.items():
        caps = decoder_caps(nvc, 0, member)
        if caps is None:
            decode[name] = "unknown"
        elif caps.get("supported", 0):
            decode[name] = f"yes (up to {caps.get('width_max', '?')}x{caps.get('height_max', '?')})"
        else:
            decode[name] = "no"
    encode = {}
    query = getattr(nvc, "GetEncoderCaps", None)
    for name in ("h264", "hevc", "av1"):
        if query is None:
            encode[name] = "unknown (no GetEncoderCaps)"
            continue
        try:
            with current_context_kept():  # it makes a context of its own current
                encode[name] = "yes" if query(gpuid=0, codec=name) else "no"
        except Exception as exc:  # the binding raises several types
            encode[name] = f"no ({first_line(exc)})"
    return {"nvdec_8bit_420": decode, "nvenc": encode}
