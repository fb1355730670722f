"""Batch buckets: chosen by size, bound once each, addresses fixed, one CUDA graph id each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import bucket_sessions, model_session
from onnx_models import brightness_model, constant_output_model, nonzero_model, scale_model

from vstream import Detector, Frame, ModelError, PixelFormat
from vstream.engine import detect_iter
from vstream.inference import ProviderChoice
from vstream.inference import session as engine_module
from vstream.inference.buckets import bucket_sizes, session_per_bucket
from vstream.inference.providers import cuda_graphs_enabled


@pytest.mark.parametrize(
    ("max_batch", "fixed", "expected"),
    [(8, None, (1, 2, 4, 8)), (6, None, (1, 2, 4, 6)), (1, None, (1,)), (1, 1, (1,)), (4, 4, (4,))],
)
def test_bucket_sizes(max_batch: int, fixed: int | None, expected: tuple[int, ...]) -> None:
    assert bucket_sizes(max_batch, fixed) == expected


def test_a_partly_filled_batch_uses_the_next_bucket_up(tmp_path: Path) -> None:
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=8, imgsz=32)
    buffer = engine.buffers[0]
    chosen = {n: buffer.bucket_for(n).size for n in range(1, 9)}
    assert chosen == {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 6: 8, 7: 8, 8: 8}
    with pytest.raises(ValueError, match="9 frames do not fit a batch of 8"):
        buffer.bucket_for(9)


class BindingRecorder:
    """Stands in for the buckets' ONNX Runtime sessions: records each run's binding, the
    ``gpu_graph_id`` it carried and the batch sizes each real session ran, then runs the
    binding in its bucket's real session."""

    def __init__(self, model: Any) -> None:
        buckets = [b for buffer in model.buffers for b in buffer.buckets]
        self.ran: list[Any] = []
        self.graph_ids: list[tuple[int, str | None]] = []
        self.sizes_run: dict[int, set[int]] = {}
        """``id(session)``: the batch sizes that real session ran."""
        self._real = {id(b.binding): (b.session, b.size) for b in buckets}
        for bucket in buckets:
            bucket.session = self

    def run_with_iobinding(self, binding: Any, run_options: Any = None) -> None:
        try:
            graph_id = run_options.get_run_config_entry("gpu_graph_id")
        except RuntimeError:  # ONNX Runtime's answer for an entry that was never set
            graph_id = None
        self.ran.append(binding)
        self.graph_ids.append((id(binding), graph_id))
        session, size = self._real[id(binding)]
        self.sizes_run.setdefault(id(session), set()).add(size)
        session.run_with_iobinding(binding, run_options)


def test_each_bucket_reads_its_view_of_one_input_and_keeps_its_addresses(tmp_path: Path) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=4, imgsz=32, in_flight=2
    )
    recorder = BindingRecorder(engine)
    first, second = engine.buffers
    assert first.input.data_ptr() != second.input.data_ptr(), "each buffer owns its input"
    addresses = {}
    for buffer in engine.buffers:
        for bucket in buffer.buckets:
            assert bucket.input.data_ptr() == buffer.input.data_ptr()
            assert tuple(bucket.input.shape) == (bucket.size, 3, 32, 32)
            addresses[id(bucket)] = (bucket.input.data_ptr(), bucket.outputs[0].data_ptr())
    bindings = {id(b.binding) for buf in engine.buffers for b in buf.buckets}
    assert len(bindings) == 2 * 3, "one IO binding per bucket per buffer"

    for round_ in range(20):
        for buffer in engine.buffers:
            buffer.input.copy_(torch.arange(4.0).view(4, 1, 1, 1).expand(4, 3, 32, 32) + round_)
            for bucket in buffer.buckets:
                (out,) = engine.run(bucket)
                assert out is bucket.outputs[0]
                assert recorder.ran[-1] is bucket.binding
                # The bucket saw the first `size` slots of the buffer, as written in place.
                expected = 2 * (torch.arange(float(bucket.size)) + round_)
                assert out[:, 0, 0, 0].tolist() == expected.tolist()
                produced = bucket.binding.get_outputs()[0].data_ptr()
                assert (bucket.input.data_ptr(), produced) == addresses[id(bucket)]


def test_on_cuda_each_bucket_runs_in_a_session_of_its_own_unless_tensorrt_runs_it() -> None:
    for device in (torch.device("cuda"), torch.device("cuda:0"), torch.device("cuda", 1)):
        assert session_per_bucket(device, [])
        assert session_per_bucket(device, ["cuda", "cpu"])
        assert not session_per_bucket(device, ["tensorrt", "cuda", "cpu"])
    assert not session_per_bucket(torch.device("cpu"), [])
    assert not session_per_bucket(torch.device("cpu"), ["cpu"])


@pytest.fixture
def session_per_bucket_on(monkeypatch) -> None:
    """Take the CUDA branch of the sessions on the CPU: real sessions, one per bucket."""
    monkeypatch.setattr(engine_module, "session_per_bucket", lambda device, providers: True)


def test_a_session_per_bucket_sees_one_batch_size_and_computes_the_same(
    tmp_path: Path, session_per_bucket_on
) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=8, imgsz=32, in_flight=2
    )
    bucket_sessions(engine, 4)  # buckets 1, 2, 4 and 8
    recorder = BindingRecorder(engine)
    for round_, frames in enumerate((1, 2, 1, 4, 3, 8, 1, 5, 2)):  # sizes as a live stream's
        buffer = engine.buffers[round_ % 2]
        buffer.input.copy_(torch.arange(8.0).view(8, 1, 1, 1).expand(8, 3, 32, 32) + round_)
        bucket = buffer.bucket_for(frames)
        (out,) = engine.run(bucket)
        expected = 2 * (torch.arange(float(bucket.size)) + round_)
        assert out[:, 0, 0, 0].tolist() == expected.tolist()
    assert sorted(recorder.sizes_run.values(), key=min) == [{1}, {2}, {4}, {8}]


def test_one_session_runs_every_bucket_on_the_cpu(tmp_path: Path) -> None:
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=8, imgsz=32)
    assert {id(b.session) for b in engine.buffers[0].buckets} == {id(engine.session)}


def test_detector_runs_three_frames_in_the_bucket_of_four(tmp_path: Path) -> None:
    detector = Detector(brightness_model(tmp_path / "b.onnx"), device="cpu", batch_size=8)
    recorder = BindingRecorder(detector.model)
    frames = [
        Frame(
            torch.full((48, 64, 3), 80 * i, dtype=torch.uint8), PixelFormat.RGB24, 64, 48, index=i
        )
        for i in range(3)
    ]
    results = detector.detect(frames)
    assert recorder.ran == [detector.model.buffers[0].bucket_for(4).binding]
    assert [r.frame_index for r in results] == [0, 1, 2]
    centres = [(r.detections[0].bbox[0] + r.detections[0].bbox[2]) / 2 for r in results]
    assert centres == sorted(centres) and len(set(centres)) == 3, "each frame got its own box"


def test_fixed_batch_model_has_one_bucket_and_runs_frame_by_frame(tmp_path: Path) -> None:
    raw = np.zeros((1, 6, 10), np.float32)
    detector = Detector(constant_output_model(tmp_path / "m.onnx", raw), device="cpu")
    assert detector.model.bucket_sizes == (1,)
    recorder = BindingRecorder(detector.model)
    frames = [
        Frame(torch.zeros((32, 32, 3), dtype=torch.uint8), PixelFormat.RGB24, 32, 32, index=i)
        for i in range(5)
    ]
    results = list(detect_iter(detector, [frames]))
    assert [r.frame_index for r in results] == list(range(5))
    assert len(recorder.ran) == 5, "one run per frame"


@pytest.fixture
def graphs_on(monkeypatch) -> None:
    """Pretend the CUDA provider captures graphs; the run options still reach a real CPU session."""
    monkeypatch.setattr(engine_module, "cuda_graphs_enabled", lambda device, providers: True)


def test_each_bucket_of_each_buffer_replays_its_own_cuda_graph(tmp_path: Path, graphs_on) -> None:
    engine = model_session(
        scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=4, imgsz=32, in_flight=2
    )
    assert engine.cuda_graphs
    spy = BindingRecorder(engine)
    buckets = [b for buffer in engine.buffers for b in buffer.buckets]
    for _ in range(3):
        for bucket in buckets:
            engine.run(bucket)
    per_binding: dict[int, set[str | None]] = {}
    for binding, graph_id in spy.graph_ids:
        per_binding.setdefault(binding, set()).add(graph_id)
    assert all(len(ids) == 1 for ids in per_binding.values()), "a bucket keeps its graph id"
    ids = [per_binding[id(b.binding)].pop() for b in buckets]
    assert ids == [str(b.graph_id) for b in buckets]
    assert sorted(ids, key=int) == [str(i) for i in range(len(buckets))], "unique, from 0"


def test_without_cuda_graphs_runs_carry_no_graph_id(tmp_path: Path) -> None:
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=2, imgsz=32)
    spy = BindingRecorder(engine)
    for bucket in engine.buffers[0].buckets:
        engine.run(bucket)
    assert [graph_id for _, graph_id in spy.graph_ids] == [None, None]
    assert all(b.graph_id is None for b in engine.buffers[0].buckets)


def test_cuda_graphs_refuse_outputs_of_unknown_size(tmp_path: Path, graphs_on) -> None:
    with pytest.raises(ModelError, match="CUDA graphs need outputs whose size is known"):
        model_session(nonzero_model(tmp_path / "nz.onnx"), device="cpu")


def test_cuda_graphs_follow_the_cuda_provider_option() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    on = [ProviderChoice("cuda", {"enable_cuda_graph": "1"})]
    assert cuda_graphs_enabled(cuda, on)
    assert cuda_graphs_enabled(cuda, [ProviderChoice("cuda", {"enable_cuda_graph": "True"})])
    assert not cuda_graphs_enabled(cuda, [ProviderChoice("cuda")])
    assert not cuda_graphs_enabled(cuda, None)
    assert not cuda_graphs_enabled(cpu, on), "the CPU provider has no graphs"


def test_run_options_are_real_onnxruntime_objects(tmp_path: Path, graphs_on) -> None:
    engine = model_session(scale_model(tmp_path / "s.onnx"), device="cpu", batch_size=2, imgsz=32)
    for bucket in engine.buffers[0].buckets:
        assert isinstance(bucket.run_options, ort.RunOptions)
        assert bucket.run_options.get_run_config_entry("gpu_graph_id") == str(bucket.graph_id)
