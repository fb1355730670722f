"""Finding ONNX Runtime and choosing providers and devices."""

from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path

import pytest
import torch

from vstream.doctor.providers import runtime_wheels
from vstream.doctor.report import Failed
from vstream.errors import RuntimeNotInstalledError, VstreamError
from vstream.inference import ProviderChoice
from vstream.inference import wheels as runtime
from vstream.inference.providers import resolve_device, session_providers


def test_installed_wheel_is_named() -> None:
    wheels = runtime.installed_runtime_wheels()
    assert wheels == {"onnxruntime": metadata.version("onnxruntime")}
    assert runtime.describe_runtime().startswith(f"onnxruntime {wheels['onnxruntime']}")
    assert "CPU" in runtime.describe_runtime()


def test_missing_runtime_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "runtime_wheels_found", lambda: [])
    runtime.load_onnxruntime.cache_clear()
    try:
        with pytest.raises(RuntimeNotInstalledError, match=r"pip install 'vstream\[cpu\]'"):
            runtime.load_onnxruntime()
    finally:
        runtime.load_onnxruntime.cache_clear()


def _loading_logs(caplog: pytest.LogCaptureFixture) -> str:
    """What loading ONNX Runtime afresh logs (the loader caches its module)."""
    runtime.load_onnxruntime.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="vstream"):
            runtime.load_onnxruntime()
    finally:
        runtime.load_onnxruntime.cache_clear()
    return caplog.text


def test_both_wheels_installed_is_flagged(monkeypatch, caplog) -> None:
    folder = Path("/site-packages")
    both = [
        runtime.RuntimeWheel(name, "1.0", folder) for name in ("onnxruntime", "onnxruntime-gpu")
    ]
    monkeypatch.setattr(runtime, "runtime_wheels_found", lambda: both)
    logged = _loading_logs(caplog)
    assert "both onnxruntime and onnxruntime-gpu are installed (onnxruntime 1.0, " in logged


def _distribution(folder: Path, name: str, version: str) -> None:
    """A distribution's metadata as pip leaves it, which importlib.metadata reads as it is."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_both_wheels_in_one_folder_fail_the_doctor(tmp_path, monkeypatch) -> None:
    _distribution(tmp_path, "onnxruntime", "1.0")
    _distribution(tmp_path, "onnxruntime-gpu", "1.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = runtime.runtime_wheels_found()
    assert found == [
        runtime.RuntimeWheel("onnxruntime", "1.0", tmp_path.resolve()),
        runtime.RuntimeWheel("onnxruntime-gpu", "1.0", tmp_path.resolve()),
    ]
    assert runtime.shadowed_runtime_wheel(found) is None
    with pytest.raises(Failed, match="overwrite each other's files"):
        runtime_wheels()


def test_a_wheel_in_another_folder_is_named_as_shadowed(tmp_path, monkeypatch, caplog) -> None:
    """The GPU machine's layout: onnxruntime-gpu on PYTHONPATH, the CPU wheel in the
    system's packages. Here the real CPU wheel is found first and the other is shadowed."""
    _distribution(tmp_path, "onnxruntime-gpu", "9.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    real = Path(str(metadata.distribution("onnxruntime").locate_file(""))).resolve()
    detail, evidence = runtime_wheels()
    cpu = metadata.version("onnxruntime")
    assert detail == (
        f"onnxruntime {cpu} is imported from {real}; "
        f"onnxruntime-gpu 9.0 in {tmp_path.resolve()} is shadowed"
    )
    assert evidence["folders"] == {
        "onnxruntime": str(real),
        "onnxruntime-gpu": str(tmp_path.resolve()),
    }
    logged = _loading_logs(caplog)
    assert "shadowed" in logged and "overwrite" not in logged


def test_device_resolution_without_cuda(caplog) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cpu_only = ["CPUExecutionProvider"]
    assert resolve_device("auto", cpu_only) == torch.device("cpu")
    assert caplog.text == "", "auto picks the CPU silently"
    assert resolve_device("cuda:1", cpu_only) == torch.device("cpu")
    assert "device cuda:1 requested but torch sees no CUDA device" in caplog.text
    with pytest.raises(VstreamError, match="unknown device 'gpu'"):
        resolve_device("gpu", cpu_only)


def test_cpu_sessions_use_the_cpu_provider_only() -> None:
    providers = session_providers(
        torch.device("cpu"),
        [
            ProviderChoice("cuda"),
            ProviderChoice("cpu", {"arena_extend_strategy": "kSameAsRequested"}),
        ],
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    assert providers == [("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})]


def test_unknown_provider_name() -> None:
    with pytest.raises(VstreamError, match="unknown execution provider 'openvino'"):
        ProviderChoice("openvino")


class FakeCudaStream:
    """Stands in for ``torch.cuda.Stream``: only its raw handle is read."""

    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


@pytest.mark.parametrize(("handle", "shared"), [(0xBEEF, True), (0, False)])
def test_cuda_provider_gets_device_and_torch_stream(monkeypatch, handle: int, shared: bool) -> None:
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeCudaStream(handle))
    providers = session_providers(
        torch.device("cuda:1"), None, ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    expected = {"device_id": "1"} | ({"user_compute_stream": str(0xBEEF)} if shared else {})
    assert providers == [("CUDAExecutionProvider", expected), ("CPUExecutionProvider", {})]


def test_user_options_reach_the_cuda_provider(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeCudaStream(7))
    choice = ProviderChoice("cuda", {"enable_cuda_graph": "1", "user_compute_stream": "99"})
    providers = session_providers(torch.device("cuda"), [choice], ["CUDAExecutionProvider"])
    assert providers == [
        (
            "CUDAExecutionProvider",
            {"enable_cuda_graph": "1", "user_compute_stream": "99", "device_id": "0"},
        )
    ]


def test_a_detector_takes_a_torch_device_as_users_hold_one() -> None:
    """``Detector(m, device=torch.device("cpu"))`` was refused: "Input should be a valid string"
    (found by a GPU test passing ``torch.device("cuda")``)."""
    from vstream.assets import DEMO_MODEL
    from vstream.detector import Detector

    assert Detector(DEMO_MODEL, device=torch.device("cpu")).device == torch.device("cpu")
    with pytest.raises(VstreamError, match="unknown device 'meta'"):
        Detector(DEMO_MODEL, device=torch.device("meta"))
