"""Every record accounted for: produced = delivered + dropped at every way a sink ends.

The probe's finding: with the broker stalled at shutdown, one batch that the
sender still held when the sink closed was counted neither delivered nor
dropped (537 of 637). Here the broker is a real mosquitto on 127.0.0.1,
frozen with SIGSTOP and thawed at the end of the test.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest
from helpers import eventually

from vstream.results import Detection, Detections, FrameResult
from vstream.sinks import BufferedSink, DeliveryError, RetryPolicy
from vstream.sinks.mqtt import MqttTransport

if TYPE_CHECKING:
    from servers import Server

pytest_plugins = ("servers",)


def result(frame: int) -> FrameResult:
    dets = Detections.from_detections([Detection((1.0, 2.0, 30.5, 40.25), 0.9, 0, "person")])
    return FrameResult("cam", frame, frame / 25, 320, 240, dets)


def summary(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "records produced" in r.getMessage()]


def test_a_broker_stalled_at_shutdown_leaves_every_record_counted(
    mqtt_broker: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vstream")
    # Acknowledgements are awaited far longer than the shutdown allows: a send on the
    # stalled broker is still waiting when the sink closes.
    transport = MqttTransport(host="127.0.0.1", port=mqtt_broker.port, qos=1, ack_timeout=60)
    sink = BufferedSink(transport, name="mqtt", batch_records=10, flush_timeout=0.5, send_grace=0.5)
    assert eventually(transport.client.is_connected)
    sink.write([result(i) for i in range(20)])
    assert eventually(lambda: sink.stats.delivered == 20)
    with mqtt_broker.stalled():
        sink.write([result(i) for i in range(20, 50)])
        # The sender holds one batch of 10, published and waiting for acknowledgements.
        assert eventually(lambda: sink.buffered == 20)
        sink.close()
    stats = sink.stats
    assert (stats.produced, stats.delivered, stats.dropped) == (50, 20, 30)
    assert summary(caplog) == ["sink mqtt: 50 records produced: 20 delivered, 30 dropped"]
    # What the abandoned send does once the broker is gone changes nothing.
    assert eventually(lambda: not sink.alive)
    assert (stats.delivered, stats.dropped) == (20, 30)


def test_a_batch_partly_delivered_then_failing_counts_each_record_once() -> None:
    """A retry that fails the sink drops only what the first attempt did not deliver."""

    class BreaksOnRetry:
        attempts = 0

        def send(self, records: Sequence[dict]) -> None:
            self.attempts += 1
            if self.attempts == 1:
                raise DeliveryError("connection lost", delivered=2)
            raise RuntimeError("a bug in the transport")

        def close(self, timeout: float) -> int:
            return 0

    sink = BufferedSink(BreaksOnRetry(), name="t", retry=RetryPolicy(initial_delay_seconds=0.01))
    sink.write([result(i) for i in range(5)])
    assert eventually(lambda: sink.error is not None)
    sink.close()
    stats = sink.stats
    assert (stats.produced, stats.delivered, stats.dropped) == (5, 2, 3)
