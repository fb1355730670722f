"""``runtime-wheels``, ``provider-cpu``, ``provider-gpu``: ONNX Runtime runs where it was asked to.

ONNX Runtime falls back quietly: a CUDA session that cannot load its
provider runs on the CPU (a TensorRT one, on CUDA), and a GPU provider not handed the pipeline's
stream computes on a stream of its own, unordered with the letterbox that
feeds it. These checks read what the session itself reports
(``get_providers()``, ``get_provider_options()``), and first that the CPU
and GPU wheels of ONNX Runtime are not installed into one folder, where they
overwrite each other's files.
"""

from __future__ import annotations

from typing import Any

from vstream.doctor.report import Failed, Skipped


def runtime_wheels() -> tuple[str, dict[str, Any]]:
    """One ONNX Runtime wheel is installed, or two in different folders, the one imported
    named (a virtual environment's over the system's, say)."""
    from vstream.inference.wheels import runtime_wheels_found, shadowed_runtime_wheel

    found = runtime_wheels_found()
    wheels = {wheel.name: wheel.version for wheel in found}
    listed = ", ".join(map(str, found))
    if not found:
        raise Failed("no ONNX Runtime: pip install 'vstream[cpu]' or 'vstream[gpu]'")
    if len(found) > 1:
        shadowed = shadowed_runtime_wheel(found)
        if shadowed is not None:
            folders = {wheel.name: str(wheel.folder) for wheel in found}
            return shadowed, {"wheels": wheels, "folders": folders}
        raise Failed(
            f"both wheels are installed ({listed}); they overwrite each other's files: "
            "uninstall both, then install one"
        )
    return f"{listed} only", {"wheels": wheels}


def cpu_provider(model: Any) -> tuple[str, dict[str, Any]]:
    """A CPU detector's session runs on ``CPUExecutionProvider`` alone."""
    providers = model.providers
    if providers != ["CPUExecutionProvider"]:
        raise Failed(f"the CPU session runs on {providers}")
    return "CPUExecutionProvider", {"providers": providers}


def gpu_provider(model: Any, provider: str = "auto") -> tuple[str, dict[str, Any]]:
    """A CUDA detector's session runs on the GPU provider asked for (``runtime.provider``:
    ``TensorrtExecutionProvider`` for tensorrt, else ``CUDAExecutionProvider``), on the
    pipeline's stream; for TensorRT, what ORT reports of fp16 and the engine cache too."""
    from vstream.inference.providers import PROVIDER_NAMES

    wanted = PROVIDER_NAMES["tensorrt" if provider == "tensorrt" else "cuda"]
    providers = model.providers
    if not providers or providers[0] != wanted:
        raise Failed(f"the CUDA session runs on {providers}, not {wanted} first")
    options = model.session.get_provider_options().get(wanted, {})
    stream = model.cuda_stream.cuda_stream
    if "user_compute_stream" not in options:
        raise Skipped(
            f"{wanted} runs, but this ONNX Runtime does not report "
            "user_compute_stream: the stream cannot be checked"
        )
    given = str(options["user_compute_stream"]).strip()
    if given in ("", "0"):
        raise Failed("ORT reports no user_compute_stream: it computes on a stream of its own")
    if int(given, 0) != stream:
        raise Failed(f"ORT computes on stream {given}, the pipeline's is {hex(stream)}")
    detail = f"{wanted} on the pipeline's stream {hex(stream)}"
    data: dict[str, Any] = {"providers": providers, "user_compute_stream": hex(stream)}
    if wanted == PROVIDER_NAMES["tensorrt"]:
        reported = {k: options.get(k) for k in ("trt_fp16_enable", "trt_engine_cache_path")}
        fp16 = str(reported["trt_fp16_enable"]).lower() in ("1", "true")
        detail += (
            f", fp16 {'on' if fp16 else 'off'}, engines in {reported['trt_engine_cache_path']}"
        )
        data["tensorrt"] = reported
    return detail, data
