"""Publishing the annotated video live over RTMP, to a real nginx-rtmp on 127.0.0.1.

The server records every publication to FLV, so what arrived is read back
and counted. Its restart is a real outage: the writer must notice, count the
frames it could not send, reconnect with backoff and publish again; and the
stream key must never appear in a log line or an error.
"""

from __future__ import annotations

import itertools
import logging
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import av
import pytest
import torch
from helpers import run_cli, tiny_detector, write_video

from vstream.config import ConfigError, load_config
from vstream.sinks.video.writer import VideoWriter, VideoWriterStats

if TYPE_CHECKING:
    from servers import Server

pytest_plugins = ("servers",)

KEY = "s3cr3t-k3y"
WIDTH, HEIGHT, FPS = 160, 120, 25


def picture(index: int) -> torch.Tensor:
    """A frame whose grey level says its index (for eyes reading a failure)."""
    return torch.full((HEIGHT, WIDTH, 3), (index * 5) % 256, dtype=torch.uint8)


def recordings(server: Server, tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "recordings").glob(f"{KEY}-*.flv"))


def frames_in(path: Path) -> tuple[int, tuple[int, int]]:
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    return len(frames), (frames[0].width, frames[0].height) if frames else (0, 0)


def recorded_frames(path: Path, expected: int) -> int:
    """Frames nginx recorded in ``path``, once it has finished writing them (bounded wait).

    nginx makes the file before it writes FLV's header into it: until then FFmpeg finds
    no container there (seen once on a loaded machine), which counts as none yet.
    """
    counted = 0
    deadline = time.monotonic() + 60  # only a hang waits this long
    while time.monotonic() < deadline:
        try:
            counted = frames_in(path)[0]
        except av.error.InvalidDataError:
            counted = 0
        if counted >= expected:
            break
        time.sleep(0.1)
    return counted


def accounted(stats: VideoWriterStats) -> int:
    return stats.frames_written + stats.frames_dropped + stats.frames_failed


def test_every_frame_published_arrives_at_the_server(rtmp_server: Server, tmp_path: Path) -> None:
    url = f"rtmp://127.0.0.1:{rtmp_server.port}/live/{KEY}"
    writer = VideoWriter(url, WIDTH, HEIGHT, FPS, encoder="cpu", policy="block")
    assert writer.path is None and KEY not in writer.target
    for index in range(50):
        assert writer.write(picture(index), index / FPS)
    stats = writer.close(timeout=30)
    assert (stats.frames_written, stats.frames_failed, stats.failures) == (50, 0, 0)
    [recording] = recordings(rtmp_server, tmp_path)
    assert recorded_frames(recording, 50) == 50
    assert frames_in(recording)[1] == (WIDTH, HEIGHT)


def test_a_server_restart_is_an_outage_counted_then_publishing_resumes(
    rtmp_server: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vstream.sinks.video")
    url = f"rtmp://127.0.0.1:{rtmp_server.port}/live/{KEY}"
    writer = VideoWriter(url, WIDTH, HEIGHT, FPS, encoder="cpu", policy="block")
    offered = 0

    def publish_until(condition, timeout: float = 20.0) -> bool:
        nonlocal offered
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not condition():
            writer.write(picture(offered), offered / FPS)
            offered += 1
            time.sleep(1 / FPS)
        return condition()

    try:
        assert publish_until(lambda: writer.stats.frames_written >= 25)
        rtmp_server.kill()
        assert publish_until(lambda: writer.stats.frames_failed > 0), "the outage was noticed"
        rtmp_server.start()
        assert publish_until(lambda: writer.stats.reconnects == 1)
        resumed_at = writer.stats.frames_written
        assert publish_until(lambda: writer.stats.frames_written >= resumed_at + 25)
    finally:
        stats = writer.close(timeout=30)
    assert stats.failures == 0, "an outage is not a failure of the output"
    assert accounted(stats) == offered, "every frame written, dropped or counted as lost"
    first, second = recordings(rtmp_server, tmp_path)
    assert recorded_frames(first, 25) >= 25
    assert recorded_frames(second, 25) >= 25, "published again after the restart"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"127.0.0.1:{rtmp_server.port}/live/***" in warnings[0]
    assert "publishing again" in caplog.text
    assert KEY not in caplog.text


def test_no_server_costs_the_frames_not_the_caller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from servers import free_port

    caplog.set_level(logging.INFO, logger="vstream.sinks.video")
    url = f"rtmp://user:pa55word@127.0.0.1:{free_port()}/live/{KEY}"
    writer = VideoWriter(url, WIDTH, HEIGHT, FPS, encoder="cpu", policy="drop")
    for index in range(10):
        writer.write(picture(index), index / FPS)
    stats = writer.close(timeout=30)
    assert stats.frames_written == 0 and accounted(stats) == 10 and stats.failures == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "Connection refused" in warnings[0], warnings
    assert "never published" in warnings[1] and "10 frames lost" in warnings[1], warnings
    assert KEY not in caplog.text and "pa55word" not in caplog.text


def test_a_server_that_stays_down_is_tried_again_with_doubling_waits_and_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An attempt that only builds the encoder is no connection: it must not end the outage.

    The waits are shortened (0.05 s doubling to 0.4 s) so that the doubling and
    its ceiling show in a second; each gap between attempts is checked against
    its lower bound only (the writer must not try sooner), never a deadline.
    """
    from servers import free_port

    from vstream.sinks.video import writer as writer_module

    monkeypatch.setattr(writer_module, "RECONNECT_SECONDS", (0.05, 0.4))
    attempts: list[float] = []
    opened = VideoWriter._open_backend

    def counted(self: VideoWriter) -> object:
        attempts.append(time.monotonic())
        return opened(self)

    monkeypatch.setattr(VideoWriter, "_open_backend", counted)
    caplog.set_level(logging.INFO, logger="vstream.sinks.video")
    writer = VideoWriter(
        f"rtmp://127.0.0.1:{free_port()}/live/{KEY}", WIDTH, HEIGHT, FPS, encoder="cpu"
    )
    offered = 0
    while len(attempts) < 7 and offered < 10_000:  # 0.05+0.1+0.2+0.4+0.4+0.4 s of waits
        writer.write(picture(offered), offered / FPS)
        offered += 1
        time.sleep(0.01)
    stats = writer.close(timeout=30)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(gaps) >= 6, attempts
    for gap, wait in zip(gaps, (0.05, 0.1, 0.2, 0.4, 0.4, 0.4), strict=False):
        assert gap >= wait, f"tried again after {gap:.3f} s, before its {wait} s wait: {gaps}"
    assert (stats.frames_written, stats.reconnects, stats.failures) == (0, 0, 0)
    assert stats.frames_failed == offered, "every frame of the outage counted as lost"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # the outage, and the end: never published
    assert not any(r.getMessage().endswith(": publishing again") for r in caplog.records)
    assert "never published to rtmp://127.0.0.1:" in warnings[1]
    assert f"{offered} frames lost" in warnings[1]


def test_a_bug_while_publishing_fails_the_output_once_and_is_not_retried(
    rtmp_server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: VideoWriter, backend: object, item: object, ticks: int) -> None:
        raise ValueError("a bug in the drawing code")

    monkeypatch.setattr(VideoWriter, "_encode_one", broken)
    url = f"rtmp://127.0.0.1:{rtmp_server.port}/live/{KEY}"
    writer = VideoWriter(url, WIDTH, HEIGHT, FPS, encoder="cpu", policy="block")
    for index in range(10):
        writer.write(picture(index), index / FPS)
    stats = writer.close(timeout=30)
    assert stats.failures == 1 and stats.reconnects == 0 and accounted(stats) == 10
    assert writer.error is not None and "a bug in the drawing code" in str(writer.error)
    assert KEY not in caplog.text


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    tiny_detector(tmp_path / "model.onnx")
    write_video(tmp_path / "clip.mp4", frames=6)
    write_video(tmp_path / "other.mp4", frames=6)
    return tmp_path


def config_errors(directory: Path, video: str, sources: int = 1) -> list[str]:
    listed = "\n".join(
        f"      - {{id: cam{i}, uri: {'clip' if i == 0 else 'other'}.mp4}}" for i in range(sources)
    )
    text = textwrap.dedent(
        """
        pipelines:
          - name: main
            model: {path: model.onnx}
            sources:
        SOURCES
            sinks:
              - {type: video, path: "VIDEO"}
        """
    )
    text = text.replace("SOURCES", listed).replace("VIDEO", video)
    (directory / "p.yaml").write_text(text)
    try:
        config = load_config(directory / "p.yaml")
    except ConfigError as exc:
        return exc.lines()
    sink = config.pipelines[0].sinks[0]
    return [f"ok {sink.policy}"]


@pytest.mark.parametrize(
    ("video", "expected"),
    [
        (f"rtmp://127.0.0.1:1935/live/{KEY}", "ok drop"),
        ("out.mp4", "ok block"),
        (f"rtmp://127.0.0.1:99999/live/{KEY}", "the port must be a number in [1, 65535]"),
        (f"rtmp:///live/{KEY}", "a publish URL needs a host"),
        ("rtmp://127.0.0.1/live", "names an application and a stream key"),
        (f"http://127.0.0.1/live/{KEY}", "http:// is not an output"),
        (f"rtmp://127.0.0.1/live/{{camera}}{KEY}", "unknown placeholder {camera}"),
    ],
)
def test_publish_urls_are_checked_and_their_keys_never_shown(
    workdir: Path, video: str, expected: str
) -> None:
    lines = config_errors(workdir, video)
    assert any(expected in line for line in lines), lines
    assert not any(KEY in line for line in lines), lines


def test_several_streams_cannot_share_one_video(workdir: Path) -> None:
    lines = config_errors(workdir, "out.mp4", sources=2)
    assert any("2 streams cannot share one video; put {stream} in its path" in x for x in lines)
    assert config_errors(workdir, "out-{stream}.mp4", sources=2) == ["ok block"]


def test_vstream_run_publishes_every_frame_and_shows_the_url_without_its_key(
    workdir: Path, rtmp_server: Server, tmp_path: Path
) -> None:
    url = f"rtmp://127.0.0.1:{rtmp_server.port}/live/{KEY}"
    (workdir / "p.yaml").write_text(
        textwrap.dedent(
            f"""
            pipelines:
              - name: main
                model: {{path: model.onnx}}
                sources: [{{id: cam, uri: clip.mp4}}]
                sinks:
                  - {{type: jsonl, path: out.jsonl}}
                  - {{type: video, path: "{url}", overflow: block}}
            """
        )
    )
    done = run_cli("run", workdir / "p.yaml", timeout=120)
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stderr + done.stdout
    [recording] = recordings(rtmp_server, tmp_path)
    assert recorded_frames(recording, 6) == 6, "every frame of the 6-frame clip"


def test_vstream_run_says_a_video_was_never_published_when_no_server_answered(
    workdir: Path,
) -> None:
    from servers import free_port

    done = run_cli(
        "run", "--source", workdir / "clip.mp4", "--model", workdir / "model.onnx",
        "--output", workdir / "out.jsonl",
        "--save-video", f"rtmp://127.0.0.1:{free_port()}/live/{KEY}", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # every record was written
    assert "never published to rtmp://127.0.0.1:" in done.stderr, done.stderr
    assert "6 frames lost" in done.stderr, done.stderr
    assert "published to" not in done.stderr.replace("never published to", ""), done.stderr
    assert KEY not in done.stderr + done.stdout


def test_video_paths_fill_in_the_pipeline_and_the_stream(workdir: Path) -> None:
    (workdir / "p.yaml").write_text(
        textwrap.dedent(
            """
            pipelines:
              - name: main
                model: {path: model.onnx}
                sources: [{id: cam, uri: clip.mp4}, {id: other, uri: other.mp4}]
                sinks:
                  - {type: jsonl, path: out.jsonl}
                  - {type: video, path: "videos/{pipeline}-{stream}.mp4"}
            """
        )
    )
    done = run_cli("run", workdir / "p.yaml", timeout=120)
    assert done.returncode == 0, done.stderr
    made = sorted(p.name for p in (workdir / "videos").iterdir())
    assert made == ["main-cam.mp4", "main-other.mp4"]
    assert frames_in(workdir / "videos" / "main-cam.mp4") == (6, (320, 240))
