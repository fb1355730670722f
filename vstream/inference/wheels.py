"""Finding the installed ONNX Runtime wheel.

``onnxruntime`` (CPU) and ``onnxruntime-gpu`` install the same Python package,
so both installed into one folder silently breaks one of them. Installed into
different folders (a virtual environment over the system's packages, a
``PYTHONPATH`` entry), they leave each other alone and the one found first on
``sys.path`` is imported. vstream names what it found instead of failing
somewhere deep inside a session.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

from vstream.errors import RuntimeNotInstalledError

log = logging.getLogger("vstream")

_WHEELS = ("onnxruntime", "onnxruntime-gpu")

PROVIDER_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
"""ONNX Runtime's name of each execution provider a config may ask for."""
GPU_PROVIDERS = ("tensorrt", "cuda")


def has_gpu_provider(available: Sequence[str]) -> bool:
    """Whether ONNX Runtime's ``available`` providers run on a GPU (no torch asked)."""
    return any(PROVIDER_NAMES[p] in available for p in GPU_PROVIDERS)


@dataclass(frozen=True)
class RuntimeWheel:
    """One installed ONNX Runtime distribution."""

    name: str
    version: str
    folder: Path
    """The ``sys.path`` entry holding its metadata and its ``onnxruntime`` package."""

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


def runtime_wheels_found() -> list[RuntimeWheel]:
    """Each installed ONNX Runtime distribution, its metadata read once."""
    found = []
    for name in _WHEELS:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        folder = Path(str(distribution.locate_file(""))).resolve()
        found.append(RuntimeWheel(name, distribution.version, folder))
    return found


def installed_runtime_wheels() -> dict[str, str]:
    """Map each installed ONNX Runtime distribution to its version."""
    return {wheel.name: wheel.version for wheel in runtime_wheels_found()}


def shadowed_runtime_wheel(wheels: list[RuntimeWheel]) -> str | None:
    """With both ``wheels`` installed in different folders, which one ``import onnxruntime``
    loads and which it shadows, in one sentence; None when they share a folder (their files
    overwrite each other's) or fewer than two are installed."""
    if len(wheels) < 2 or len({wheel.folder for wheel in wheels}) < len(wheels):
        return None
    spec = importlib.util.find_spec("onnxruntime")
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    used = [wheel for wheel in wheels if origin and origin.is_relative_to(wheel.folder)]
    if len(used) != 1:  # a folder inside the other's, or the package found elsewhere
        return None
    (imported,) = used
    others = "; ".join(
        f"{other} in {other.folder} is shadowed" for other in wheels if other != imported
    )
    return f"{imported} is imported from {imported.folder}; {others}"


@functools.lru_cache(maxsize=1)
def load_onnxruntime() -> ModuleType:
    """Import ``onnxruntime``, explaining clearly what to install when it is missing."""
    wheels = runtime_wheels_found()
    if not wheels:
        raise RuntimeNotInstalledError(
            "ONNX Runtime is not installed: pip install 'vstream[cpu]' (CPU) "
            "or 'vstream[gpu]' (NVIDIA GPU)"
        )
    shadowed = shadowed_runtime_wheel(wheels)
    if shadowed is not None:
        log.info("both onnxruntime and onnxruntime-gpu are installed: %s", shadowed)
    elif len(wheels) > 1:
        log.warning(
            "both onnxruntime and onnxruntime-gpu are installed (%s); they overwrite each "
            "other's files: uninstall both and install only one",
            ", ".join(map(str, wheels)),
        )
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as exc:
        raise RuntimeNotInstalledError(
            f"ONNX Runtime is installed but fails to import: {exc}"
        ) from exc


def describe_runtime() -> str:
    """One line naming the ONNX Runtime wheel in use and its execution providers."""
    ort = load_onnxruntime()
    wheels = ", ".join(map(str, runtime_wheels_found()))
    providers = ", ".join(
        p.removesuffix("ExecutionProvider") for p in ort.get_available_providers()
    )
    return f"{wheels} (providers: {providers})"
