"""The parts of live sources on their own: freshness queue, backoff, FFmpeg options, names."""

from __future__ import annotations

import random
import threading
import time

import pytest
from helpers import HANG, wait_for
from pydantic import ValidationError

from vstream.engine.queue import FrameQueue
from vstream.errors import SourceError
from vstream.sources import FreshnessPolicy, LiveSource, ReconnectPolicy, SourceOptions
from vstream.sources.backoff import Backoff
from vstream.sources.live import ffmpeg_input
from vstream.uri import stream_name


def test_latest_drops_the_oldest_and_counts_it() -> None:
    queue: FrameQueue[int] = FrameQueue(2, FreshnessPolicy.LATEST)
    for item in range(5):
        assert queue.put(item)
    assert queue.dropped == 3
    assert [queue.get(), queue.get()] == [3, 4]
    assert queue.get(timeout=0.01) is None


def test_block_waits_for_the_consumer_and_drops_nothing() -> None:
    queue: FrameQueue[int] = FrameQueue(2, FreshnessPolicy.BLOCK)
    produced = threading.Thread(target=lambda: [queue.put(i) for i in range(10)])
    produced.start()
    wait_for(lambda: len(queue) == 2, what="the producer to fill the queue")
    time.sleep(0.05)  # a chance to overfill it, were it not held back
    assert len(queue) == 2 and produced.is_alive()
    received = [queue.get(timeout=HANG) for _ in range(10)]
    produced.join(HANG)
    assert received == list(range(10)) and queue.dropped == 0


def test_close_wakes_both_sides() -> None:
    full: FrameQueue[int] = FrameQueue(1, FreshnessPolicy.BLOCK)
    full.put(0)
    empty: FrameQueue[int] = FrameQueue(1, FreshnessPolicy.LATEST)
    results: list[object] = []
    waiters = [
        threading.Thread(target=lambda: results.append(full.put(1))),
        threading.Thread(target=lambda: results.append(empty.get())),
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.05)  # most often they wait by now; either way close must answer them
    full.close()
    empty.close()
    for waiter in waiters:
        waiter.join(HANG)
        assert not waiter.is_alive()
    assert sorted(results, key=str) == [False, None]
    assert full.get() == 0 and full.get() is None  # what was queued is still handed out


def test_backoff_doubles_up_to_the_cap_with_bounded_jitter() -> None:
    policy = ReconnectPolicy(initial_delay_seconds=0.5, max_delay_seconds=4.0, jitter=0.2)
    backoff = Backoff(policy, random.Random(1))
    delays = [backoff.next_delay() for _ in range(7)]
    for delay, base in zip(delays, [0.5, 1, 2, 4, 4, 4, 4], strict=True):
        assert base * 0.8 <= delay <= base * 1.2
    assert len(set(delays)) == len(delays)  # jittered, not in lockstep
    backoff.reset()
    assert 0.4 <= backoff.next_delay() <= 0.6


def test_backoff_limit() -> None:
    backoff = Backoff(ReconnectPolicy(max_attempts=2))
    assert not backoff.exhausted
    backoff.next_delay()
    backoff.next_delay()
    assert backoff.exhausted
    assert not Backoff(ReconnectPolicy(max_attempts=None)).exhausted


@pytest.mark.parametrize(
    ("uri", "expected", "fmt"),
    [
        (
            "rtsp://u:p@cam/live",
            {"rtsp_transport": "udp", "timeout": "2500000", "fpsprobesize": "3"},
            None,
        ),
        ("https://host/stream.m3u8", {"rw_timeout": "2500000", "fpsprobesize": "3"}, None),
        ("/dev/video0", {"fpsprobesize": "3"}, "v4l2"),
    ],
)
def test_ffmpeg_options_carry_transport_and_timeouts(uri: str, expected: dict, fmt: str) -> None:
    options = SourceOptions(rtsp_transport="udp", read_timeout_seconds=2.5)
    assert ffmpeg_input(uri, options) == (expected, fmt)


@pytest.mark.parametrize(
    ("uri", "name"),
    [
        ("rtsp://admin:pw@10.0.0.5:554/live/main", "main"),
        ("rtsp://admin:pw@10.0.0.5/", "10.0.0.5"),
        ("/dev/video2", "video2"),
        ("https://cdn.example/path/index.m3u8", "index"),
        ("videos/clip.mp4", "clip"),
    ],
)
def test_stream_names_never_carry_credentials(uri: str, name: str) -> None:
    assert stream_name(uri) == name


@pytest.mark.parametrize(
    "options",
    [
        {"rtsp_transport": "http"},
        {"queue_size": 0},
        {"read_timeout_seconds": 0},
        {"reconnect": {"max_attempts": -1}},
    ],
)
def test_out_of_range_live_options_are_refused(options: dict) -> None:
    with pytest.raises(ValidationError):
        SourceOptions(**options)


@pytest.mark.parametrize(
    "options",
    [
        SourceOptions(loop=True),
        SourceOptions(start_seconds=5),
        SourceOptions(stride=2),
    ],
)
def test_bad_live_options_fail_before_connecting(options: SourceOptions) -> None:
    with pytest.raises(SourceError):
        LiveSource("rtsp://127.0.0.1:9/none", options=options)
