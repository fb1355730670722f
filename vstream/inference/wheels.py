"""Finding the installed ONNX Runtime wheel.

``onnxruntime`` (CPU) and ``onnxruntime-gpu`` install the same Python package,
so having both installed silently breaks one of them. vstream names what it
found instead of failing somewhere deep inside a session.
"""

from __future__ import annotations

import functools
import importlib
import logging
from importlib import metadata
from types import ModuleType

from vstream.errors import RuntimeNotInstalledError

log = logging.getLogger("vstream")

_WHEELS = ("onnxruntime", "onnxruntime-gpu")


def installed_runtime_wheels() -> dict[str, str]:
    """Map each installed ONNX Runtime distribution to its version."""
    found = {}
    for name in _WHEELS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


@functools.lru_cache(maxsize=1)
def load_onnxruntime() -> ModuleType:
    """Import ``onnxruntime``, explaining clearly what to install when it is missing."""
    wheels = installed_runtime_wheels()
    if not wheels:
        raise RuntimeNotInstalledError(
            "ONNX Runtime is not installed: pip install 'vstream[cpu]' (CPU) "
            "or 'vstream[gpu]' (NVIDIA GPU)"
        )
    if len(wheels) > 1:
        log.warning(
            "both onnxruntime and onnxruntime-gpu are installed (%s); they overwrite each "
            "other's files: uninstall both and install only one",
            ", ".join(f"{k} {v}" for k, v in wheels.items()),
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
    wheels = ", ".join(f"{k} {v}" for k, v in installed_runtime_wheels().items())
    providers = ", ".join(
        p.removesuffix("ExecutionProvider") for p in ort.get_available_providers()
    )
    return f"{wheels} (providers: {providers})"
