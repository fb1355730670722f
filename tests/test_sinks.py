"""Sinks: buffering, retries and drops, JSON Lines rotation, and the real MQTT, Redis, HTTP."""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import redis
from helpers import ManualClock, eventually, free_port, wait_for

from vstream.results import Detection, Detections, FrameResult
from vstream.sinks import BufferedSink, DeliveryError, JsonLinesSink, RetryPolicy
from vstream.sinks.base import encode_records
from vstream.sinks.mqtt import MqttTransport
from vstream.sinks.redis_streams import RedisStreamTransport
from vstream.sinks.webhook import WebhookTransport
from vstream.uri import webhook_display

if TYPE_CHECKING:
    from servers import Server, Subscriber

pytest_plugins = ("servers",)

FAST_RETRY = RetryPolicy(initial_delay_seconds=0.02, max_delay_seconds=0.1)


def result(frame: int, stream: str = "cam", detections: int = 1) -> FrameResult:
    dets = Detections.from_detections(
        [Detection((1.0 + i, 2.0, 30.5, 40.25), 0.9, i, f"class{i}") for i in range(detections)]
    )
    return FrameResult(stream, frame, frame / 25, 320, 240, dets)


class FlakyTransport:
    """Fails while ``down`` is set or for its first ``failures`` attempts; keeps the rest."""

    def __init__(self, failures: int = 0, delay: float = 0.0) -> None:
        self.failures, self.delay = failures, delay
        self.down = threading.Event()
        self.received: list[dict] = []
        self.attempts = 0
        self.closed = False

    def send(self, records: Sequence[dict]) -> None:
        self.attempts += 1
        time.sleep(self.delay)
        if self.down.is_set() or self.attempts <= self.failures:
            raise DeliveryError("destination down")
        self.received.extend(records)

    def close(self, timeout: float) -> int:
        self.closed = True
        return 0


class StuckTransport(FlakyTransport):
    """Takes each send and hangs in it until ``release`` is set (a receiver that took the
    connection and never answers, or a pipe nobody reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send(self, records: Sequence[dict]) -> None:
        self.attempts += 1
        self.release.wait(120)


def test_records_are_encoded_as_the_standard_library_reads_them() -> None:
    """Every sink sends orjson's bytes; the standard library's json is the oracle: finite
    records read back equal and, ASCII ones, byte for byte what ``json.dumps`` writes."""
    records = [result(i, detections=i % 4).to_record() for i in range(6)]
    records[2]["events"] = [{"type": "line_crossed", "line": "gate", "direction": "in"}]
    records[3]["zones"] = {"dock": {"count": 2, "by_class": {0: 2}}}  # an int key
    for record in records:
        encoded = encode_records(record)
        assert json.loads(encoded) == json.loads(json.dumps(record))
        if "zones" not in record:
            assert encoded.decode() == json.dumps(record, separators=(",", ":"))
    assert json.loads(encode_records(records)) == json.loads(json.dumps(records))
    unicode = {"stream": "café-🚗", "detections": []}
    assert json.loads(encode_records(unicode).decode("utf-8")) == unicode
    broken = result(1).to_record()
    broken["detections"][0]["bbox"][0] = float("nan")
    broken["detections"][0]["score"] = float("inf")
    read = json.loads(encode_records(broken))  # valid JSON: no NaN, no Infinity
    assert read["detections"][0]["bbox"][0] is None and read["detections"][0]["score"] is None


def test_hurry_cuts_a_long_backoff_short_and_counts_what_is_left() -> None:
    """A second signal: a sender waiting a minute before its next attempt stops at the
    flush's new end, and what it held is counted as dropped."""
    transport = FlakyTransport()
    transport.down.set()
    minute = RetryPolicy(initial_delay_seconds=60, max_delay_seconds=60)
    sink = BufferedSink(transport, name="t", retry=minute, flush_timeout=600)
    sink.write([result(i) for i in range(3)])
    assert eventually(lambda: sink.stats.failures == 1)
    sink.hurry(0.1)
    sink.close()
    assert not sink.alive
    assert (sink.stats.delivered, sink.stats.dropped) == (0, 3)


def test_a_full_blocking_sink_says_it_holds_the_pipeline_back() -> None:
    """A receiver that takes nothing (a stdout pipe nobody reads): with ``block`` the writer
    waits, and so the model; a stop that waits in vain names this sink, not "the model"."""
    transport = StuckTransport()
    sink = BufferedSink(transport, name="t", capacity=2, batch_records=1, overflow="block")
    writer = threading.Thread(target=sink.write, args=([result(i) for i in range(1, 4)],))
    try:
        sink.write([result(0)])
        assert eventually(lambda: transport.attempts == 1)  # in hand, the buffer empty
        assert not sink.holding_back
        writer.start()
        wait_for(lambda: sink.holding_back, what="the third record to wait for room")
        assert writer.is_alive()
    finally:
        transport.release.set()
        if writer.ident is not None:
            writer.join(60)
        sink.close()
    assert not sink.holding_back and sink.stats.delivered == 4


def test_hurry_cuts_short_a_close_already_waiting_for_a_stuck_send() -> None:
    """The second signal comes while the first one's close waits for a send that hangs (a
    receiver that took the connection and never answers): that wait had its end fixed when
    it began (here ten minutes), and the forced exit came first, the totals never said."""
    transport = StuckTransport()
    release = transport.release
    sink = BufferedSink(transport, name="t", flush_timeout=600, send_grace=0.5)
    sink.write([result(0)])
    assert eventually(lambda: transport.attempts == 1)

    def closing() -> bool:
        """Whether the close has begun: a record written then is dropped at once."""
        dropped = sink.stats.dropped
        sink.write([result(1)])
        return sink.stats.dropped > dropped

    closer = threading.Thread(target=sink.close)
    closer.start()
    assert eventually(closing)
    sink.hurry(0.1)
    closer.join(60)
    try:
        assert not closer.is_alive(), "close still waits for the flush's first end"
        stats = sink.stats
        assert stats.delivered == 0 and stats.dropped == stats.produced
    finally:
        release.set()


def test_retries_until_delivered_in_order() -> None:
    transport = FlakyTransport(failures=3)
    sink = BufferedSink(transport, name="t", retry=FAST_RETRY)
    sink.write([result(i) for i in range(5)])
    assert eventually(lambda: len(transport.received) == 5)
    sink.close()
    assert [r["frame"] for r in transport.received] == list(range(5))
    assert (sink.stats.failures, sink.stats.retries, sink.stats.dropped) == (3, 3, 0)
    assert sink.stats.delivered == 5 and transport.closed


def test_partial_delivery_is_not_sent_twice() -> None:
    class HalfTransport(FlakyTransport):
        def send(self, records: Sequence[dict]) -> None:
            self.attempts += 1
            if self.attempts == 1:
                self.received.extend(records[:2])
                raise DeliveryError("connection lost", delivered=2)
            self.received.extend(records)

    transport = HalfTransport()
    sink = BufferedSink(transport, name="t", retry=FAST_RETRY)
    sink.write([result(i) for i in range(5)])
    sink.close()
    assert [r["frame"] for r in transport.received] == list(range(5))
    assert sink.stats.delivered == 5


def test_overflow_drops_oldest_and_counts_them() -> None:
    transport = FlakyTransport()
    transport.down.set()
    sink = BufferedSink(transport, name="t", capacity=10, batch_records=4, retry=FAST_RETRY)
    sink.write([result(0)])
    assert eventually(lambda: transport.attempts >= 1)  # frame 0 is now held by the sender
    for i in range(1, 26):
        sink.write([result(i)])
    assert sink.buffered == 10
    transport.down.clear()
    assert eventually(lambda: sink.buffered == 0)
    sink.close()
    frames = [r["frame"] for r in transport.received]
    assert frames == [0, *range(16, 26)]
    assert sink.stats.dropped == 15
    assert sink.stats.delivered + sink.stats.dropped == 26


def test_a_stuck_destination_never_blocks_the_writer_with_drop_oldest() -> None:
    release = threading.Event()

    class StuckTransport(FlakyTransport):
        def send(self, records: Sequence[dict]) -> None:
            self.attempts += 1
            release.wait(30)  # a destination that does not answer until released
            self.received.extend(records)

    transport = StuckTransport()
    sink = BufferedSink(transport, name="slow", capacity=100, batch_records=10)
    for i in range(300):  # all written while the sender is stuck inside send()
        sink.write([result(i)])
    assert not release.is_set() and transport.attempts <= 1
    assert sink.stats.dropped >= 300 - 100 - 10
    release.set()
    sink.close()
    assert sink.stats.delivered + sink.stats.dropped == 300


class GatedTransport(FlakyTransport):
    """Holds every send until ``release`` is set (up to 30 s), then keeps the records."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send(self, records: Sequence[dict]) -> None:
        self.release.wait(30)
        self.received.extend(records)


def test_block_overflow_makes_the_writer_wait_and_loses_nothing() -> None:
    transport = GatedTransport()
    release = transport.release
    sink = BufferedSink(transport, name="file", capacity=10, batch_records=5, overflow="block")
    written = []

    def writer() -> None:
        for i in range(40):
            sink.write([result(i)])
            written.append(i)

    thread = threading.Thread(target=writer)
    thread.start()
    assert eventually(lambda: sink.buffered == 10)
    assert thread.is_alive() and len(written) < 40, "the writer waits while the buffer is full"
    release.set()
    thread.join(10)
    sink.close()
    assert [r["frame"] for r in transport.received] == list(range(40))
    assert sink.stats.dropped == 0


def test_block_overflow_takes_a_write_larger_than_its_room_part_by_part() -> None:
    """A cluster driver writes up to 512 records at once: past the free space, they wait."""
    transport = GatedTransport()
    release = transport.release
    sink = BufferedSink(transport, name="file", capacity=10, batch_records=5, overflow="block")
    sink.write([result(i) for i in range(4)])
    thread = threading.Thread(target=sink.write, args=([result(i) for i in range(4, 40)],))
    thread.start()
    assert eventually(lambda: sink.buffered == 10)
    assert thread.is_alive(), "the records that do not fit wait for room"
    release.set()
    thread.join(10)
    sink.close()
    assert [r["frame"] for r in transport.received] == list(range(40))
    assert sink.stats.dropped == 0


def test_close_flushes_everything_buffered() -> None:
    transport = FlakyTransport(delay=0.01)
    sink = BufferedSink(transport, name="t", batch_records=7)
    sink.write([result(i) for i in range(100)])
    sink.close()
    assert [r["frame"] for r in transport.received] == list(range(100))
    assert sink.stats.dropped == 0


def test_close_gives_up_after_the_flush_timeout_and_counts() -> None:
    transport = FlakyTransport()
    transport.down.set()
    sink = BufferedSink(transport, name="t", retry=FAST_RETRY, flush_timeout=0.3)
    sink.write([result(i) for i in range(20)])
    started = time.monotonic()
    sink.close()
    assert time.monotonic() - started < 3
    assert sink.stats.dropped == 20 and sink.stats.delivered == 0


def test_rejected_and_exhausted_batches_are_dropped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Rejecting(FlakyTransport):
        def send(self, records: Sequence[dict]) -> None:
            self.attempts += 1
            raise DeliveryError("HTTP 400", retryable=False)

    transport = Rejecting()
    rejecting = BufferedSink(transport, name="r", batch_records=1, retry=FAST_RETRY)
    with caplog.at_level(logging.WARNING, logger="vstream.sinks"):
        rejecting.write([result(i) for i in range(3)])
        rejecting.close()
    assert (rejecting.stats.dropped, rejecting.stats.failures, rejecting.stats.retries) == (3, 3, 0)
    assert transport.attempts == 3
    # Three batches rejected: said once with the drops (one line an interval), and in the
    # totals, not a line a batch.
    assert [r.getMessage() for r in caplog.records] == [
        "sink r: 1 records dropped (rejected: HTTP 400); 1 in all so far",
        "sink r: 3 records produced: 0 delivered, 3 dropped",
    ]

    down = FlakyTransport()
    down.down.set()
    limited = BufferedSink(
        down, name="l", retry=RetryPolicy(0.01, 0.02, max_attempts=3), flush_timeout=5
    )
    limited.write([result(0)])
    limited.close()
    assert (limited.stats.dropped, down.attempts) == (1, 3)


def test_events_only_keeps_frames_with_detections() -> None:
    transport = FlakyTransport()
    sink = BufferedSink(transport, name="events", events_only=True)
    sink.write([result(0, detections=0), result(1), result(2, detections=0), result(3)])
    sink.close()
    assert [r["frame"] for r in transport.received] == [1, 3]


def test_jsonl_rotates_by_size_and_keeps_n_files(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path, rotate_bytes=1000, keep=2)
    for i in range(40):
        sink.send([r.to_record() for r in [result(i)]])
    sink.close()
    files = [path, path.with_name("out.jsonl.1"), path.with_name("out.jsonl.2")]
    assert all(f.exists() for f in files) and not path.with_name("out.jsonl.3").exists()
    frames = [
        json.loads(line)["frame"] for f in reversed(files) for line in f.read_text().splitlines()
    ]
    assert frames == sorted(frames) and frames[-1] == 39
    assert all(f.stat().st_size < 1000 + 200 for f in files)


def test_jsonl_rotates_by_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vstream.sinks import jsonl

    clock = ManualClock()  # a busy machine cannot age it early
    monkeypatch.setattr(jsonl, "time", clock)
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path, rotate_seconds=60)
    sink.send([r.to_record() for r in [result(0)]])
    clock.advance(59.9)
    sink.send([r.to_record() for r in [result(1)]])
    clock.advance(0.2)
    sink.send([r.to_record() for r in [result(2)]])
    sink.close()
    rotated = path.with_name("out.jsonl.1").read_text().splitlines()
    assert [json.loads(line)["frame"] for line in rotated] == [0, 1]
    assert json.loads(path.read_text())["frame"] == 2


def test_stdout_sink_writes_one_record_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    sink = JsonLinesSink(None)
    sink.send([r.to_record() for r in [result(0), result(1, detections=0)]])
    sink.close()
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        result(0).to_record(),
        result(1, detections=0).to_record(),
    ]


class FullDisk:
    """Stands in for ``os.write`` on one file whose disk has ``room`` bytes free.

    It does what the kernel does when a disk fills: a write gets the bytes that
    fit (a partial write, which may end inside a line), and the next write
    fails with ``OSError(ENOSPC)``. Other files pass through to the real
    ``os.write``. Space is given back only by :meth:`free` (a file cut back
    keeps its blocks here: the stricter case, as every retry then fails until
    space is freed). It wraps the OS call the sink makes, so the sink's own
    bookkeeping of what reached the file is what is tested.
    """

    def __init__(self, path: Path, room: int) -> None:
        self.inode = path.stat().st_ino
        self.room: int | None = room
        self.refused = 0
        self._real = os.write
        self._lock = threading.Lock()

    def __call__(self, fd: int, data: bytes | memoryview) -> int:
        if os.fstat(fd).st_ino != self.inode:
            return self._real(fd, data)
        with self._lock:
            if self.room is None:
                return self._real(fd, data)
            if self.room == 0:
                self.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written = self._real(fd, bytes(data[: self.room]))
            self.room -= written
            return written

    def free(self) -> None:
        with self._lock:
            self.room = None


def whole_lines(path: Path) -> list[int]:
    """The frames in ``path``, which must end with a whole line (or be empty)."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"a partial last line: {data[-60:]!r}"
    return [json.loads(line)["frame"] for line in data.splitlines()]


def test_a_full_disk_keeps_whole_lines_and_is_retried_until_space_is_freed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.jsonl"
    transport = JsonLinesSink(path)
    line = len(json.dumps(result(0).to_record(), separators=(",", ":"))) + 1
    disk = FullDisk(path, room=line * 7 + line // 2)  # the 8th line is cut in its middle
    monkeypatch.setattr(os, "write", disk)
    sink = BufferedSink(
        transport, name="jsonl", batch_records=5, overflow="block", retry=FAST_RETRY
    )
    sink.write([result(i) for i in range(20)])
    assert eventually(lambda: disk.refused >= 3), "retried while the disk is full"
    assert sink.state == "retrying" and sink.error is None, "a full disk is not a failure"
    assert sink.outage is not None and "No space left on device" in sink.outage
    assert "out.jsonl" in sink.outage
    assert whole_lines(path) == list(range(7)), "cut back to the last whole line"
    assert sink.stats.delivered == 7 and sink.stats.failures >= 3 and sink.stats.retries >= 3
    disk.free()
    assert eventually(lambda: sink.stats.delivered == 20)
    assert sink.state == "ok" and sink.outage is None
    sink.close()
    assert whole_lines(path) == list(range(20)), "every record once, in order"
    assert sink.stats.dropped == 0


def test_stdout_on_a_full_disk_keeps_every_record_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vstream run > file`` on a disk that fills: stdout's buffer let the partial write
    pass as written, so records were lost uncounted and the file kept half a line, then the
    sink failed for good. Now the rest of a cut line goes first at the next write (stdout
    cannot be cut back), the batch is retried until space is freed, and the file holds
    every record once, in order."""
    path = tmp_path / "stdout.jsonl"
    monkeypatch.setattr(sys, "stdout", open(path, "w"))  # noqa: SIM115 (closed below)
    line = len(json.dumps(result(0).to_record(), separators=(",", ":"))) + 1
    disk = FullDisk(path, room=line * 7 + line // 2)  # the 8th line is cut in its middle
    monkeypatch.setattr(os, "write", disk)
    sink = BufferedSink(
        JsonLinesSink(None), name="stdout", batch_records=5, overflow="block", retry=FAST_RETRY
    )
    sink.write([result(i) for i in range(20)])
    assert eventually(lambda: disk.refused >= 3), "retried while the disk is full"
    assert sink.state == "retrying" and "No space left on device" in (sink.outage or "")
    assert sink.stats.delivered == 8, "seven whole lines and the one cut, finished first"
    disk.free()
    assert eventually(lambda: sink.stats.delivered == 20)
    sink.close()
    sys.stdout.close()
    assert whole_lines(path) == list(range(20)), "every record once, in order"
    assert (sink.state, sink.stats.dropped) == ("ok", 0)


def test_any_other_write_error_fails_the_jsonl_sink_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.jsonl"
    transport = JsonLinesSink(path)
    inode = path.stat().st_ino
    real = os.write
    calls = []

    def broken(fd: int, data: bytes | memoryview) -> int:
        if os.fstat(fd).st_ino != inode:
            return real(fd, data)
        calls.append(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "write", broken)
    sink = BufferedSink(transport, name="jsonl", overflow="block", retry=FAST_RETRY)
    sink.write([result(0), result(1)])
    sink.close()
    assert sink.state == "failed" and "Input/output error" in str(sink.error)
    assert len(calls) == 1 and sink.stats.dropped == 2


def test_a_write_error_after_part_of_a_batch_leaves_no_part_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file size limit (EFBIG) or an I/O error can come after the kernel took part of a
    batch: the sink fails and counts the batch lost, so the file is cut back to before it
    (it kept half a line, and records counted as dropped)."""
    path = tmp_path / "out.jsonl"
    transport = JsonLinesSink(path)
    transport.send([result(i).to_record() for i in range(2)])
    inode, real = path.stat().st_ino, os.write
    writes = []

    def half_then_too_big(fd: int, data: bytes | memoryview) -> int:
        """The kernel at a file size limit: the first write takes part, the next none."""
        if os.fstat(fd).st_ino != inode:
            return real(fd, data)
        writes.append(len(data))
        if len(writes) == 1:
            return real(fd, bytes(data[: len(data) // 2 + 7]))
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(os, "write", half_then_too_big)
    sink = BufferedSink(transport, name="jsonl", overflow="block", retry=FAST_RETRY)
    sink.write([result(i) for i in range(2, 5)])
    sink.close()
    assert sink.state == "failed" and "File too large" in str(sink.error)
    assert (sink.stats.delivered, sink.stats.dropped) == (0, 3)
    assert whole_lines(path) == [0, 1]


def test_appending_to_a_file_that_ends_inside_a_line_starts_a_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run killed mid-write leaves half a line; the next run appending (the daemon's
    default) glued its first record to it, and both were lost to a JSON reader."""
    path = tmp_path / "out.jsonl"
    path.write_bytes(encode_records(result(0).to_record()) + b"\n" + b'{"stream":"cam","fra')
    with caplog.at_level(logging.WARNING, logger="vstream.sinks"):
        sink = JsonLinesSink(path, append=True)
    sink.send([result(i).to_record() for i in (1, 2)])
    sink.close()
    lines = path.read_bytes().splitlines()
    assert lines[1] == b'{"stream":"cam","fra'
    assert [json.loads(line)["frame"] for line in lines[:1] + lines[2:]] == [0, 1, 2]
    assert "ended inside a line" in caplog.text
    caplog.clear()
    JsonLinesSink(path, append=True).close()  # a file that ends well is left as it is
    assert path.read_bytes().count(b"\n") == 4 and not caplog.text


def test_a_replaced_file_keeps_its_earlier_records_until_the_first_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``append: false`` (``vstream run --output``) emptied the file as the sink opened, so a
    run that failed on a corrupt input lost the last run's records for none of its own."""
    path = tmp_path / "out.jsonl"
    earlier = b"".join(encode_records(result(i).to_record()) + b"\n" for i in range(3))
    path.write_bytes(earlier)
    with caplog.at_level(logging.INFO, logger="vstream.sinks"):
        JsonLinesSink(path, append=False).close()
    assert path.read_bytes() == earlier
    assert "no record written, so the records of an earlier run in it are kept" in caplog.text
    sink = JsonLinesSink(path, append=False)
    assert path.read_bytes() == earlier
    sink.send([result(7).to_record()])
    assert [json.loads(line)["frame"] for line in path.read_bytes().splitlines()] == [7]
    sink.send([result(8).to_record()])
    sink.close()
    assert [json.loads(line)["frame"] for line in path.read_bytes().splitlines()] == [7, 8]


def test_rotation_goes_on_when_the_file_was_moved_away(tmp_path: Path) -> None:
    """Someone moved or deleted the file being written (logrotate, a cleanup): the rotation
    that renames it failed the sink for good."""
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path, rotate_bytes=1)
    sink.send([result(0).to_record()])
    path.unlink()
    sink.send([result(1).to_record()])
    sink.send([result(2).to_record()])
    sink.close()
    assert whole_lines(path) == [2] and whole_lines(tmp_path / "out.jsonl.1") == [1]


def test_a_file_per_stream_keeps_a_bounded_number_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams that come and go each opened a file that stayed open: a daemon ran out of
    descriptors, and the sink failed for every stream. The least recently written closes
    beyond the bound, and is appended to, not emptied, when its stream writes again."""
    from vstream.sinks import jsonl

    monkeypatch.setattr(jsonl, "MAX_OPEN_FILES", 2)
    sink = jsonl.JsonLinesPerStream(str(tmp_path / "{stream}.jsonl"), "p")
    order = [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("d", 0), ("a", 2)]
    descriptors = len(os.listdir("/proc/self/fd"))
    for stream, frame in order:
        sink.send([result(frame, stream=stream).to_record()])
        assert len(sink.files) <= 2
        assert len(os.listdir("/proc/self/fd")) <= descriptors + 2
    assert sink.records == len(order)
    sink.close()
    for stream in "abcd":
        expected = [frame for s, frame in order if s == stream]
        assert whole_lines(tmp_path / f"{stream}.jsonl") == expected, stream


class _Receiver(BaseHTTPRequestHandler):
    """Answers with the next planned status (200 when the plan is empty)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        status, delay = server.plan.pop(0) if server.plan else (200, 0.0)  # type: ignore[attr-defined]
        time.sleep(delay)
        if status == 200:
            seen = (self.headers.get("Authorization"), self.headers.get("Content-Type"))
            server.bodies.append((seen, json.loads(body)))  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def webhook_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.plan, server.bodies = [], []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_webhook_posts_batches_and_retries_server_errors_and_timeouts(
    webhook_server: ThreadingHTTPServer,
) -> None:
    webhook_server.plan += [(503, 0.0), (200, 1.0), (400, 0.0)]  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{webhook_server.server_port}/hook"
    transport = WebhookTransport(url=url, timeout=0.5, headers={"Authorization": "Bearer abc"})
    sink = BufferedSink(transport, name="hook", batch_records=50, retry=FAST_RETRY)
    sink.write([result(i) for i in range(10)])
    assert eventually(lambda: webhook_server.bodies)  # type: ignore[attr-defined]
    # 503: retried; the slow 200 timed out: retried; then the 400 rejected the batch.
    assert (sink.stats.failures, sink.stats.dropped) == (3, 10)
    sink.write([result(i) for i in range(10, 15)])
    sink.close()
    # The receiver that answered too late did get frames 0-9: webhooks are at least once.
    bodies = webhook_server.bodies  # type: ignore[attr-defined]
    assert [[r["frame"] for r in records] for _, records in bodies] == [
        list(range(10)),
        list(range(10, 15)),
    ]
    assert {seen for seen, _ in bodies} == {("Bearer abc", "application/json")}
    assert bodies[1][1][0] == result(10).to_record()


@pytest.mark.parametrize(
    ("status", "advice"),
    [(401, "check its headers (Authorization)"), (404, "check the URL")],
)
def test_webhook_a_wrong_token_or_url_fails_the_sink_once(
    webhook_server: ThreadingHTTPServer, status: int, advice: str
) -> None:
    """Every batch would get the same 401 or 404: they were dropped batch by batch, a warning
    each, the sink saying "ok". It fails once now, after one request, saying what to check."""
    webhook_server.plan += [(status, 0.0)] * 5  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{webhook_server.server_port}/hook"
    sink = BufferedSink(WebhookTransport(url=url), name="hook", batch_records=4, retry=FAST_RETRY)
    sink.write([result(i) for i in range(10)])
    assert eventually(lambda: sink.state == "failed")
    shown = f"http://127.0.0.1:{webhook_server.server_port}/***"
    assert str(sink.error) == f"webhook {shown} answered HTTP {status}: {advice}"
    sink.close()
    assert (sink.stats.failures, sink.stats.delivered, sink.stats.dropped) == (0, 0, 10)
    assert len(webhook_server.plan) == 4, "one request"  # type: ignore[attr-defined]


WEBHOOK_SECRET = "XoXbSeCrEt0123"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"https://hooks.slack.com/services/T0001/B0001/{WEBHOOK_SECRET}",
            "https://hooks.slack.com/***",
        ),
        (
            f"http://u:pw@127.0.0.1:8080/api/webhooks/1/{WEBHOOK_SECRET}",
            "http://127.0.0.1:8080/***",
        ),
        (f"https://example.com?token={WEBHOOK_SECRET}", "https://example.com/***"),
        ("https://example.com", "https://example.com"),
        ("https://example.com/", "https://example.com/"),
        (f"hooks.slack.com/services/T0001/B0001/{WEBHOOK_SECRET}", "hooks.slack.com/***"),
        (f"user:{WEBHOOK_SECRET}@hooks.example.com/in", "hooks.example.com/***"),
    ],
)
def test_a_webhook_is_shown_as_its_host_with_its_path_masked(url: str, shown: str) -> None:
    assert webhook_display(url) == shown


def test_webhook_a_secret_in_its_path_is_never_shown_while_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Slack's and Discord's webhooks carry their secret in the path, which masking (user
    information, query parameters) let through: the sink's outage, shown by ``/ready``, and
    its log lines quoted the whole URL."""
    caplog.set_level(logging.INFO)
    port = free_port()
    url = f"http://127.0.0.1:{port}/services/T0001/B0001/{WEBHOOK_SECRET}"
    sink = BufferedSink(WebhookTransport(url=url), name="hook", retry=FAST_RETRY, flush_timeout=0)
    sink.write([result(0)])
    assert eventually(lambda: sink.outage)
    assert sink.outage == f"webhook http://127.0.0.1:{port}/***: ConnectError: Connection refused"
    sink.close()
    assert caplog.records, "the outage and the totals were logged"
    assert not [r.getMessage() for r in caplog.records if WEBHOOK_SECRET in r.getMessage()]


def test_webhook_an_error_quoting_the_url_is_said_without_it() -> None:
    """httpx's messages may quote the request's URL: only the error's type is said, and the
    system's reason when there is one."""

    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError(f"error reading {request.url}", request=request)

    transport = WebhookTransport(url=f"http://127.0.0.1:9/services/T0001/B0001/{WEBHOOK_SECRET}")
    transport.client.close()
    transport.client = httpx.Client(transport=httpx.MockTransport(fail))
    with pytest.raises(DeliveryError) as raised:
        transport.send([result(0).to_record()])
    assert str(raised.value) == "webhook http://127.0.0.1:9/***: ReadError"
    transport.close(0)


def test_mqtt_records_arrive_intact_in_order_per_stream(
    mqtt_broker: Server, subscribe: Callable[[int], Subscriber]
) -> None:
    subscriber = subscribe(mqtt_broker.port)
    transport = MqttTransport(host="127.0.0.1", port=mqtt_broker.port, qos=1)
    sink = BufferedSink(transport, name="mqtt", batch_records=16)
    sent = [result(i // 2, stream=f"cam{i % 2}") for i in range(200)]
    for i in range(0, 200, 4):
        sink.write(sent[i : i + 4])
    sink.close()
    received = subscriber.wait_for(200)
    assert sink.stats.delivered == 200 and sink.stats.dropped == 0
    assert len(received) == 200
    for stream in ("cam0", "cam1"):
        got = [payload for topic, payload in received if topic == f"vstream/{stream}"]
        assert got == [r.to_record() for r in sent if r.stream_id == stream]


def test_mqtt_message_accepted_while_the_connection_drops_is_confirmed_after_reconnect(
    mqtt_broker: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection can drop between ``send``'s connected check and ``publish``.

    paho then accepts the QoS 1 message with ``rc == MQTT_ERR_NO_CONN``, re-sends it
    after reconnecting, and its ``is_published()`` raises RuntimeError from then on
    (paho-mqtt 2.2 client.py). The first CI failure of the broker-restart test was
    this interleaving; here it is forced by having ``is_connected`` report the
    moment just before the drop once.
    """
    transport = MqttTransport(host="127.0.0.1", port=mqtt_broker.port, qos=1, ack_timeout=1.0)
    assert eventually(transport.client.is_connected)
    mqtt_broker.kill()
    assert eventually(lambda: not transport.client.is_connected())
    really_connected = transport.client.is_connected
    answers = iter([True])
    monkeypatch.setattr(
        transport.client, "is_connected", lambda: next(answers, None) or really_connected()
    )
    transport.send([result(7).to_record()])  # accepted by paho while disconnected
    mqtt_broker.start()
    # 0 unconfirmed: paho re-sent the message and the restarted broker acknowledged it.
    assert transport.close(timeout=15) == 0


def test_mqtt_a_wrong_password_fails_the_sink_once_and_the_right_one_delivers(
    mqtt_broker_with_users: Server,
) -> None:
    """mosquitto answers a wrong password "Not authorized", which connecting again cannot
    change: it was retried forever, with a line at each reconnection. The sink now fails
    once, saying why; the right password delivers."""
    port = mqtt_broker_with_users.port
    wrong = MqttTransport(host="127.0.0.1", port=port, username="vstream", password="wrong")
    sink = BufferedSink(wrong, name="mqtt", retry=FAST_RETRY)
    sink.write([result(i) for i in range(5)])
    assert eventually(lambda: sink.state == "failed"), sink.outage
    assert str(sink.error) == f"mqtt broker 127.0.0.1:{port} refused the connection: Not authorized"
    sink.close()
    assert (sink.stats.delivered, sink.stats.dropped) == (0, 5)
    right = MqttTransport(host="127.0.0.1", port=port, username="vstream", password="right")
    sink = BufferedSink(right, name="mqtt", retry=FAST_RETRY)
    sink.write([result(i) for i in range(5)])
    sink.close()
    assert (sink.state, sink.stats.delivered, sink.stats.dropped) == ("ok", 5, 0)


def test_mqtt_close_is_bounded_when_the_broker_stops_answering(mqtt_broker: Server) -> None:
    """paho's ``loop_stop`` joins its thread with no timeout, and with a broker that stopped
    answering (frozen) and megabytes unsent that thread waits about a keepalive period (here
    120 s). The close now ends within its flush, grace and stop bounds (a few seconds); what
    paho held unsent of QoS 0 is what QoS 0 gives up."""
    transport = MqttTransport(
        host="127.0.0.1", port=mqtt_broker.port, qos=0, keepalive_seconds=120, max_queued=5000
    )
    assert eventually(transport.client.is_connected)
    sink = BufferedSink(transport, name="mqtt", capacity=5000, flush_timeout=1.0, send_grace=1.0)
    with mqtt_broker.stalled():
        sink.write([result(i, detections=40) for i in range(3000)])  # about 12 MB
        assert eventually(lambda: sink.buffered == 0)
        started = time.monotonic()
        sink.close()
        took = time.monotonic() - started
    assert took < 60, f"close took {took:.0f} s"
    assert sink.stats.produced == sink.stats.delivered + sink.stats.dropped == 3000


def test_redis_records_arrive_intact_in_order_and_trimmed(redis_broker: Server) -> None:
    url = f"redis://127.0.0.1:{redis_broker.port}/0"
    transport = RedisStreamTransport(url=url, maxlen=50, approximate=False)
    sink = BufferedSink(transport, name="redis", batch_records=25)
    sent = [result(i // 2, stream=f"cam{i % 2}") for i in range(300)]
    sink.write(sent)
    sink.close()
    client = redis.Redis.from_url(url)
    try:
        for stream in ("cam0", "cam1"):
            entries = client.xrange(f"vstream:{stream}")
            assert len(entries) == 50
            records = [json.loads(fields[b"record"]) for _, fields in entries]
            expected = [r.to_record() for r in sent if r.stream_id == stream][-50:]
            assert records == expected
            assert [int(fields[b"frame"]) for _, fields in entries] == [
                r["frame"] for r in expected
            ]
    finally:
        client.close()
    assert sink.stats.delivered == 300


@pytest.mark.parametrize("credentials", [":wrong@", ""], ids=["wrong", "missing"])
def test_redis_a_wrong_or_missing_password_fails_the_sink_once(
    redis_broker_with_password: Server, credentials: str
) -> None:
    """redis-py raises a refused password as a ``ConnectionError``, which was retried
    forever; connecting again cannot change it, so the sink fails once, saying why (and
    never quoting the password); the right one delivers."""
    port = redis_broker_with_password.port
    url = f"redis://{credentials}127.0.0.1:{port}/0"
    sink = BufferedSink(RedisStreamTransport(url=url), name="redis", retry=FAST_RETRY)
    sink.write([result(i) for i in range(5)])
    assert eventually(lambda: sink.state == "failed"), sink.outage
    assert str(sink.error).startswith(f"redis redis://{'***@' if credentials else ''}127.0.0.1")
    assert "wrong" not in str(sink.error)
    assert "password" in str(sink.error).lower() or "auth" in str(sink.error).lower()
    sink.close()
    assert (sink.stats.delivered, sink.stats.dropped) == (0, 5)
    right = RedisStreamTransport(url=f"redis://:right@127.0.0.1:{port}/0")
    sink = BufferedSink(right, name="redis", retry=FAST_RETRY)
    sink.write([result(i) for i in range(5)])
    sink.close()
    assert (sink.state, sink.stats.delivered, sink.stats.dropped) == ("ok", 5, 0)


def test_redis_at_maxmemory_is_retried_until_memory_is_freed(redis_broker: Server) -> None:
    """A Redis at ``maxmemory`` (``noeviction``: what a stream's readers have not trimmed
    yet) answers OOM, which passes as they catch up: it failed the sink for good. It is
    retried now, and every record arrives once, in order, when memory is back."""
    url = f"redis://127.0.0.1:{redis_broker.port}/0"
    client = redis.Redis.from_url(url)
    try:
        client.config_set("maxmemory-policy", "noeviction")
        client.set("filler", b"x" * 3_000_000)
        client.config_set("maxmemory", "3mb")
        sink = BufferedSink(RedisStreamTransport(url=url), name="redis", retry=FAST_RETRY)
        sink.write([result(i) for i in range(10)])
        assert eventually(lambda: sink.stats.failures >= 2)
        assert sink.state == "retrying" and "OutOfMemoryError" in (sink.outage or "")
        client.delete("filler")
        assert eventually(lambda: sink.stats.delivered == 10)
        sink.close()
        entries = client.xrange("vstream:cam")
        assert [int(fields[b"frame"]) for _, fields in entries] == list(range(10))
        assert (sink.state, sink.stats.dropped) == ("ok", 0)
    finally:
        client.close()


def _feed(sink: BufferedSink, stop: threading.Event, written: list[int]) -> None:
    """Write one record every 5 ms, like a pipeline at 200 fps, timing each write."""
    frame = 0
    while not stop.is_set():
        started = time.perf_counter()
        sink.write([result(frame)])
        written.append(time.perf_counter() - started)
        frame += 1
        time.sleep(0.005)


@pytest.mark.parametrize("kind", ["mqtt", "redis"])
def test_broker_restart_resumes_delivery_and_counts_drops(
    kind: str, request: pytest.FixtureRequest, subscribe: Callable[[int], Subscriber]
) -> None:
    broker: Server = request.getfixturevalue(f"{kind}_broker")
    subscriber = subscribe(broker.port) if kind == "mqtt" else None
    if kind == "mqtt":
        transport = MqttTransport(host="127.0.0.1", port=broker.port, qos=1, ack_timeout=1.0)
    else:
        transport = RedisStreamTransport(url=f"redis://127.0.0.1:{broker.port}/0", timeout=1.0)
    sink = BufferedSink(
        transport, name=kind, capacity=50, batch_records=10, retry=FAST_RETRY, flush_timeout=5
    )
    stop, write_times = threading.Event(), []
    feeder = threading.Thread(target=_feed, args=(sink, stop, write_times), daemon=True)
    feeder.start()
    try:
        assert eventually(lambda: sink.stats.delivered >= 50)
        broker.kill()
        written_at_loss = len(write_times)
        assert eventually(lambda: sink.stats.dropped > 0)
        # The writer never waits for the broker: it kept writing while the broker was gone.
        assert eventually(lambda: len(write_times) >= written_at_loss + 50)
        delivered_while_down = sink.stats.delivered
        broker.start()
        assert eventually(lambda: sink.stats.delivered > delivered_while_down + 100, timeout=15)
    finally:
        stop.set()
        feeder.join(5)
        sink.close()
    stats = sink.stats
    assert stats.failures > 0 and stats.retries > 0 and stats.dropped > 0
    assert stats.delivered + stats.dropped == len(write_times)
    if subscriber is not None:
        last = len(write_times) - 1  # acknowledged by the broker, on its way to the subscriber
        wait_for(
            lambda: any(p["frame"] == last for _, p in subscriber.received()),
            what=f"the subscriber to get frame {last}",
        )
        frames = [payload["frame"] for _, payload in subscriber.received()]
        first_seen = list(dict.fromkeys(frames))  # QoS 1 may deliver a frame twice
        assert first_seen == sorted(first_seen) and first_seen[-1] == last
    else:
        client = redis.Redis(port=broker.port)
        entries = client.xrange("vstream:cam")
        client.close()
        frames = [int(fields[b"frame"]) for _, fields in entries]
        assert frames == sorted(set(frames)) and frames[-1] == len(write_times) - 1


def test_every_jsonl_path_fills_in_stream_and_pipeline(tmp_path: Path) -> None:
    """One rule for every sink path: {stream} is a file per stream, {pipeline} the pipeline's."""
    from vstream.config.sinks import JsonlSinkConfig
    from vstream.sinks.factory import build_transport

    def lines(path: Path) -> list[tuple[str, int]]:
        return [(r["stream"], r["frame"]) for r in map(json.loads, path.read_text().splitlines())]

    records = [{"stream": s, "frame": f} for s, f in (("a", 0), ("b", 0), ("a", 1))]
    per_stream = JsonlSinkConfig(type="jsonl", path=str(tmp_path / "{pipeline}-{stream}.jsonl"))
    transport = build_transport(per_stream, "main")
    transport.send(records)
    transport.close(0)
    assert lines(tmp_path / "main-a.jsonl") == [("a", 0), ("a", 1)]
    assert lines(tmp_path / "main-b.jsonl") == [("b", 0)]
    assert not (tmp_path / "{pipeline}-{stream}.jsonl").exists()

    one_file = JsonlSinkConfig(type="jsonl", path=str(tmp_path / "{pipeline}.jsonl"))
    transport = build_transport(one_file, "main")
    transport.send(records)
    transport.close(0)
    assert lines(tmp_path / "main.jsonl") == [("a", 0), ("b", 0), ("a", 1)]


def test_a_full_disk_in_one_streams_file_counts_the_records_before_it(tmp_path: Path) -> None:
    from vstream.sinks.jsonl import JsonLinesPerStream

    transport = JsonLinesPerStream(str(tmp_path / "{stream}.jsonl"), "main")
    records = [{"stream": s, "frame": f} for s, f in (("a", 0), ("a", 1), ("b", 0), ("a", 2))]

    def full(batch: Sequence[dict]) -> None:
        raise DeliveryError("disk full", delivered=0)

    transport.send(records[:1])
    transport.files["a"].send = full  # type: ignore[method-assign]
    with pytest.raises(DeliveryError) as raised:
        transport.send(records[2:])
    assert raised.value.delivered == 1  # b's record got in; a's did not
    transport.close(0)


@pytest.mark.parametrize("host", ["no-such-broker.invalid", "127.0.0.1"])
def test_mqtt_a_broker_out_of_reach_says_why_while_retried(host: str) -> None:
    """A name that does not resolve (a compose service not up yet), a port nobody listens
    on: retried, as either may come; the sink's outage said "not connected" and no more."""
    port = free_port()
    transport = MqttTransport(host=host, port=port)
    sink = BufferedSink(transport, name="mqtt", retry=FAST_RETRY, flush_timeout=0.1)
    sink.write([result(0)])
    why = "cannot resolve no-such-broker.invalid: " if host != "127.0.0.1" else "Connection refused"
    assert eventually(lambda: why in (sink.outage or "")), sink.outage
    assert sink.state != "failed"
    sink.close()
    assert (sink.stats.delivered, sink.stats.dropped) == (0, 1)
