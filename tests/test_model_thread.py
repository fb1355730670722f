"""CUDA graphs are captured once, on one thread, at build time; every later run replays there.

ONNX Runtime keeps captured graphs per host thread and captures in global
mode, so the session routes every run of a graph-enabled model through one
model thread. Checked on the CPU with ONNX Runtime's real session and run
options; the CUDA provider's capture itself needs a GPU (tests/test_gpu.py).
"""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest
import torch
from helpers import model_session
from onnx_models import brightness_model, scale_model

from vstream import Detector, Frame, ModelError, PixelFormat
from vstream.engine import detect_iter
from vstream.inference import session as session_module
from vstream.inference.providers import ProviderChoice, session_providers
from vstream.inference.session import EAGER_GRAPH_ID, ModelThread
from vstream.transfer import HostStaging, to_host, transfers


@pytest.fixture
def graphs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "cuda_graphs_enabled", lambda device, providers: True)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Every ORT run of any session: (thread name, gpu_graph_id)."""
    seen: list[tuple[str, str | None]] = []
    real = ort.InferenceSession.run_with_iobinding

    def spy(self: Any, binding: Any, run_options: Any = None) -> None:
        try:
            graph_id = run_options.get_run_config_entry("gpu_graph_id")
        except (AttributeError, RuntimeError):
            graph_id = None
        seen.append((threading.current_thread().name, graph_id))
        real(self, binding, run_options)

    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", spy)
    return seen


def test_every_graph_is_captured_at_build_on_the_model_thread(
    tmp_path: Path, graphs_on: None, runs: list
) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=4, imgsz=32, in_flight=2
    )
    buckets = [b for buffer in engine.buffers for b in buffer.buckets]
    assert runs == [("model-s", str(b.graph_id)) for b in buckets], "each graph once, at build"
    assert engine._model_thread is not None and engine._model_thread.thread.name == "model-s"


def test_runs_from_any_thread_replay_on_the_model_thread(
    tmp_path: Path, graphs_on: None, runs: list
) -> None:
    detector = Detector(brightness_model(tmp_path / "b.onnx"), device="cpu", batch_size=2)
    built = len(runs)
    replays_before = transfers.implicit_syncs.get("graph_replay", 0)
    frames = [
        Frame(torch.full((48, 64, 3), 40 * i, dtype=torch.uint8), PixelFormat.RGB24, 64, 48)
        for i in range(7)
    ]
    detector.detect(frames[:2])  # the caller's thread
    results = list(detect_iter(detector, [frames]))  # the inference thread, maybe postprocessing's
    assert len(results) == 7
    after_build = runs[built:]
    assert after_build and {thread for thread, _ in after_build} == {"model-b"}
    assert all(graph_id is not None for _, graph_id in after_build)
    replays = transfers.implicit_syncs.get("graph_replay", 0) - replays_before
    assert replays == len(after_build), "ORT's wait after each replay is counted"


def test_eager_runs_skip_the_graph_and_match_the_replay(tmp_path: Path, graphs_on: None) -> None:
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=2, imgsz=32)
    bucket = engine.buffers[0].largest
    engine.input.copy_(torch.rand(engine.input.shape))
    replayed = engine.run(bucket)[0].clone()
    seen: list[str] = []
    real = engine._run_bound

    def spy(bucket: Any, run_options: Any) -> None:
        seen.append(run_options.get_run_config_entry("gpu_graph_id"))
        real(bucket, run_options)

    engine._run_bound = spy
    eager = engine.run(bucket, eager=True)[0]
    assert seen == [EAGER_GRAPH_ID]
    assert torch.equal(replayed, eager) and eager is bucket.outputs[0]


def test_a_model_that_cannot_be_captured_is_refused_in_one_line(
    tmp_path: Path, graphs_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def capture_fails(self: Any, binding: Any, run_options: Any = None) -> None:
        raise RuntimeError(
            "CUDA failure 900: operation not permitted when stream is capturing\nmore detail"
        )

    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", capture_fails)
    with pytest.raises(ModelError) as refused:
        model_session(scale_model(tmp_path / "s.onnx"), device="cpu", imgsz=32)
    message = str(refused.value)
    assert message == (
        "s.onnx: CUDA graphs cannot capture this model (CUDA failure 900: operation not "
        "permitted when stream is capturing); run it without enable_cuda_graph"
    )


def test_a_model_ort_will_not_graph_is_refused_at_load_in_one_line(
    tmp_path: Path, graphs_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORT's own refusal at session creation (its text, from inference_session.cc)."""
    text = (
        "[ONNXRuntimeError] : 1 : FAIL : This session cannot use the CUDA Graph feature as "
        "requested by the user as the model has control flow nodes which can't be supported "
        "by CUDA Graphs."
    )

    def refuses(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(text)

    monkeypatch.setattr(ort.InferenceSession, "__init__", refuses)
    with pytest.raises(ModelError) as refused:
        model_session(scale_model(tmp_path / "s.onnx"), device="cpu", imgsz=32)
    assert str(refused.value) == (
        f"s.onnx: CUDA graphs cannot capture this model ({text}); run it without enable_cuda_graph"
    )


def test_without_graphs_runs_stay_on_the_calling_thread(tmp_path: Path, runs: list) -> None:
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", imgsz=32)
    assert engine._model_thread is None and runs == [], "nothing runs at build"
    engine.run()
    assert runs == [(threading.current_thread().name, None)]


def test_the_model_thread_hands_back_results_and_errors_and_ends_with_its_session(
    tmp_path: Path, graphs_on: None
) -> None:
    thread = ModelThread("t")
    assert thread.call(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        thread.call(lambda: 1 / 0)
    thread.close()
    thread.thread.join(5)
    assert not thread.thread.is_alive()

    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", imgsz=32)
    worker = engine._model_thread.thread
    alive = weakref.ref(engine)
    del engine
    gc.collect()
    assert alive() is None, "the model thread holds nothing of its session"
    worker.join(5)
    assert not worker.is_alive()


def test_ort_gets_the_pipelines_stream_and_keeps_one_the_user_gave() -> None:
    cuda = torch.device("cuda:0")
    ours = session_providers(cuda, None, ["CUDAExecutionProvider", "CPUExecutionProvider"], 777)
    assert ours[0] == ("CUDAExecutionProvider", {"device_id": "0", "user_compute_stream": "777"})
    given = [ProviderChoice("cuda", {"user_compute_stream": "99"})]
    kept = session_providers(cuda, given, ["CUDAExecutionProvider"], 777)
    assert kept[0][1]["user_compute_stream"] == "99"


def test_the_host_waits_only_for_device_results_and_counts_them() -> None:
    waits = transfers.host_waits
    rows = torch.rand((5, 7))
    host = to_host(rows, HostStaging(pinned=False))
    assert host.ctypes.data == rows.data_ptr(), "on the CPU: no copy"
    assert transfers.host_waits == waits, "and no wait"
    transfers.implicit_sync("nonzero")
    transfers.implicit_sync("nonzero")
    assert transfers.implicit_syncs["nonzero"] >= 2
