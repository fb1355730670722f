"""``processes: N | auto``: how many worker processes share a GPU, and what each asks Ray for.

No Ray starts here: the rule for ``auto``, the share of a GPU and of the
cores each worker reserves, the setting as a pipelines file, ``vstream
serve`` and a machine without Ray take it. The workers themselves run in
tests/test_cluster.py (``processes: 2``, every frame once) on the module's
Ray instance.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from vstream import assets
from vstream.cli import build_parser, main
from vstream.cluster import processes
from vstream.cluster.mps import DEFAULT_PIPE_DIRECTORY, control_pipe
from vstream.cluster.processes import auto_count, frame_rate, resolve
from vstream.cluster.slots import gpus_per_worker
from vstream.config import ConfigError, parse_config
from vstream.config.sources import SourceConfig
from vstream.cores import auto_processes

VIDEO = assets.SAMPLE_VIDEO
VIDEO_SINK = "{type: video, path: 'v-{stream}.mp4'}"


def config_text(
    count: object = 1,
    *,
    sources: int = 0,
    sink: str = "{type: stdout}",
    device: str = "auto",
    cluster: str | None = None,
) -> str:
    """A pipelines file of one pipeline with ``sources`` cameras, ``processes: count``."""
    cameras = ", ".join(f"{{id: cam{i}, uri: 'rtsp://10.0.0.{i}/s'}}" for i in range(sources))
    return (
        f"processes: {count}\n"
        + (f"cluster: {cluster}\n" if cluster is not None else "")
        + "pipelines:\n"
        "  - name: p\n"
        f"    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    runtime: {{device: {device}}}\n"
        f"    sources: [{cameras}]\n"
        f"    sinks: [{sink}]\n"
    )


@pytest.mark.parametrize(
    ("rates", "cores", "expected"),
    [
        ([], 16, 1),  # no stream yet (they come through the API): one process
        ([30.0] * 12, 16, 1),  # 12 cameras at 30 frames/s fill one process's 360
        ([30.0] * 13, 16, 2),
        ([30.0] * 64, 16, 6),  # 1,920 frames/s
        ([30.0] * 64, 8, 4),  # 2 cores a process
        ([None] * 4, 16, 4),  # a file read at full speed fills a process
        ([None] * 4, 4, 2),
        ([None], 16, 1),  # a stream runs in one process: never more processes than streams
        ([1000.0, 1000.0], 16, 2),
        ([30.0] * 64, 1, 1),  # never fewer than one
    ],
)
def test_auto_picks_processes_from_the_frame_rates_within_the_cores(
    rates: list[float | None], cores: int, expected: int
) -> None:
    assert auto_processes(rates, cores) == expected


def test_auto_counts_cameras_and_replayed_files_at_30_and_other_files_as_fast_as_they_go() -> None:
    assert frame_rate(SourceConfig(id="c", uri="rtsp://10.0.0.1/s")) == 30.0
    assert frame_rate(SourceConfig(id="f", uri=str(VIDEO), realtime=True, stride=2)) == 15.0
    assert frame_rate(SourceConfig(id="f", uri=str(VIDEO))) is None


@pytest.mark.parametrize("count", [2, 3, 4])
def test_n_processes_on_one_gpu_each_reserve_1_over_n_of_it_and_their_share_of_the_cores(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "available_cores", lambda: 16)
    config = resolve(parse_config(config_text(count)))
    cluster = config.cluster
    assert cluster is not None and config.processes == 1  # now a cluster of N, one driver
    assert (cluster.workers, cluster.cpus_per_worker, cluster.address) == (count, 16 // count, None)
    assert gpus_per_worker(cluster, config.pipelines, have=1.0) == pytest.approx(1 / count)
    assert gpus_per_worker(cluster, config.pipelines, have=0.0) == 0.0  # no GPU: CPU workers


def test_a_gpu_is_shared_only_by_the_workers_that_do_not_fit_on_the_others() -> None:
    def share(cluster: str, have: float, device: str = "auto") -> float:
        config = parse_config(config_text(cluster=cluster, device=device))
        assert config.cluster is not None
        return gpus_per_worker(config.cluster, config.pipelines, have)

    assert share("{engine: ray, workers: 2}", 2.0) == 1.0
    assert share("{engine: ray, workers: 3}", 2.0) == 0.5  # two on one GPU, one on the other
    assert share("{engine: ray, workers: 2}", 2.0, device="cpu") == 0.0
    # A joined cluster may grow to give every worker a GPU of its own.
    assert share("{engine: ray, workers: 3, address: auto}", 1.0) == 1.0
    assert share("{engine: ray, workers: 2, gpus_per_worker: 0.25}", 1.0) == 0.25


def test_auto_without_a_gpu_is_one_process_and_says_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As on most machines: auto means the one process it always was, quietly."""
    caplog.set_level(logging.DEBUG, logger="vstream")
    monkeypatch.setattr(processes, "gpu_count", lambda: 0)
    config = parse_config(config_text("auto", sources=64))
    assert resolve(config) is config
    assert not caplog.records


def test_auto_without_ray_is_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray is an extra: without it, auto is the one process vstream always was (and a count
    is one clear line: tests/test_cluster_parts.py)."""
    monkeypatch.setattr(processes, "ray_installed", lambda: False)
    monkeypatch.setattr(processes, "gpu_count", lambda: 1)
    assert auto_count(parse_config(config_text("auto", sources=64))) == 1


def test_auto_on_a_gpu_follows_the_cameras_unless_the_workers_cannot_run_the_file(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """With a GPU (stood in for: this machine has none) and Ray, as on a GPU host."""
    caplog.set_level(logging.INFO, logger="vstream.cluster")
    os.mkfifo(tmp_path / "control")  # MPS runs: see the next test for the line when not
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    monkeypatch.setattr(processes, "gpu_count", lambda: 1)
    monkeypatch.setattr(processes, "available_cores", lambda: 16)
    assert auto_count(parse_config(config_text("auto", sources=12))) == 1
    assert not caplog.records
    config = resolve(parse_config(config_text("auto", sources=64)))
    assert config.cluster is not None and config.cluster.workers == 6
    assert caplog.messages == ["processes auto: 6 worker processes share the GPU"]
    caplog.clear()
    # A video sink needs the frames, which stay on the workers: one process, and why.
    assert auto_count(parse_config(config_text("auto", sources=64, sink=VIDEO_SINK))) == 1
    assert caplog.messages == [
        "processes auto: 1 rather than 6, as pipeline p has a video sink, which needs the frames"
    ]


def test_mps_is_found_by_its_control_pipe_where_cuda_looks_for_it(tmp_path: Path) -> None:
    """CUDA connects to the MPS control daemon through ``control`` in
    ``$CUDA_MPS_PIPE_DIRECTORY`` (default /tmp/nvidia-mps), a pipe the daemon makes."""
    environ = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}
    assert control_pipe(environ) is None  # no daemon
    (tmp_path / "control").write_text("")
    assert control_pipe(environ) is None  # not a pipe: not a daemon either
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")
    assert control_pipe(environ) == tmp_path / "control"
    assert control_pipe({}) in (None, DEFAULT_PIPE_DIRECTORY / "control")


def test_several_processes_on_a_gpu_without_mps_say_how_to_start_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Without MPS the processes' kernels take turns on the GPU (measured: YOLOv8n's 50
    cameras over 6 processes, p95 age 458 ms without, 70 ms with): one info line, not for
    processes on the CPU, and none once MPS runs."""
    caplog.set_level(logging.INFO, logger="vstream.cluster")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    monkeypatch.setattr(processes, "gpu_count", lambda: 1)
    monkeypatch.setattr(processes, "available_cores", lambda: 16)
    hint = (
        "processes 6: CUDA MPS is not running, so the processes' kernels take turns on the "
        "GPU; with a model that keeps it busy, start it (nvidia-cuda-mps-control -d) before "
        "vstream"
    )
    resolve(parse_config(config_text("auto", sources=64)))
    assert hint in caplog.messages
    caplog.clear()
    resolve(parse_config(config_text(6, device="cpu")))
    assert not any("MPS" in m for m in caplog.messages)
    resolve(parse_config(config_text(6, device="cuda")))
    assert hint in caplog.messages
    caplog.clear()
    os.mkfifo(tmp_path / "control")
    resolve(parse_config(config_text(6, device="cuda")))
    assert not any("MPS" in m for m in caplog.messages)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (config_text(0), "processes: must be auto or an integer in [1, 64], got 0"),
        (config_text("'2'"), "processes: must be auto or an integer in [1, 64], got '2'"),
        (config_text("many"), "processes: must be auto or an integer in [1, 64], got 'many'"),
        (
            config_text(2, sink=VIDEO_SINK),
            "pipeline p has a video sink, which needs the frames; with processes: 2, the frames "
            "stay on the workers and only records reach the driver's sinks",
        ),
        (
            config_text(2, cluster="{engine: ray}"),
            "processes (2) and cluster: both place the streams on worker processes; give one",
        ),
    ],
    ids=["zero", "text", "word", "frame-sink", "with-cluster"],
)
def test_a_bad_processes_setting_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source="p.yaml")
    assert message in str(raised.value)
    assert str(raised.value).startswith("p.yaml:")


def test_serve_takes_processes_as_a_flag_over_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(config_text(sink=VIDEO_SINK))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", str(path), "--processes", "many"])
    assert "--processes: must be an integer or auto, got 'many'" in capsys.readouterr().err
    assert build_parser().parse_args(["serve", str(path), "--processes", "auto"])
    # The flag reaches the config, which refuses a video sink with two processes.
    assert main(["serve", str(path), "--processes", "2"]) == 2
    assert "with processes: 2, the frames stay on the workers" in capsys.readouterr().err
