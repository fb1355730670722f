"""The ``vstream`` command end to end, as a user runs it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import HANG, run_cli, write_video
from onnx_models import constant_output_model, family_model

from vstream import assets
from vstream.evaluation import evaluate

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

GROUND_TRUTH = json.loads(assets.SAMPLE_GROUND_TRUTH.read_text())
SAMPLE_FRAMES = len(GROUND_TRUTH["frames"])


def read_records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert len(result.stderr_lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


@pytest.fixture(scope="module")
def demo_run() -> tuple:
    """``vstream run`` with no arguments: the demo model on the sample video."""
    result = run_cli("run")
    return result, read_records(result.stdout)


def test_default_run_writes_one_record_per_frame_in_order(demo_run) -> None:
    result, records = demo_run
    assert result.returncode == 0, result.stderr
    assert [r["frame"] for r in records] == list(range(SAMPLE_FRAMES))
    assert all(r["stream"] == "sample" and (r["width"], r["height"]) == (640, 360) for r in records)
    pts = [r["pts"] for r in records]
    assert pts == sorted(pts) and pts[1] == pytest.approx(1 / GROUND_TRUTH["fps"])
    det = next(d for r in records for d in r["detections"])
    assert set(det) == {"bbox", "score", "class_id", "label"}
    assert det["label"] == GROUND_TRUTH["names"][det["class_id"]]


def test_default_run_summary_is_one_line_then_the_outputs(demo_run) -> None:
    result, _ = demo_run
    # Not counting the progress lines a run longer than logging.progress_seconds logs.
    summary, outputs = [
        line for line in result.stderr_lines if f"/{SAMPLE_FRAMES} frames (" not in line
    ]
    assert f"{SAMPLE_FRAMES} frames" in summary and "detections" in summary and "fps" in summary
    assert outputs == "vstream: outputs: records on stdout"


def test_demo_model_reaches_the_accuracy_bar(demo_run) -> None:
    _, records = demo_run
    accuracy = evaluate(records, GROUND_TRUTH)
    assert accuracy.mean >= 0.9, str(accuracy)


def test_nv12_path_gives_the_same_accuracy(tmp_path: Path) -> None:
    out = tmp_path / "nv12.jsonl"
    result = run_cli("run", "--pixel-format", "nv12", "--batch", "4", "--output", out, "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    records = read_records(out.read_text())
    assert [r["frame"] for r in records] == list(range(SAMPLE_FRAMES))
    assert evaluate(records, GROUND_TRUTH).mean >= 0.9


def test_eval_command_reports_map(demo_run, tmp_path: Path) -> None:
    out = tmp_path / "demo.jsonl"
    out.write_text(demo_run[0].stdout)
    result = run_cli("eval", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("mAP@0.5 ")
    for name in GROUND_TRUTH["names"]:
        assert name in result.stdout


def test_info_describes_the_demo_model() -> None:
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    assert "format:   yolov8" in result.stdout
    assert "imgsz:    320x320" in result.stdout
    assert "onnxruntime" in result.stdout
    for i, name in enumerate(GROUND_TRUTH["names"]):
        assert f"{i}={name}" in result.stdout


def test_info_takes_the_model_flags_of_run(tmp_path: Path) -> None:
    """An Ultralytics RT-DETR of no known release is told apart by --format only: ``info``
    takes it (and --imgsz, --scores, ...), as ``run`` does, from the same definitions."""
    from vstream.cli import build_parser

    metadata = {"head": "RTDETRDecoder", "description": "Ultralytics RT-DETR-l model",
                "names": str({0: "a", 1: "b"})}  # fmt: skip
    outputs = {"output0": np.zeros((1, 300, 6), np.float32)}
    model = family_model(tmp_path / "rtdetr.onnx", outputs, metadata=metadata)
    asked = run_cli("info", model)
    assert asked.returncode == 2 and "set --format rtdetr or --format rtdetr_topk" in asked.stderr
    result = run_cli("info", model, "--format", "rtdetr")
    assert result.returncode == 0, result.stderr
    assert "format:   rtdetr (Ultralytics RT-DETR)" in result.stdout
    assert_one_line_error(run_cli("info", "--imgsz", "7"), "error: --imgsz: must be an integer")
    commands = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices

    def flag(command: str, name: str) -> tuple:
        action = next(a for a in commands[command]._actions if name in a.option_strings)
        return action.help, action.choices, action.metavar

    for name in ("--imgsz", "--resize", "--resize-mode", "--format", "--scores"):
        assert flag("info", name) == flag("run", name), name


def test_classes_filter(tmp_path: Path) -> None:
    out = tmp_path / "disc.jsonl"
    result = run_cli("run", "--classes", "0", "--output", out, "--quiet")
    assert result.returncode == 0, result.stderr
    classes = {d["class_id"] for r in read_records(out.read_text()) for d in r["detections"]}
    assert classes == {0}


# Bad input: one line on stderr, exit status 2, no traceback, nothing produced is lost.


def test_missing_video(tmp_path: Path) -> None:
    result = run_cli("run", "--source", tmp_path / "absent.mp4")
    assert_one_line_error(result, "video file not found", "absent.mp4")


def test_a_directory_given_as_the_video_is_called_one(tmp_path: Path) -> None:
    """It was "video file not found" for a path that is there."""
    (tmp_path / "clips.mp4").mkdir()
    result = run_cli("run", "--source", tmp_path / "clips.mp4")
    assert_one_line_error(result, "clips.mp4 is a directory, not a video file")


def test_random_bytes_named_mp4(tmp_path: Path) -> None:
    fake = tmp_path / "noise.mp4"
    fake.write_bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    result = run_cli("run", "--source", fake)
    assert_one_line_error(result, "cannot open", "noise.mp4", "Invalid data")


def test_a_run_failing_before_its_first_record_keeps_the_earlier_runs_output(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"frame": 0, "earlier": true}\n')
    fake = tmp_path / "noise.mp4"
    fake.write_bytes(np.random.default_rng(1).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    result = run_cli("run", "--source", fake, "--output", out)
    assert_one_line_error(result, "cannot open", "noise.mp4")
    assert out.read_text() == '{"frame": 0, "earlier": true}\n'


def test_truncated_video_keeps_the_records_before_the_damage(tmp_path: Path) -> None:
    video = write_video(tmp_path / "full.mp4", frames=60, options={"movflags": "faststart"})
    data = video.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 6 // 10])
    out = tmp_path / "cut.jsonl"
    result = run_cli("run", "--source", cut, "--output", out, "--batch", "4")
    assert_one_line_error(result, "cut.mp4", "of 60 frames")
    records = read_records(out.read_text())  # every line is complete JSON
    assert 0 < len(records) < 60
    assert [r["frame"] for r in records] == list(range(len(records)))


def test_model_with_unexpected_output_shape(tmp_path: Path) -> None:
    model = constant_output_model(tmp_path / "odd.onnx", np.zeros((1, 7, 2, 2, 2), np.float32))
    result = run_cli("run", "--model", model)
    assert_one_line_error(result, "output must have 3 dimensions", "[1, 7, 2, 2, 2]")


def test_a_classifier_as_the_detector_is_named_for_what_it_is(tmp_path: Path) -> None:
    model = constant_output_model(tmp_path / "classes.onnx", np.zeros((1, 7), np.float32))
    result = run_cli("run", "--model", model)
    assert_one_line_error(result, "classification model cannot be the primary detector", "[1, 7]")


def test_corrupt_model(tmp_path: Path) -> None:
    model = tmp_path / "corrupt.onnx"
    model.write_bytes(assets.DEMO_MODEL.read_bytes()[:5000])
    assert_one_line_error(run_cli("run", "--model", model), "cannot load model", "corrupt.onnx")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--conf", "2"], "--conf: must be in [0, 1], got 2.0"),
        (["--max-det", "0"], "--max-det: must be in [1, 10000], got 0"),
        (["--classes", "a,b"], "--classes: must be integers"),
        (["--classes", "0,99"], "classes to keep [99] (postprocess.classes, --classes) are not"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--imgsz", "640"], "fixed 320x320 input"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--save-video", "boxes.txt"], "unsupported file extension '.txt' for an annotated"),
    ],
)
def test_bad_arguments(args: list[str], fragment: str) -> None:
    assert_one_line_error(run_cli("run", *args), fragment)


def test_the_summary_says_an_annotated_video_was_not_saved(tmp_path: Path) -> None:
    """The summary listed a video never written (every frame came below ``min_free_bytes``)
    among the outputs, as if it had been made."""
    write_video(tmp_path / "clip.mp4", frames=6)
    (tmp_path / "run.yaml").write_text(
        f"""
pipelines:
  - name: main
    model: {{path: {assets.DEMO_MODEL}}}
    sources: [{{id: cam, uri: clip.mp4}}]
    sinks:
      - {{type: jsonl, path: out.jsonl}}
      - {{type: video, path: saved.mp4}}
      - {{type: video, name: low, path: unsaved.mp4, min_free_bytes: 1000000000000000}}
"""
    )
    result = run_cli("run", tmp_path / "run.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    outputs = result.stderr_lines[-1]
    assert outputs.endswith(
        "annotated video saved.mp4; annotated video unsaved.mp4 not saved: its 6 frames "
        "came while the disk was below min_free_bytes"
    ), outputs
    assert (tmp_path / "saved.mp4").exists() and not (tmp_path / "unsaved.mp4").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["info", "https://user:hunter2@models.example.com/m.onnx"],
        ["run", "--model", "https://user:hunter2@models.example.com/m.onnx"],
        ["bench", "--model", "rtsp://user:hunter2@models.example.com/m.onnx"],
        ["run", "--output", "https://user:hunter2@example.com/records.jsonl"],
    ],
    ids=["info", "run", "bench", "output"],
)
def test_a_file_given_as_a_url_is_refused_without_its_password(args: list[str]) -> None:
    """Made a path, ``https://user:pw@host`` became ``https:/user:pw@host``, which the
    redaction of URLs does not find: "model file not found: .../https:/user:hunter2@...",
    and an output went to a folder "https:" in the working one, the summary quoting it."""
    result = run_cli(*args)
    assert_one_line_error(result, "expected a file path, got a URL")
    assert "hunter2" not in result.stderr + result.stdout


def test_unwritable_output(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("not a directory")
    result = run_cli("run", "--output", tmp_path / "plain-file" / "dir" / "out.jsonl")
    assert_one_line_error(result, "--output: not a directory:", "plain-file")


def test_missing_output_directories_are_created(tmp_path: Path) -> None:
    output = tmp_path / "new" / "dir" / "out.jsonl"
    result = run_cli("run", "--output", output, "--end", "0.2")
    assert result.returncode == 0, result.stderr
    assert len(output.read_text().splitlines()) == 5


@pytest.mark.parametrize(
    "argv, dest, expected",
    [
        (["bench", "--source", "vstream://sample.mp4"], "source", assets.SAMPLE_VIDEO),
        (["doctor", "--model", "vstream://demo.onnx"], "model", assets.DEMO_MODEL),
        (["doctor", "--video", "clip.mp4"], "video", Path("clip.mp4")),
    ],
)
def test_file_flags_take_bundled_names(argv: list[str], dest: str, expected: Path) -> None:
    """Before, Path("vstream://sample.mp4") became "vstream:/sample.mp4", a missing file."""
    from vstream.cli import build_parser

    assert getattr(build_parser().parse_args(argv), dest) == expected


def test_an_unknown_bundled_name_is_one_line_listing_the_bundled_files() -> None:
    result = run_cli("bench", "--source", "vstream://nope.mp4")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "no bundled file 'vstream://nope.mp4'; there are vstream://demo.onnx" in line


def freeze_count_after_a_command(prelude: str) -> int:
    """``gc.get_freeze_count()`` after ``vstream validate`` in a fresh interpreter that ran
    ``prelude`` first."""
    code = (
        f"{prelude}\n"
        "import gc\n"
        "from vstream.cli import main\n"
        f"assert main(['validate', {str(CONFIGS / 'file.yaml')!r}]) == 0\n"
        "print(gc.get_freeze_count())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG, check=True
    )
    return int(done.stdout.strip().splitlines()[-1])


def test_the_last_collection_is_spared_only_after_cuda_was_used() -> None:
    """After a command that used CUDA, what is left is frozen out of the interpreter's last
    collections (they crashed at exit on the GPU machines, BENCHMARKS.md); without CUDA,
    torch loaded or not, nothing changes."""
    assert freeze_count_after_a_command("") == 0
    assert freeze_count_after_a_command("import torch; torch.zeros(1)") == 0
    # Stands in for torch once CUDA is initialised: torch.cuda.is_initialized() is then True
    # (the real one cannot initialise CUDA on a machine without a GPU).
    stand_in = (
        "import sys, types\n"
        "torch = types.ModuleType('torch')\n"
        "torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)\n"
        "sys.modules['torch'] = torch\n"
    )
    assert freeze_count_after_a_command(stand_in) > 0


@pytest.mark.parametrize("module", ["vstream.config", "vstream.cli.run"])
def test_ctrl_c_while_the_command_starts_is_one_line_and_status_130(module: str) -> None:
    """Ctrl-C in the first half second (the commands' modules loading, as the ``vstream``
    script imported its entry point) ended in a traceback of the import machinery."""
    code = (
        "import importlib.abc, os, signal, sys\n"
        # As from a terminal: a test runner's worker may ignore SIGINT, which children inherit.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "class Interrupt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name == {module!r}:\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from vstream.cli import main\n"  # what the console script runs
        f"sys.exit(main(['validate', {str(CONFIGS / 'file.yaml')!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG
    )
    assert (done.returncode, done.stderr) == (130, "vstream: interrupted\n")


@pytest.mark.parametrize("with_a_broken_file", [False, True])
def test_a_reader_that_stops_early_ends_the_run_quietly_unless_something_failed(
    tmp_path: Path, with_a_broken_file: bool
) -> None:
    """``vstream run ... | head -1``: the reader going away ends the run with status 0 and
    no word; but a stream that failed too (a truncated file, said in its line) still makes
    it 2, where the broken pipe hid it."""
    sources = [{"id": "good", "uri": str(assets.SAMPLE_VIDEO)}]
    if with_a_broken_file:
        broken = tmp_path / "broken.mp4"
        broken.write_bytes(assets.SAMPLE_VIDEO.read_bytes()[:3000])
        sources.append({"id": "broken", "uri": str(broken)})
    config = tmp_path / "p.yaml"
    model = {"path": str(assets.DEMO_MODEL)}
    pipeline = {"name": "p", "model": model, "sources": sources, "sinks": [{"type": "stdout"}]}
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    process = subprocess.Popen(
        [sys.executable, "-m", "vstream", "run", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = json.loads(process.stdout.readline())
    process.stdout.close()  # as head does after its line
    _, err = process.communicate(timeout=HANG)
    assert first["stream"] == "good" and "Traceback" not in err
    if with_a_broken_file:
        assert process.returncode == 2
        assert "stream broken: failed: cannot open" in err
    else:
        assert process.returncode == 0 and not err.strip(), err


def test_a_run_whose_output_cannot_be_written_ends_with_status_2() -> None:
    """``vstream run > /dev/full``: the kernel's own ENOSPC on every write. The records are
    retried as on any full disk, then dropped and counted at the end; the run said
    "outputs: records on stdout" and exited 0 with none written."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "vstream", "run", "--end", "1"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=HANG,
        )
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert "25 records produced: 0 delivered, 25 dropped" in done.stderr
    assert lines[-1] == (
        "vstream: records not delivered: sink stdout (pipeline run): "
        "cannot write stdout: No space left on device"
    )
    assert "outputs:" not in done.stderr and "Traceback" not in done.stderr
