"""``vstream doctor``, the real command: without a GPU the GPU checks skip, the CPU ones pass."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import run_cli, tiny_detector, write_video

from vstream import decoders
from vstream.assets import DEMO_MODEL, SAMPLE_VIDEO
from vstream.cli import main
from vstream.detector import Detector
from vstream.doctor import throughput
from vstream.doctor.accuracy import demo_accuracy, match_records
from vstream.doctor.report import Failed, Skipped
from vstream.doctor.runner import CHECKS, Doctor, DoctorOptions
from vstream.doctor.zero_copy import zero_copy

CPU_CHECKS = {
    "runtime-wheels", "provider-cpu", "zero-copy-cpu", "demo-cpu", "reference-cpu", "fps-cpu"
}  # fmt: skip
GPU_CHECKS = {name for name, _, needs_gpu in CHECKS if needs_gpu}
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@no_gpu
def test_without_a_gpu_the_gpu_checks_skip_and_the_cpu_checks_pass(tmp_path: Path) -> None:
    report = tmp_path / "doctor.json"
    done = run_cli("doctor", "--json", "--report", report, "--frames", "40", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert json.loads(report.read_text()) == document, "the report file is what was printed"
    status = {c["name"]: c for c in document["checks"]}
    assert set(status) == CPU_CHECKS | GPU_CHECKS
    for name in CPU_CHECKS:
        assert status[name]["status"] == "pass", status[name]
    for name in GPU_CHECKS:
        assert status[name]["status"] == "skip", status[name]
        assert status[name]["detail"].startswith("no usable GPU: torch sees no CUDA device")
    zero_copy = status["zero-copy-cpu"]["data"]
    assert zero_copy["frames"] == 40 and zero_copy["decoder"] == "cpu"
    assert zero_copy["model_runs"] >= 10 and zero_copy["output_addresses_reported_by_ort"]
    assert status["demo-cpu"]["data"]["map50"] >= 0.9
    assert set(status["fps-cpu"]["data"]) == {
        "decode",
        "preprocess",
        "inference",
        "postprocess",
        "end_to_end",
    }
    env = document["environment"]
    assert env["torch"]["cuda_available"] is False
    assert env["onnxruntime"]["cpu_and_gpu_wheels_both_installed"] is False
    assert env["codecs"] == {"skipped": "torch sees no CUDA device"}
    from cuda.bindings import nvrtc  # torch's CUDA wheels bring it, here too

    major, minor = nvrtc.nvrtcVersion()[1:]
    assert env["letterbox_kernel"]["nvrtc"] == f"{major}.{minor}"
    assert document["summary"] == {
        "passed": len(CPU_CHECKS), "failed": 0, "skipped": len(GPU_CHECKS)
    }  # fmt: skip
    reference = status["reference-cpu"]["data"]
    assert len(reference) == 3 and all(
        v["recall"] >= 0.99 and v["precision"] >= 0.99 for v in reference.values()
    ), reference
    assert document["exit_code"] == 0


@no_gpu
def test_the_table_says_what_ran_and_what_was_skipped_and_why(capsys) -> None:
    assert main(["doctor", "--quick", "--frames", "8"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("vstream doctor ")
    assert "environment" in lines and "checks" in lines
    assert any(line.split()[:2] == ["PASS", "zero-copy-cpu"] for line in lines)
    assert any(
        line.split()[:2] == ["SKIP", "provider-gpu"] and "no usable GPU" in line for line in lines
    )
    assert any(line.split()[:3] == ["SKIP", "demo-cpu", "skipped"] for line in lines)
    assert any(line.split()[:3] == ["SKIP", "reference-cpu", "skipped"] for line in lines)
    # --quick runs the three quick CPU checks; every other one is skipped, with its reason.
    skipped = len(CHECKS) - 3
    assert lines[-1] == f"3 passed, 0 failed, {skipped} skipped (every check that ran passed)"
    assert "vstream doctor: zero-copy-cpu" in err, "progress goes to stderr"


@no_gpu
def test_asking_for_cuda_without_a_gpu_fails_the_gpu_checks(capsys) -> None:
    assert main(["doctor", "--quick", "--device", "cuda", "--json", "--frames", "8"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["provider-gpu"]["status"] == "fail"
    assert checks["provider-gpu"]["detail"].startswith("CUDA was asked for, but torch sees no")
    assert checks["zero-copy-cpu"]["status"] == "pass"


def test_one_failed_check_makes_the_exit_status_1(monkeypatch, capsys) -> None:
    def broken(self: object) -> None:
        raise Failed("both wheels are installed")

    def crashing(self: object) -> None:
        raise RuntimeError("something unexpected\nwith a second line")

    monkeypatch.setattr(Doctor, "check_runtime_wheels", broken)
    monkeypatch.setattr(Doctor, "check_provider_cpu", crashing)
    assert main(["doctor", "--quick", "--device", "cpu", "--json", "--frames", "4"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["runtime-wheels"] == checks["runtime-wheels"] | {
        "status": "fail",
        "detail": "both wheels are installed",
    }
    assert checks["provider-cpu"]["status"] == "fail"
    assert checks["provider-cpu"]["detail"] == "RuntimeError: something unexpected"
    assert checks["zero-copy-cpu"]["status"] == "pass", "the other checks still ran"
    assert checks["provider-gpu"]["detail"] == "no usable GPU: --device cpu"


def test_a_model_that_fixes_its_batch_is_checked_at_its_batch(tmp_path: Path, capsys) -> None:
    """Ultralytics exports a batch of 1 by default: the checks run it at 1, not fail on 4."""
    model = tiny_detector(tmp_path / "tiny.onnx")
    argv = ["doctor", "--quick", "--device", "cpu", "--json", "--frames", "8", "--model", model]
    assert main([str(arg) for arg in argv]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["provider-cpu"]["status"] == "pass", checks["provider-cpu"]
    assert checks["zero-copy-cpu"]["status"] == "pass", checks["zero-copy-cpu"]


def test_the_demo_pair_given_by_relative_paths_is_scored(monkeypatch) -> None:
    """The bundled demo named relative to the working folder is still the bundled demo:
    scored against its ground truth (no records: mAP 0, failed), not skipped."""
    monkeypatch.chdir(DEMO_MODEL.parent)
    video = Path(os.path.relpath(SAMPLE_VIDEO))
    with pytest.raises(Failed, match=r"< 0\.9"):
        demo_accuracy([], Path(DEMO_MODEL.name), video)


def test_the_end_to_end_figure_leaves_out_the_engine_start_and_stop(
    tmp_path: Path, monkeypatch
) -> None:
    """On a clock that only the engine moves: 100 s to start and to stop, 1 s a result.
    Timed as the bench times it, from the end of the warm-up to the last result: 1 fps."""
    from vstream.engine import pipeline

    clock = [0.0]
    real = pipeline.detect_iter

    def slow_to_start_and_stop(*args: object, **options: object):
        clock[0] += 100
        try:
            for result in real(*args, **options):
                clock[0] += 1
                yield result
        finally:
            clock[0] += 100

    monkeypatch.setattr(pipeline, "detect_iter", slow_to_start_and_stop)
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    detector = Detector(tiny_detector(tmp_path / "tiny.onnx"), device="cpu")
    video = write_video(tmp_path / "clip.mp4", frames=10)
    assert throughput.throughput(detector, video, 6)["end_to_end"] == 1.0


def test_the_zero_copy_check_catches_a_buffer_that_is_not_the_bound_one() -> None:
    """A negative control: the check is not vacuous."""
    detector = Detector(DEMO_MODEL, device="cpu", batch_size=4)
    zero_copy(detector, SAMPLE_VIDEO, 8)  # as built: passes
    detector.letterboxers[1].input = detector.letterboxers[1].input.clone()
    with pytest.raises(Failed, match="buffer 1 bucket 1: ORT does not compute on what the let"):
        zero_copy(detector, SAMPLE_VIDEO, 8)


def test_the_zero_copy_check_asks_onnx_runtime_not_vstreams_own_record() -> None:
    """A binding moved behind vstream's back (its records unchanged) fails the check (issue 20)."""
    detector = Detector(DEMO_MODEL, device="cpu", batch_size=4)
    model = detector.model
    bucket = model.buffers[0].largest
    elsewhere = bucket.input.clone()
    bucket.binding.bind_input(
        model.spec.input.name,
        "cpu",
        0,
        model.spec.input.numpy_dtype,
        tuple(elsewhere.shape),
        elsewhere.data_ptr(),
    )
    with pytest.raises(Failed, match="buffer 0 bucket 4: ORT does not compute on what the let"):
        zero_copy(detector, SAMPLE_VIDEO, 8)


def _doctor_with_a_cuda_detector(monkeypatch, options: dict, nvdec=(True, "ok"), device="auto"):
    """A Doctor whose CUDA detector reports ``options`` for the CUDA provider (no GPU here)."""
    session = SimpleNamespace(get_provider_options=lambda: {"CUDAExecutionProvider": options})
    model = SimpleNamespace(
        providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
        session=session,
        cuda_stream=SimpleNamespace(cuda_stream=0x7F00),
    )
    doctor = Doctor(DoctorOptions(device=device))
    doctor._gpu_detector = SimpleNamespace(model=model, device=torch.device("cuda", 0))
    monkeypatch.setattr(decoders, "nvdec_status", lambda device: nvdec)
    return doctor


@pytest.mark.parametrize(
    ("options", "outcome", "message"),
    [
        ({"user_compute_stream": "0"}, Failed, "ORT reports no user_compute_stream"),
        ({"user_compute_stream": ""}, Failed, "ORT reports no user_compute_stream"),
        ({"user_compute_stream": "12"}, Failed, "ORT computes on stream 12, the pipeline's"),
        ({}, Skipped, "does not report user_compute_stream"),
    ],
)
def test_provider_gpu_passes_only_on_the_stream_onnx_runtime_reports(
    monkeypatch, options: dict, outcome: type, message: str
) -> None:
    """None or 0 is exactly the broken case: ORT on a stream of its own (issue 20)."""
    doctor = _doctor_with_a_cuda_detector(monkeypatch, options)
    with pytest.raises(outcome, match=message):
        doctor.check_provider_gpu()
    doctor = _doctor_with_a_cuda_detector(monkeypatch, {"user_compute_stream": str(0x7F00)})
    assert doctor.check_provider_gpu()[0] == "CUDAExecutionProvider on the pipeline's stream 0x7f00"


@pytest.mark.parametrize("name", ["zero_copy_gpu", "copies_gpu", "demo_gpu"])
def test_gpu_path_checks_need_nvdec_and_never_pass_with_the_cpu_decoder(monkeypatch, name) -> None:
    broken = (False, "PyNvVideoCodec cannot be imported: libnvidia-encode.so.1")
    doctor = _doctor_with_a_cuda_detector(monkeypatch, {}, nvdec=broken)
    with pytest.raises(Skipped, match=r"NVDEC does not work here \(PyNvVideoCodec"):
        getattr(doctor, f"check_{name}")()
    strict = _doctor_with_a_cuda_detector(monkeypatch, {}, nvdec=broken, device="cuda")
    with pytest.raises(Failed, match="NVDEC does not work here"):
        getattr(strict, f"check_{name}")()


def test_boxes_are_matched_per_frame_and_class_at_the_iou_asked() -> None:
    def record(frame: int, *boxes: tuple[float, float, float, float, int]) -> dict:
        detections = [{"bbox": list(b[:4]), "class_id": b[4]} for b in boxes]
        return {"stream": "s", "frame": frame, "detections": detections}

    cpu = [record(0, (0, 0, 100, 100, 1), (200, 200, 300, 300, 2)), record(1, (0, 0, 50, 50, 0))]
    assert match_records(cpu, cpu) == (3, 3)
    shifted = [record(0, (2, 0, 102, 100, 1), (200, 200, 300, 300, 2)), record(1)]
    assert match_records(cpu, shifted) == (2, 3), "IoU 0.96 matches; a missing box does not"
    moved = [record(0, (20, 0, 120, 100, 1), (200, 200, 300, 300, 3)), record(1, (0, 0, 50, 50, 0))]
    assert match_records(cpu, moved) == (1, 3), "IoU 0.67 and another class do not match"
    extra = [*cpu[:1], record(1, (0, 0, 50, 50, 0), (60, 60, 90, 90, 0))]
    assert match_records(cpu, extra) == (3, 4), "an extra box counts against the match"


def test_the_command_module_imports_nothing_heavy() -> None:
    source = Path(__file__).resolve().parents[1] / "vstream" / "cli" / "doctor.py"
    tree = ast.parse(source.read_text())
    top_level = {
        alias.name.split(".")[0] if isinstance(node, ast.Import) else (node.module or "")
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert top_level <= {"__future__", "argparse", "json", "sys", "pathlib", "vstream.cli.args"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--frames", "0"], "argument --frames: must be a positive integer, got 0"),
        (["--frames", "10001"], "argument --frames: must be between 1 and 10000, got 10001"),
        (["--model", "missing.onnx"], "--model missing.onnx: no such file"),
        (["--video", "missing.mp4"], "--video missing.mp4: no such file"),
        (["--report", "no/such/folder/r.json"], "--report no/such/folder/r.json: its folder"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2_before_anything_runs(
    argv: list[str], message: str, capsys
) -> None:
    try:
        status = main(["doctor", *argv])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    (line,) = err.splitlines()
    assert message in line and line.startswith("vstream: error: ")
