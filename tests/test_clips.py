"""Event clips: the packet ring, remuxed clips with pre-roll, snapshots, retention, failures."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from helpers import HANG, wait_for

from vstream.clips import ClipIndex, ClipRecorder, PacketRing, Retention

FPS = 25
GOP = 10  # frames: a keyframe every 0.4 s


def encode(path: Path, frames: int = 125, *, fmt: str | None = None, gop: int = GOP) -> Path:
    """A moving picture with a keyframe every ``gop`` frames (B-frames included).

    ``tests/helpers.py: write_video`` passes its ``options`` to the container,
    not the encoder, so it cannot set the GOP; this sets it on the stream.
    Frame ``i`` has red level ``(8 * i) % 256`` at its left edge, to find it again.
    """
    width, height = 160, 96
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream(
            "libx264",
            rate=FPS,
            options={"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"},
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            rgb = np.stack(
                [
                    np.full_like(xx, (8 * i) % 256),
                    (yy * 2) % 256,
                    (xx + 3 * i) % 256,
                ],
                axis=-1,
            ).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


class Feed:
    """The packets of a video, handed to a ring one at a time as a demuxer would."""

    def __init__(self, path: Path) -> None:
        self.container = av.open(str(path))
        self.stream = self.container.streams.video[0]
        self.packets = self.container.demux(self.stream)
        self.seconds = 0.0

    def until(self, ring: PacketRing, seconds: float | None = None) -> None:
        """Feed packets up to (decoding time) ``seconds``, or to the end."""
        for packet in self.packets:
            ring.add(packet)
            if packet.dts is not None:
                self.seconds = float(packet.dts * packet.time_base)
            if seconds is not None and self.seconds >= seconds:
                return
        self.container.close()


def trigger_two_clips(recorder: ClipRecorder, video: Path) -> tuple[PacketRing, Feed]:
    """Two events on stream ``cam``, at 1 s and 2 s, each waited for; the ring and the feed."""
    ring = recorder.ring("cam")
    feed = Feed(video)
    for pts in (1.0, 2.0):
        feed.until(ring, pts + 0.1)
        recorder.trigger("cam", {"n": pts}, pts, np.zeros((8, 8, 3), np.uint8))
        feed.until(ring, pts + 0.5)
        assert recorder.flush(HANG)
    return ring, feed


def probe(path: Path) -> dict:
    done = subprocess.run(
        [
            "ffprobe", "-v", "error", "-count_frames", "-show_entries",
            "stream=codec_name,width,height,nb_read_frames:format=format_name,duration",
            "-of", "json", str(path),
        ],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def decode(path: Path) -> list[av.VideoFrame]:
    with av.open(str(path)) as container:
        return list(container.decode(video=0))


def red(frame: av.VideoFrame) -> int:
    return int(frame.to_ndarray(format="rgb24")[:, :8, 0].mean().round())


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def video(tmp_path: Path) -> Path:
    return encode(tmp_path / "source.mp4")  # 5 s


@pytest.fixture
def held_writer(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The clip writer held in its first remux until the test sets the event returned: clips
    end while it is busy, however fast the machine."""
    from vstream.clips import recorder as module

    release = threading.Event()
    remux = module.remux

    def held(*args, **kwargs) -> None:
        assert release.wait(HANG), "the test never released the writer"
        remux(*args, **kwargs)

    monkeypatch.setattr(module, "remux", held)
    return release


def record_on_many_streams(recorder: ClipRecorder, video: Path, streams: int) -> None:
    """A clip being recorded on each of ``streams`` streams (an event at 2.0 s, its post-roll
    not come yet), as at a shutdown."""
    for n in range(streams):
        ring = recorder.ring(f"cam{n}")
        Feed(video).until(ring, 2.1)
        assert recorder.trigger(f"cam{n}", {"n": n}, 2.0) is not None


def test_ring_starts_at_a_keyframe_and_keeps_its_pre_roll(video: Path) -> None:
    ring = PacketRing(keep_seconds=1.0)
    feed = Feed(video)
    feed.until(ring, 3.0)
    packets = ring.packets()
    assert packets[0].keyframe
    # Trimmed a GOP at a time: at least the pre-roll, at most one GOP (0.4 s) more.
    span = feed.seconds - packets[0].seconds
    assert 1.0 <= span <= 1.0 + GOP / FPS + 2 / FPS
    assert ring.template is not None and ring.template.codec == "h264"
    assert all(isinstance(p.data, bytes) and p.data for p in packets)
    feed.until(ring)  # the flush packet at the end is ignored
    assert ring.packets()[0].keyframe


def test_ring_is_bounded_in_bytes(video: Path) -> None:
    whole = PacketRing(keep_seconds=100)
    Feed(video).until(whole)
    gop_bytes = max(
        sum(len(p.data) for p in whole.packets()[i : i + GOP])
        for i in range(0, len(whole.packets()), GOP)
    )
    ring = PacketRing(keep_seconds=100, max_bytes=3 * gop_bytes)
    Feed(video).until(ring)
    assert ring.bytes <= 3 * gop_bytes
    assert ring.packets()[0].keyframe and ring.seconds < 5.0
    tiny = PacketRing(keep_seconds=100, max_bytes=16)  # smaller than any GOP
    Feed(video).until(tiny)
    assert tiny.overflows > 0 and tiny.bytes <= 16


def test_ring_restarts_on_a_new_input(video: Path, tmp_path: Path) -> None:
    ring = PacketRing(keep_seconds=2.0)
    Feed(video).until(ring, 2.0)
    other = encode(tmp_path / "other.ts", 30, fmt="mpegts")
    feed = Feed(other)
    feed.until(ring, 0.2)  # a new stream object: open() is implicit
    assert ring.packets()[0].keyframe
    assert ring.packets()[-1].time_base == feed.stream.time_base
    assert ring.seconds < 0.5


def test_a_clip_holds_the_event_with_its_pre_roll_and_plays(video: Path, tmp_path: Path) -> None:
    clips = tmp_path / "clips"
    recorder = ClipRecorder(clips, pre_roll=1.0, post_roll=1.0, merge=0.5)
    try:
        ring = recorder.ring("cam")
        feed = Feed(video)
        feed.until(ring, 2.6)  # the event at 2.0 arrives after inference, some frames later
        snapshot = torch.zeros((96, 160, 3), dtype=torch.uint8)
        snapshot[:, :, 1] = 200
        clip_id = recorder.trigger("cam", {"type": "line", "line": "door"}, 2.0, lambda: snapshot)
        assert clip_id is not None
        # An event within `merge` of the clip's last one joins it instead of making another.
        assert recorder.trigger("cam", {"type": "zone", "zone": "yard"}, 2.4, snapshot) == clip_id
        assert recorder.recording()[0]["id"] == clip_id
        feed.until(ring)
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    assert recorder.stats.failures == 0
    assert recorder.stats.clips == 1 and recorder.stats.extended == 1
    [info] = recorder.clips()
    assert info["id"] == clip_id and info["stream"] == "cam"
    assert [e["type"] for e in info["events"]] == ["line", "zone"]
    assert info["event"] == {"type": "line", "line": "door", "pts": 2.0}
    # Pre-roll: from the keyframe at or before 1.0 s; post-roll: to 1 s after the last event.
    assert 0.6 <= info["start_pts"] <= 1.0
    assert 3.4 <= info["end_pts"] <= 3.4 + 2 / FPS
    path = Path(info["path"])
    assert path.suffix == ".mp4" and path.parent == clips
    assert info["bytes"] > path.stat().st_size > 0
    # It plays end to end: FFmpeg's own tool and PyAV decode every picture in it.
    probed = probe(path)
    stream = probed["streams"][0]
    assert stream["codec_name"] == "h264" and (stream["width"], stream["height"]) == (160, 96)
    frames = decode(path)
    assert int(stream["nb_read_frames"]) == len(frames)
    expected = round((info["end_pts"] - info["start_pts"]) * FPS)
    assert len(frames) == expected
    # Remuxed, not re-encoded: the picture of the event is the source's frame 50 (2.0 s).
    at_event = frames[round((2.0 - info["start_pts"]) * FPS)]
    assert abs(red(at_event) - (8 * 50) % 256) <= 3
    assert frames[0].key_frame and abs(frames[0].time) < 1e-6
    # The annotated snapshot, as a JPEG of the picture given.
    snap = Path(info["snapshot_path"])
    assert snap.read_bytes()[:2] == b"\xff\xd8"
    with av.open(str(snap)) as container:
        picture = next(container.decode(video=0)).to_ndarray(format="rgb24")
    assert picture.shape == (96, 160, 3) and abs(int(picture[..., 1].mean()) - 200) <= 3
    description = json.loads((clips / f"{clip_id}.json").read_text())
    assert description["clip"] == path.name and description["snapshot"] == snap.name
    # The size it states is the clip's on disk, all three files (its own included).
    on_disk = sum(os.path.getsize(clips / f"{clip_id}{s}") for s in (".mp4", ".jpg", ".json"))
    assert description["bytes"] == info["bytes"] == on_disk
    assert no_temp_files(clips)
    # A new recorder on the same directory lists the clip again.
    again = ClipRecorder(clips)
    try:
        assert [c["id"] for c in again.clips()] == [clip_id]
    finally:
        again.close()


def test_events_merge_within_the_window_else_each_has_its_own_whole_clip(
    video: Path, tmp_path: Path
) -> None:
    """The merge rule: an event joins the clip being recorded only within ``merge`` seconds
    of that clip's last event; any other event has its own clip with its whole pre-roll,
    even where that footage is in the clip before."""
    recorder = ClipRecorder(tmp_path / "clips", pre_roll=1.0, post_roll=1.0, merge=0.5)
    try:
        ring = recorder.ring("cam")
        feed = Feed(video)
        ids = []
        for pts in (1.6, 2.0, 2.6):  # 2.0 joins 1.6's clip; 2.6 is 0.6 s after 2.0
            feed.until(ring, pts + 0.1)
            ids.append(recorder.trigger("cam", {"n": pts}, pts))
        feed.until(ring)
        assert recorder.flush(10)
    finally:
        recorder.close()
    assert ids[0] == ids[1] != ids[2]
    first, second = sorted(recorder.clips(), key=lambda c: c["start_pts"])
    # Times to the microsecond, as the events' (a packet's end is a sum of floats).
    times = [clip[key] for clip in (first, second) for key in ("start_pts", "end_pts")]
    assert times == [round(t, 6) for t in times]
    assert [e["pts"] for e in first["events"]] == [1.6, 2.0]
    assert [e["pts"] for e in second["events"]] == [2.6]
    assert 3.0 <= first["end_pts"] <= 3.0 + 2 / FPS  # 1 s after its last event
    assert second["start_pts"] <= 1.6 < first["end_pts"]  # its own pre-roll, shared footage
    assert recorder.stats.extended == 1 and recorder.stats.clips == 2


def test_clips_ending_together_are_all_written(
    video: Path, tmp_path: Path, held_writer: threading.Event
) -> None:
    """A burst of events with ``merge=0`` (a group through a door: a clip each) and a
    shutdown with many cameras end more clips at once than the writer takes in the
    meantime: each waits for it, as its packets are in memory already."""
    recorder = ClipRecorder(tmp_path / "clips", pre_roll=1.0, post_roll=1.0, merge=0)
    try:
        ring = recorder.ring("door")
        feed = Feed(video)
        feed.until(ring, 2.3)
        burst = {recorder.trigger("door", {"track": n}, 2.0 + n / 100) for n in range(20)}
        feed.until(ring)  # every post-roll ends while the writer is held
        assert len(burst) == 20 and not recorder.recording()
        record_on_many_streams(recorder, video, 20)
        assert not recorder.flush(0)  # all ended, none written yet
        held_writer.set()
        assert recorder.flush(HANG)
    finally:
        recorder.close(HANG)
    assert recorder.stats.clips == 40 and len(recorder.clips()) == 40
    assert recorder.stats.failures == recorder.stats.dropped == 0


def test_clips_dropped_for_a_writer_far_behind_are_counted_and_logged_once(
    video: Path, tmp_path: Path, held_writer: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """What remains of dropping: a writer behind by ``max_queued_bytes`` (here any clip
    waiting), one error line for the episode, one line when the writer caught up."""
    caplog.set_level(logging.DEBUG, logger="vstream.clips")
    recorder = ClipRecorder(
        tmp_path / "clips", pre_roll=0.5, post_roll=0.5, merge=0, max_queued_bytes=1
    )
    try:
        ring = recorder.ring("door")
        feed = Feed(video)
        feed.until(ring, 2.1)
        for n in range(5):
            recorder.trigger("door", {"track": n}, 2.0 + n / 100)
        feed.until(ring, 3.0)  # all five end; the first waits for the writer
        assert recorder.stats.dropped == recorder.stats.failures == 4
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors
        assert "the writer is behind" in errors[0] and "max_queued_bytes 1" in errors[0]
        held_writer.set()
        wait_for(lambda: recorder.stats.clips == 1, HANG, "the first clip")
        recorder.trigger("door", {"track": 5}, 3.2)  # the writer has nothing waiting: kept
        feed.until(ring)
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    assert recorder.stats.clips == 2 and recorder.stats.dropped == 4
    assert "the writer caught up; writing clips again (4 dropped so far)" in caplog.text


def test_close_names_and_counts_the_clips_it_gives_up_on(
    video: Path, tmp_path: Path, held_writer: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer too slow for ``close``'s timeout (a stuck network share): the clips it has
    not written are counted and named, not left silently to a daemon thread."""
    caplog.set_level(logging.ERROR, logger="vstream.clips")
    recorder = ClipRecorder(tmp_path / "clips", pre_roll=1.0, post_roll=1.0)
    record_on_many_streams(recorder, video, 5)
    ids = [c["id"] for c in recorder.recording()]
    recorder.close(timeout=0.5)
    assert recorder.stats.unwritten == recorder.stats.failures == 5
    assert recorder.stats.clips == 0 and recorder.clips() == []
    [line] = [r.getMessage() for r in caplog.records]
    assert "gave up after 0.5 s waiting for the writer: 5 clips unwritten" in line
    assert sum(clip_id in line for clip_id in ids) == 3 and "and 2 more" in line
    held_writer.set()  # the clip in hand is finished, the rest are not: the worker stops
    wait_for(lambda: recorder.stats.clips == 1, HANG, "the clip being written at close")


def test_a_b_frame_clip_ends_with_every_picture_it_describes(tmp_path: Path) -> None:
    """With B-frames, the pictures shown just before a P-frame are decoded after it: a clip
    cut at the first packet decoded past its end lacked them, its description not."""
    video = encode(tmp_path / "source.mp4")
    with av.open(str(video)) as container:
        assert any(p.pts != p.dts for p in container.demux(video=0) if p.size), "B-frames"
    events = (3.0, 3.1, 3.2, 3.3)
    recorder = ClipRecorder(tmp_path / "clips", pre_roll=1.0, post_roll=1.0, merge=0)
    try:
        ring = recorder.ring("cam")
        feed = Feed(video)
        for pts in events:
            feed.until(ring, pts + 0.2)
            recorder.trigger("cam", {"n": pts}, pts)
        feed.until(ring)
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    clips = sorted(recorder.clips(), key=lambda c: c["events"][0]["pts"])
    assert [c["events"][0]["pts"] for c in clips] == list(events)
    for info in clips:
        assert info["end_pts"] >= info["events"][0]["pts"] + 1.0
        frames = decode(Path(info["path"]))
        first = round(info["start_pts"] * FPS)
        assert len(frames) == round((info["end_pts"] - info["start_pts"]) * FPS), info
        assert [round(f.time * FPS) for f in frames] == list(range(len(frames)))
        reds = [red(f) for f in frames]  # the source's pictures, each once, in order
        assert all(abs(r - 8 * (first + i) % 256) <= 3 for i, r in enumerate(reds)), reds


def test_no_clip_without_video_and_a_raw_stream_says_why(
    video: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw H.264 stream's packets have no time stamps, so nothing places them in a clip:
    one clear line, no clip id. A clip whose stream sent no picture is neither written nor
    listed (a description alone would list a clip without video)."""
    caplog.set_level(logging.ERROR, logger="vstream.clips")
    clips = tmp_path / "clips"
    recorder = ClipRecorder(clips, pre_roll=0.5, post_roll=0.5)
    try:
        raw = encode(tmp_path / "source.h264", 75, fmt="h264")
        ring = recorder.ring("raw")
        Feed(raw).until(ring)
        assert ring.untimed == 75 and not ring.packets()
        assert recorder.trigger("raw", {"n": 1}, 2.0) is None
        assert recorder.trigger("raw", {"n": 2}, 2.5) is None
        [line] = [r.getMessage() for r in caplog.records]
        assert "'raw', whose packets have no time stamps (a raw H.264 or HEVC stream" in line
        silent = Feed(video)
        recorder.ring("silent").open(silent.stream)  # its demuxer stops before any packet
        silent.container.close()
        assert recorder.trigger("silent", {"n": 3}, 1.0, np.zeros((8, 8, 3), np.uint8))
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    assert recorder.stats.failures == 3 and recorder.stats.clips == 0
    assert recorder.clips() == [] and not (clips.exists() and list(clips.iterdir()))
    assert "not written: no video packets" in caplog.records[-1].getMessage()


def test_the_clips_of_a_run_hold_the_records_events_with_their_pts(tmp_path: Path) -> None:
    """End to end on the sample's first 2.1 s (three crossings 0.24 s apart, each
    confirmed some frames after the pts it is dated at): with ``merge_seconds: 0.2``
    each crossing has its own clip, and each clip states the record's event as it is."""
    from helpers import wait_for

    from vstream.assets import DEMO_MODEL, SAMPLE_VIDEO
    from vstream.config import parse_data
    from vstream.engine import Engine

    line = {"name": "gate", "start": [320, 360], "end": [320, 0]}
    pipeline = {
        "name": "p",
        "model": {"path": str(DEMO_MODEL)},
        "runtime": {"device": "cpu"},
        "analytics": {"lines": [line]},
        "sources": [{"id": "s", "uri": str(SAMPLE_VIDEO), "end_seconds": 2.1}],
        "sinks": [
            {"type": "jsonl", "path": "out.jsonl"},
            {"type": "clips", "directory": "clips", "merge_seconds": 0.2},
        ],
    }
    config = parse_data({"pipelines": [pipeline]}, base_dir=tmp_path)
    with Engine(config, base_dir=tmp_path) as engine:
        wait_for(engine.files_done, 120, "the run")
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    events = [e for r in records for e in r["events"]]
    assert len(events) == 3
    assert all(e["pts"] < r["pts"] for r in records for e in r["events"]), "confirmed later"
    index = ClipIndex(tmp_path / "clips")
    assert index.load() == 3
    clips = sorted(index.list(), key=lambda c: c.events[0]["pts"])
    assert [c.events for c in clips] == [[e] for e in events]
    for clip in clips:
        assert clip.bytes == sum(os.path.getsize(tmp_path / "clips" / n) for n in clip.files)
        description = json.loads((tmp_path / "clips" / f"{clip.id}.json").read_text())
        assert description["bytes"] == clip.bytes


def test_an_annex_b_source_is_remuxed_to_mp4(tmp_path: Path) -> None:
    source = encode(tmp_path / "source.ts", 75, fmt="mpegts")  # SPS/PPS in-band, 90 kHz
    recorder = ClipRecorder(tmp_path / "clips", pre_roll=0.5, post_roll=0.5)
    try:
        ring = recorder.ring("ts")
        feed = Feed(source)
        feed.until(ring, 1.8)
        recorder.trigger("ts", {"type": "class", "label": "person"}, 1.6)
        feed.until(ring)
        recorder.flush(HANG)
    finally:
        recorder.close()
    [info] = recorder.clips()
    assert recorder.stats.failures == 0 and info["snapshot"] is None
    frames = decode(Path(info["path"]))
    assert len(frames) == int(probe(Path(info["path"]))["streams"][0]["nb_read_frames"]) > 10


def test_a_clip_of_a_stalled_stream_is_written_with_what_it_has(video: Path, tmp_path: Path):
    recorder = ClipRecorder(tmp_path / "clips", pre_roll=1.0, post_roll=30.0, stall_seconds=0.3)
    try:
        ring = recorder.ring("cam")
        Feed(video).until(ring, 2.5)
        recorder.trigger("cam", {"type": "class"}, 2.0)
        [info] = wait_for(recorder.clips, HANG, "the stalled stream's clip")
    finally:
        recorder.close()
    assert info["reason"] == "stalled" and len(decode(Path(info["path"]))) > 25


def test_retention_deletes_the_oldest(video: Path, tmp_path: Path) -> None:
    clips = tmp_path / "clips"
    recorder = ClipRecorder(clips, pre_roll=0.2, post_roll=0.2, retention=Retention(max_count=2))
    try:
        ring = recorder.ring("cam")
        feed = Feed(video)
        ids = []
        for pts in (1.0, 2.0, 3.0, 4.0):
            feed.until(ring, pts + 0.1)
            ids.append(recorder.trigger("cam", {"n": pts}, pts))
            feed.until(ring, pts + 0.5)
            assert recorder.flush(HANG)
        assert len(set(ids)) == 4
        assert [c["id"] for c in recorder.clips()] == ids[:1:-1]  # newest first
        names = {p.name for p in clips.iterdir()}
        for old in ids[:2]:
            assert not [n for n in names if n.startswith(old)]
        for kept in ids[2:]:
            assert {f"{kept}.mp4", f"{kept}.json"} <= names
        assert recorder.stats.deleted == 2
        # A byte cap below two clips keeps only the newest.
        newest_bytes = recorder.clips()[0]["bytes"]
        recorder.retention = Retention(max_count=None, max_bytes=newest_bytes + 1)
        feed.until(ring, 4.6)
        recorder.trigger("cam", {"n": 5}, 4.5)
        feed.until(ring)
        assert recorder.flush(HANG)
        assert len(recorder.clips()) == 1
        assert recorder.index.bytes == sum(p.stat().st_size for p in clips.iterdir())
    finally:
        recorder.close()


def test_an_unwritable_directory_is_a_counted_failure_and_recording_goes_on(
    video: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the clip directory should be")
    clips = blocker / "clips"
    caplog.set_level(logging.DEBUG, logger="vstream.clips")
    recorder = ClipRecorder(clips, pre_roll=0.2, post_roll=0.2)
    try:
        ring, feed = trigger_two_clips(recorder, video)
        assert recorder.stats.failures == 2 and recorder.stats.clips == 0
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, [r.getMessage() for r in errors]  # one line, not one per clip
        assert errors[0].exc_info is None and "\n" not in errors[0].getMessage()
        assert "cannot create" in errors[0].getMessage() and str(clips) in errors[0].getMessage()
        # The directory becomes writable: the next event makes a clip.
        blocker.unlink()
        feed.until(ring, 3.1)
        recorder.trigger("cam", {"n": 3}, 3.0)
        feed.until(ring)
        assert recorder.flush(HANG)
        assert recorder.stats.clips == 1 and len(recorder.clips()) == 1
        assert no_temp_files(clips)
    finally:
        recorder.close()


def test_clips_are_skipped_below_min_free_bytes_counted_and_logged_once(
    video: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Clips must not take the disk's last space, which the records need more.

    No disk has 2**50 bytes free, so the real free space of ``tmp_path`` is below it.
    """
    clips = tmp_path / "clips"
    caplog.set_level(logging.INFO, logger="vstream.clips")
    recorder = ClipRecorder(clips, pre_roll=0.2, post_roll=0.2, min_free_bytes=2**50)
    try:
        ring, feed = trigger_two_clips(recorder, video)
        assert recorder.stats.skipped_low_space == 2 and recorder.stats.clips == 0
        assert recorder.clips() == [] and not list(clips.iterdir())
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings  # one line for the episode, not one per clip
        assert "below min_free_bytes 1125899906842624" in warnings[0]
        recorder.min_free_bytes = 1  # space is back
        feed.until(ring, 3.1)
        recorder.trigger("cam", {"n": 3}, 3.0)
        feed.until(ring)
        assert recorder.flush(HANG)
        assert recorder.stats.clips == 1 and recorder.stats.skipped_low_space == 2
        assert "writing clips (2 skipped so far)" in caplog.text
    finally:
        recorder.close()


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 200 KiB tmpfs: a disk that fills up (root only; skipped where mounting is refused)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill up here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], timeout=30, check=False)


def test_a_full_disk_is_a_counted_failure_without_half_files(
    tmp_path: Path, tiny_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    big = encode(tmp_path / "big.mp4", 100, gop=100)  # one 4 s GOP, larger than the space left
    free = os.statvfs(tiny_disk)
    (tiny_disk / "filler").write_bytes(b"\0" * (free.f_bavail * free.f_frsize - 8192))
    caplog.set_level(logging.ERROR, logger="vstream.clips")
    recorder = ClipRecorder(tiny_disk, pre_roll=1.0, post_roll=3.0)
    try:
        ring = recorder.ring("cam")
        feed = Feed(big)
        feed.until(ring, 0.5)
        recorder.trigger("cam", {"n": 1}, 0.4, np.zeros((96, 160, 3), np.uint8))
        feed.until(ring)
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    assert recorder.stats.failures == 1 and recorder.clips() == []
    [line] = [r.getMessage() for r in caplog.records]
    assert "No space left on device" in line or "space" in line.lower(), line
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler"]  # no half clip, no temp


def test_crash_leftovers_are_cleaned_and_whole_clips_kept(video: Path, tmp_path: Path) -> None:
    clips = tmp_path / "clips"
    recorder = ClipRecorder(clips, pre_roll=0.2, post_roll=0.2)
    try:
        ring = recorder.ring("cam")
        feed = Feed(video)
        feed.until(ring, 1.1)
        kept = recorder.trigger("cam", {"n": 1}, 1.0)
        feed.until(ring)
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    # What a crash mid-write leaves: a temporary file, and media without a description.
    (clips / f".{kept}-x.mp4.123.tmp").write_bytes(b"half")
    (clips / "20250101-000000-cam-abcdef.mp4").write_bytes(b"no description")
    (clips / "notes.txt").write_text("someone else's file")
    index = ClipIndex(clips)
    assert index.load() == 1
    assert sorted(p.name for p in clips.iterdir()) == sorted(
        [f"{kept}.mp4", f"{kept}.json", "notes.txt"]
    )
    assert index.list()[0].bytes == sum(
        os.path.getsize(clips / n) for n in (f"{kept}.mp4", f"{kept}.json")
    )


def test_events_without_a_ring_are_counted(tmp_path: Path) -> None:
    recorder = ClipRecorder(tmp_path / "clips")
    try:
        assert recorder.trigger("nobody", {"n": 1}, 1.0) is None
        assert recorder.stats.failures == 1 and recorder.stats.events == 1
    finally:
        recorder.close()


def test_a_clip_from_a_live_rtsp_camera(tmp_path: Path) -> None:
    """Packets from an RTSP camera (RTP timestamps, in-band parameter sets) make a clip."""
    from helpers import RtspServer

    recorder = ClipRecorder(tmp_path / "clips", pre_roll=1.0, post_roll=1.0)
    try:
        ring = recorder.ring("door")
        with RtspServer() as server:
            options = {"rtsp_transport": "tcp"}
            with av.open(server.url(), options=options, timeout=(10, 10)) as container:
                stream = container.streams.video[0]
                ring.open(stream, offset=0.0)
                event = None
                deadline = time.monotonic() + HANG
                for packet in container.demux(stream):
                    ring.add(packet)
                    assert time.monotonic() < deadline, "the camera sent too little"
                    if packet.pts is None:
                        continue
                    seconds = float(packet.pts * packet.time_base)
                    if event is None and ring.seconds >= 1.5:
                        event = seconds
                        recorder.trigger("door", {"type": "class", "label": "ball"}, event)
                    if event is not None and not recorder.recording():
                        break
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    [info] = recorder.clips()
    assert recorder.stats.failures == 0
    assert info["start_pts"] <= event - 1.0 + 1e-6 and info["end_pts"] >= event + 1.0 - 0.1
    frames = decode(Path(info["path"]))
    assert len(frames) == int(probe(Path(info["path"]))["streams"][0]["nb_read_frames"])
    assert len(frames) >= 40 and frames[0].key_frame  # 2 s at 25 fps, from a keyframe


def test_a_recorder_made_in_python_has_the_clips_sinks_rolls(tmp_path: Path) -> None:
    from vstream.config.sinks import ClipsSinkConfig

    recorder = ClipRecorder(tmp_path / "clips")
    config = ClipsSinkConfig(type="clips", directory=str(tmp_path / "clips"))
    try:
        assert (recorder.pre_roll, recorder.post_roll) == (
            config.pre_roll_seconds,
            config.post_roll_seconds,
        )
    finally:
        recorder.close()


def test_a_clips_directory_fills_in_pipeline_and_refuses_stream(tmp_path: Path) -> None:
    import torch
    from pydantic import ValidationError

    from vstream.config import parse_data
    from vstream.config.sinks import ClipsSinkConfig
    from vstream.engine.outputs import FrameOutputs

    sink = {"type": "clips", "directory": str(tmp_path / "clips-{pipeline}")}
    pipeline = {"name": "main", "model": {"path": "vstream://demo.onnx"}, "sinks": [sink]}
    config = parse_data({"pipelines": [pipeline]}, base_dir=tmp_path)
    ((_, recorder),) = FrameOutputs(config.pipelines[0], torch.device("cpu"), {}).recorders
    try:
        assert recorder.directory == tmp_path / "clips-main"
    finally:
        recorder.close()
    with pytest.raises(ValidationError, match="one directory holds the clips of every stream"):
        ClipsSinkConfig(type="clips", directory=str(tmp_path / "{stream}"))


def test_snapshots_are_scaled_as_torchvision_scales_them_without_importing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A preview or snapshot narrower than its frame is resized exactly as torchvision's
    antialiased resize does it, but without ``import torchvision`` (seconds of
    torch._dynamo, which a first snapshot, waiting 1 s, did not get)."""
    import sys

    from torchvision.transforms.v2 import functional as F

    from vstream.clips.jpeg import downscale

    picture = torch.randint(0, 256, (97, 301, 3), dtype=torch.uint8, generator=torch.Generator())
    expected = F.resize(picture.permute(2, 0, 1), [40, 123], antialias=True)
    for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing any of it now raises
    assert torch.equal(downscale(picture, 123), expected)
    assert torch.equal(downscale(picture, 400), picture.permute(2, 0, 1))


def test_a_crossing_counted_as_its_track_is_forgotten_gets_its_whole_pre_roll(
    tmp_path: Path,
) -> None:
    """The engine's clip rings keep what its lines may date an event back by: a crossing
    counted as its track is forgotten comes ``track_buffer_seconds`` (here 6 s) after the
    object was last seen, dated where it was first seen across. The rings kept 3 s past the
    pre-roll whatever the analytics said, and such a clip started 3 s late, without a word."""
    import torch

    from vstream.config import parse_data
    from vstream.engine.outputs import FrameOutputs

    video = encode(tmp_path / "long.mp4", frames=25 * 16)
    config = parse_data(
        {
            "pipelines": [
                {
                    "name": "p",
                    "model": {"path": "vstream://demo.onnx"},
                    "runtime": {"device": "cpu"},
                    "sources": [{"id": "cam", "uri": str(video)}],
                    "analytics": {
                        "lines": [{"name": "gate", "start": [0, 50], "end": [160, 50]}],
                        "tracking": {"track_buffer_seconds": 6},
                    },
                    "sinks": [
                        {
                            "type": "clips",
                            "directory": "clips",
                            "pre_roll_seconds": 4,
                            "post_roll_seconds": 1,
                        }
                    ],
                }
            ]
        },
        base_dir=tmp_path,
    )
    ((_, recorder),) = FrameOutputs(config.pipelines[0], torch.device("cpu"), {}).recorders
    try:
        ring = recorder.ring("cam")
        feed = Feed(video)
        feed.until(ring, 13.0)  # last seen across at 7 s, forgotten 6 s later
        recorder.trigger("cam", {"type": "line_crossing"}, 7.0)
        feed.until(ring)
        assert recorder.flush(HANG)
    finally:
        recorder.close()
    (info,) = recorder.clips()
    assert info["start_pts"] <= 7.0 - 4.0, "the whole pre-roll"
