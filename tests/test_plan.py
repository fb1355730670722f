"""How many model runs at once, with how many threads: the automatic plan and the user's say."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from helpers import wait_for, write_video
from onnx_models import brightness_model
from pydantic import ValidationError

from vstream import Detector
from vstream.cli import build_parser
from vstream.cli.options import build_run_config
from vstream.cli.run import _FLAGS as RUN_FLAGS
from vstream.config import ModelConfig, RuntimeOptions, load_config
from vstream.config.loading import ConfigError
from vstream.cores import available_cores
from vstream.engine import Engine
from vstream.inference.plan import plan_runs

MODEL = "vstream/assets/demo.onnx"


def plan(device: str = "cpu", cores: int = 2, *, threads: int = 0, **runtime: object):
    found = plan_runs(
        ModelConfig(path=MODEL, intra_op_threads=threads), RuntimeOptions(**runtime), device, cores
    )
    return found.concurrent_runs, found.threads_per_run, found.buffers


@pytest.mark.parametrize(
    ("cores", "expected"),
    [(1, (1, 1, 3)), (2, (2, 1, 4)), (8, (8, 1, 10)), (32, (8, 4, 10))],
)
def test_on_a_cpu_the_cores_become_runs_of_one_thread(cores: int, expected: tuple) -> None:
    assert plan(cores=cores) == expected


def test_on_cuda_one_run_and_more_asked_is_said_once_by_the_plan(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The plan is the one place runs are decided: the session and the stages take it as it is.
    On CUDA a batch waits letterboxed while the GPU runs the one before: four buffers."""
    assert plan("cuda", cores=16) == (1, 0, 4)
    assert not caplog.records
    assert plan("cuda", cores=16, concurrent_runs=3) == (1, 0, 4)
    (notice,) = [r.getMessage() for r in caplog.records]
    assert notice.startswith("runtime.concurrent_runs=3: on CUDA the model runs one batch at a")
    assert notice.endswith("running 1")


def test_what_the_user_sets_wins_and_the_rest_is_derived() -> None:
    assert plan(cores=2, threads=2) == (1, 2, 3), "--threads 2 on 2 cores: one run of two"
    assert plan(cores=8, concurrent_runs=2) == (2, 4, 4), "two runs share the 8 cores"
    assert plan(cores=2, concurrent_runs=3, threads=2) == (3, 2, 5), "both set: both kept"
    assert plan(cores=8, in_flight=3) == (1, 8, 3), "three buffers leave room for one run"
    assert plan(cores=2, concurrent_runs=2, in_flight=6) == (2, 1, 6)


def test_too_few_buffers_for_the_runs_is_refused_with_the_numbers() -> None:
    with pytest.raises(ValidationError, match=r"in_flight \(5\) must be at least concurrent_runs"):
        RuntimeOptions(concurrent_runs=4, in_flight=5)
    with pytest.raises(ValidationError, match=r"must be in \[1, 16\], got 17"):
        RuntimeOptions(concurrent_runs=17)


def test_the_flags_reach_the_config() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["run", "--concurrent-runs", "3", "--threads", "2", "--in-flight", "5"]
    )
    config = build_run_config(args, RUN_FLAGS, source=MODEL, output=None, model=MODEL)
    pipeline = config.pipelines[0]
    assert pipeline.runtime.concurrent_runs == 3 and pipeline.runtime.in_flight == 5
    assert pipeline.model.intra_op_threads == 2
    bad = parser.parse_args(["run", "--concurrent-runs", "0"])
    with pytest.raises(ConfigError, match=r"--concurrent-runs: must be in \[1, 16\], got 0"):
        build_run_config(bad, RUN_FLAGS, source=MODEL, output=None, model=MODEL)


def test_python_keywords_set_the_plan_and_the_session_gets_its_threads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = brightness_model(tmp_path / "b.onnx")
    with caplog.at_level(logging.INFO, logger="vstream.engine"):
        detector = Detector(model, device="cpu", concurrent_runs=3, intra_op_threads=1)
    assert (detector.concurrent_runs, detector.buffers) == (3, 5)
    assert detector.model.session.get_session_options().intra_op_num_threads == 1
    lines = [r.getMessage() for r in caplog.records if "model runs" in r.getMessage()]
    set_by = f"set: concurrent_runs, intra_op_threads, {available_cores()} cores"
    assert lines == [f"b.onnx on cpu: model runs: 3 runs x 1 thread, 5 buffers ({set_by})"]
    auto = Detector(model, device="cpu")
    assert auto.plan == plan_runs(
        ModelConfig(path=str(model)), RuntimeOptions(device="cpu"), "cpu"
    ), "nothing set: the automatic plan"


def test_a_pipelines_file_sets_the_plan_and_the_stages_run_that_many_models(
    tmp_path: Path,
) -> None:
    write_video(tmp_path / "clip.mp4", frames=8, width=64, height=48)
    brightness_model(tmp_path / "b.onnx")
    (tmp_path / "p.yaml").write_text(
        """
pipelines:
  - name: main
    model: {path: b.onnx, intra_op_threads: 1}
    runtime: {device: cpu, concurrent_runs: 3}
    sources: [{id: clip, uri: clip.mp4}]
    sinks: [{type: jsonl, path: out.jsonl}]
"""
    )
    engine = Engine(load_config(tmp_path / "p.yaml"), base_dir=tmp_path)
    detector = engine.pipelines["main"].detector
    assert (detector.concurrent_runs, detector.plan.threads_per_run, detector.buffers) == (3, 1, 5)
    engine.start()
    try:
        runs = [t for t in threading.enumerate() if t.name == "inference-main"]
        assert len(runs) == 3
        wait_for(engine.files_done, 120, "the file to end")
    finally:
        engine.stop(timeout=20)
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 8


def test_the_default_batch_fits_the_device() -> None:
    """A GPU batches across streams by default (buckets keep part-filled batches cheap); a CPU
    runs one frame at a time; a batch the model fixes or the user sets wins everywhere."""
    from vstream.inference.model import CUDA_BATCH, batch_size, open_for_inspection, read_model_spec

    spec = read_model_spec(open_for_inspection(MODEL, "model"), Path(MODEL))
    assert spec.fixed_batch is None
    assert batch_size(spec, None, "cuda") == CUDA_BATCH == 32
    assert batch_size(spec, None, "cpu") == 1
    assert batch_size(spec, 4, "cuda") == 4
