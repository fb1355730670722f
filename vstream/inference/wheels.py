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
from importlib import metadata
from pathlib import Path
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


def runtime_wheel_folders() -> dict[str, Path]:
    """Map each installed ONNX Runtime distribution to the folder it was installed into
    (the ``sys.path`` entry holding its metadata and its ``onnxruntime`` package)."""
    folders = {}
    for name in _WHEELS:
        try:
            where = metadata.distribution(name).locate_file("")
        except metadata.PackageNotFoundError:
            continue
        folders[name] = Path(str(where)).resolve()
    return folders


def shadowed_runtime_wheel() -> str | None:
    """With both wheels installed in different folders, which one ``import onnxruntime``
    loads and which it shadows, in one sentence; None when they share a folder (their files
    overwrite each other's) or fewer than two are installed."""
    folders = runtime_wheel_folders()
    if len(folders) < 2 or len(set(folders.values())) < len(folders):
        return None
    spec = importlib.util.find_spec("onnxruntime")
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    versions = installed_runtime_wheels()
    used = [n for n, folder in folders.items() if origin and origin.is_relative_to(folder)]
    if len(used) != 1:  # a folder inside the other's, or the package found elsewhere
        return None
    (name,) = used
    others = "; ".join(
        f"{other} {versions[other]} in {folder} is shadowed"
        for other, folder in folders.items()
        if other != name
    )
    return f"{name} {versions[name]} is imported from {folders[name]}; {others}"


@functools.lru_cache(maxsize=1)
def load_onnxruntime() -> ModuleType:
    """Import ``onnxruntime``, explaining clearly what to install when it is missing."""
    wheels = installed_runtime_wheels()
    if not wheels:
        raise RuntimeNotInstalledError(
            "ONNX Runtime is not installed: pip install 'vstream[cpu]' (CPU) "
            "or 'vstream[gpu]' (NVIDIA GPU)"
        )
    shadowed = shadowed_runtime_wheel() if len(wheels) > 1 else None
    if shadowed is not None:
        log.info("both onnxruntime and onnxruntime-gpu are installed: %s", shadowed)
    elif len(wheels) > 1:
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
