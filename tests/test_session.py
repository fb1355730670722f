"""IO binding is zero-copy: ONNX Runtime reads and writes the tensors the pipeline owns."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from fakes.fake_cuda import FakeGpu
from helpers import model_session
from onnx import TensorProto
from onnx_models import (
    constant_output_model,
    flatten_model,
    nonzero_model,
    partly_inferred_model,
    scale_model,
)

from vstream import Detector, Frame, ModelError, PixelFormat, VstreamError
from vstream.devices import indexed, same_device
from vstream.inference import providers
from vstream.inference.model import infer_output_shapes
from vstream.inference.providers import resolve_device


@pytest.fixture
def bound_pointers(monkeypatch) -> dict[str, list[int]]:
    """Record the buffer addresses handed to ONNX Runtime, then bind them for real."""
    seen: dict[str, list[int]] = {"input": [], "output": []}
    real_input, real_output = ort.IOBinding.bind_input, ort.IOBinding.bind_output

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        seen["input"].append(buffer_ptr)
        return real_input(self, name, device_type, device_id, element_type, shape, buffer_ptr)

    def bind_output(
        self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None
    ):
        seen["output"].append(buffer_ptr)
        return real_output(self, name, device_type, device_id, element_type, shape, buffer_ptr)

    monkeypatch.setattr(ort.IOBinding, "bind_input", bind_input)
    monkeypatch.setattr(ort.IOBinding, "bind_output", bind_output)
    return seen


def test_input_and_output_are_bound_by_address(tmp_path: Path, bound_pointers) -> None:
    engine = model_session(
        scale_model(tmp_path / "scale.onnx"), device="cpu", batch_size=2, imgsz=64
    )
    # One binding per batch bucket (2 and 1), both at the addresses of the one input and output.
    assert engine.bucket_sizes == (1, 2)
    assert bound_pointers["input"] == [engine.input.data_ptr()] * 2
    assert bound_pointers["output"] == [engine.outputs[0].data_ptr()] * 2
    # ONNX Runtime really reads our buffer: change it in place, run, see the change.
    for value in (0.25, 0.5):
        engine.input.fill_(value)
        (out,) = engine.run()
        assert out is engine.outputs[0]
        assert torch.all(out == 2 * value)
    assert engine.binding.get_outputs()[0].data_ptr() == engine.outputs[0].data_ptr()


def test_preprocessing_writes_into_the_bound_buffer(tmp_path: Path, bound_pointers) -> None:
    raw = np.zeros((1, 6, 10), np.float32)
    detector = Detector(constant_output_model(tmp_path / "m.onnx", raw), device="cpu")
    assert detector.letterboxer.input is detector.model.input
    # One input per batch in flight, each letterboxed into where its binding points.
    assert len(detector.letterboxers) == len(detector.model.buffers) == detector.plan.buffers
    assert bound_pointers["input"] == [lb.input.data_ptr() for lb in detector.letterboxers]


def test_addresses_stay_fixed_over_100_frames(tmp_path: Path, bound_pointers) -> None:
    raw = np.zeros((1, 6, 10), np.float32)
    raw[0, :4, 0] = [50, 50, 20, 20]
    raw[0, 4, 0] = 0.9
    detector = Detector(constant_output_model(tmp_path / "m.onnx", raw), device="cpu")
    engine = detector.model
    input_ptr, output_ptr = engine.input.data_ptr(), engine.outputs[0].data_ptr()
    output_tensor = engine.outputs[0]
    for i in range(100):
        frame = Frame(
            torch.full((240, 320, 3), i, dtype=torch.uint8), PixelFormat.RGB24, 320, 240, index=i
        )
        (result,) = detector.detect([frame])
        assert result.frame_index == i and len(result.detections) == 1
        assert engine.input.data_ptr() == input_ptr
        assert engine.outputs[0] is output_tensor
        assert engine.binding.get_outputs()[0].data_ptr() == output_ptr
    buffers = len(engine.buffers)
    assert len(bound_pointers["input"]) == buffers, "bound once per buffer, never rebound"
    assert len(bound_pointers["output"]) == buffers


def test_outputs_sized_by_shape_inference_are_preallocated(tmp_path: Path, bound_pointers) -> None:
    engine = model_session(
        flatten_model(tmp_path / "flat.onnx"), device="cpu", batch_size=2, imgsz=32
    )
    assert isinstance(engine.spec.outputs[0].shape[1], str), "the model itself does not say"
    assert engine.outputs[0].shape == (2, 3 * 32 * 32)
    assert engine.buffers[0].bucket_for(1).outputs[0].shape == (1, 3 * 32 * 32)
    assert bound_pointers["output"] == [engine.outputs[0].data_ptr()] * 2
    engine.input.copy_(torch.arange(2.0).view(2, 1, 1, 1).expand(2, 3, 32, 32))
    (out,) = engine.run()
    assert out.data_ptr() == engine.outputs[0].data_ptr()
    assert out[:, 0].tolist() == [0.0, 1.0]


def test_outputs_partly_sized_by_inference_take_the_batch_from_the_input(
    tmp_path: Path, bound_pointers
) -> None:
    model = partly_inferred_model(tmp_path / "partly.onnx")
    assert infer_output_shapes(model, "images", (2, 3, 20, 32))["output0"] == ("batch", 6, 10)
    engine = model_session(model, device="cpu", batch_size=2)
    assert [b.outputs[0].shape for b in engine.buffers[0].buckets] == [(1, 6, 10), (2, 6, 10)]
    assert bound_pointers["output"] == [engine.outputs[0].data_ptr()] * 2
    engine.input.fill_(0.5)
    (out,) = engine.run()
    assert out is engine.outputs[0] and torch.allclose(out, torch.full((2, 6, 10), 0.5))


def test_truly_dynamic_outputs_are_adopted_without_copy(tmp_path: Path, bound_pointers) -> None:
    engine = model_session(nonzero_model(tmp_path / "nz.onnx"), device="cpu")
    assert engine.outputs == [None] and bound_pointers["output"] == [None]
    engine.input.zero_()
    engine.input[0, 1, 2, 3] = 1.0
    (out,) = engine.run()
    assert out.tolist() == [[0], [1], [2], [3]]
    assert out.data_ptr() == engine.binding.get_outputs()[0].data_ptr()


def test_input_dtype_comes_from_the_model(tmp_path: Path) -> None:
    engine = model_session(
        scale_model(tmp_path / "half.onnx", elem_type=TensorProto.FLOAT16), device="cpu", imgsz=32
    )
    assert engine.input.dtype == torch.float16
    engine.input.fill_(1.5)
    assert torch.all(engine.run()[0] == 3.0)


def test_dynamic_batch_and_size(tmp_path: Path) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=4, imgsz=(96, 160)
    )
    assert engine.input.shape == (4, 3, 96, 160)
    assert engine.outputs[0].shape == (4, 3, 96, 160)


def test_fixed_model_sizes_are_enforced(tmp_path: Path) -> None:
    model = constant_output_model(tmp_path / "m.onnx", np.zeros((1, 6, 10), np.float32))
    assert model_session(model, device="cpu").input.shape == (1, 3, 320, 320)
    with pytest.raises(ModelError, match="fixed 320x320 input; imgsz 640x640 does not fit"):
        model_session(model, device="cpu", imgsz=640)
    with pytest.raises(ModelError, match="fixed batch of 1; batch size 4 does not fit"):
        model_session(model, device="cpu", batch_size=4)


def test_imgsz_must_be_a_multiple_of_the_stride(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="multiples of the model stride 32"):
        model_session(scale_model(tmp_path / "s.onnx"), device="cpu", imgsz=300)


def test_cuda_request_falls_back_to_cpu_with_a_notice(tmp_path: Path, caplog) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the fallback is for machines without it")
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cuda", imgsz=32)
    assert engine.device == torch.device("cpu")
    assert "device cuda requested but" in caplog.text and "running on cpu" in caplog.text


def test_missing_and_corrupt_models_are_model_errors(tmp_path: Path) -> None:
    with pytest.raises(VstreamError, match=r"model\.path: model file not found"):
        model_session(tmp_path / "nope.onnx", device="cpu")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model" * 100)
    with pytest.raises(ModelError, match=r"cannot load model .*junk\.onnx"):
        model_session(junk, device="cpu")


def test_runs_on_different_buffers_from_several_threads_at_once_keep_their_own_outputs(
    tmp_path: Path,
) -> None:
    """Concurrent runs (the throughput stages' inference threads): no run sees another's data."""
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=2, imgsz=64, in_flight=4
    )
    start = threading.Barrier(len(engine.buffers))
    wrong: list[str] = []

    def work(index: int) -> None:
        buffer = engine.buffers[index]
        start.wait()
        for step in range(40):
            value = index * 100 + step
            buffer.input.fill_(value)
            (out,) = engine.run(buffer.largest)
            if not (out is buffer.largest.outputs[0] and torch.all(out == 2 * value)):
                wrong.append(f"buffer {index} step {step}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(engine.buffers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads) and wrong == []


# -- CUDA, on a fake cuda:0 (fakes.fake_cuda) ------------------------------------------------------

BOTH = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_cuda_resolves_to_the_current_device_with_its_index(monkeypatch) -> None:
    """Tensors report cuda:0, and torch.device("cuda:0") != torch.device("cuda") (issue 20)."""
    FakeGpu().install(monkeypatch)
    assert resolve_device("auto", BOTH) == torch.device("cuda", 0)
    assert resolve_device("cuda", BOTH) == torch.device("cuda", 0)
    assert resolve_device("cuda:0", BOTH) == torch.device("cuda", 0)
    with pytest.raises(VstreamError, match="device cuda:3: this machine has 1 CUDA device"):
        resolve_device("cuda:3", BOTH)
    assert same_device("cuda", torch.device("cuda", 0)) and not same_device("cuda", "cpu")
    assert indexed("cpu") == torch.device("cpu")


def test_a_cuda_session_onnx_runtime_built_on_the_cpu_is_refused_with_one_line(
    tmp_path: Path, monkeypatch
) -> None:
    """ORT lists CUDA, then fails to load its libraries and quietly builds a CPU session.

    Here the wheel is the CPU one: it lists CUDA because we say so, and builds
    the session on the CPU (warning "Specified provider ... is not in available
    provider names"), as a GPU wheel without its CUDA libraries does.
    """
    FakeGpu().install(monkeypatch)
    monkeypatch.setattr(ort, "get_available_providers", lambda: BOTH)
    with (
        pytest.warns(UserWarning, match="CUDAExecutionProvider"),
        pytest.raises(ModelError) as refused,
    ):
        model_session(scale_model(tmp_path / "s.onnx"), device="cuda", imgsz=32)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("s.onnx: ONNX Runtime did not start its CUDA provider on cuda:0 (")
    assert "has no CUDA provider library" in line
    assert line.endswith(
        "the session would run on CPUExecutionProvider: install the matching "
        "wheels (README, 'The GPU path') or set runtime.device: cpu"
    )


class FakeDriver:
    """``libcuda``'s stream and current-context calls, called through ctypes as vstream does:
    ``cuStreamCreate`` writes a handle, destroy records it; ``cuCtxGetCurrent`` writes the
    thread's context (NULL until one is set) and ``cuCtxSetCurrent`` sets it, both returning
    CUDA_SUCCESS (0), as the driver API documents."""

    def __init__(self) -> None:
        self.destroyed: list[int] = []
        self.context: int | None = None

    def cuCtxGetCurrent(self, pointer) -> int:
        pointer._obj.value = self.context
        return 0

    def cuCtxSetCurrent(self, context) -> int:
        self.context = context.value
        return 0

    def cuStreamCreate(self, pointer, flags: int) -> int:
        pointer._obj.value = 0xABC0
        return 0

    def cuStreamDestroy_v2(self, handle) -> int:
        self.destroyed.append(handle.value)
        return 0


def test_a_stream_vstream_made_is_destroyed_with_its_parked_decoders(monkeypatch) -> None:
    from vstream.decoders import nvdec
    from vstream.frame import PixelFormat

    FakeGpu().install(monkeypatch)
    driver = FakeDriver()
    monkeypatch.setattr(providers, "_driver", lambda: driver)
    stream = providers.pipeline_stream(torch.device("cuda", 0))
    assert stream.cuda_stream == 0xABC0
    parked = nvdec._Session(object(), (0, 0, 0xABC0, "H264", PixelFormat.NV12), (64, 48))
    other = nvdec._Session(object(), (0, 0, 0xDEF0, "H264", PixelFormat.NV12), (64, 48))
    nvdec.DECODERS.give(parked)
    nvdec.DECODERS.give(other)
    try:
        del stream
        gc.collect()
        assert driver.destroyed == [0xABC0], "one stream per session no longer leaks"
        assert len(nvdec.DECODERS) == 1 and parked.decoder is None, "its decoders go with it"
    finally:
        nvdec.DECODERS.clear()
