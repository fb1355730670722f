"""MQTT output (paho-mqtt): one message per frame record, on a topic per stream."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from vstream.errors import VstreamError
from vstream.sinks.base import DeliveryError, Record, encode_records, stream_key

log = logging.getLogger("vstream.sinks")

STOP_AFTER_SHUTDOWN_SECONDS = 2.0
"""How long paho's thread is given to end once its connection is cut off at close."""

REFUSALS = frozenset(
    {
        "Unsupported protocol version",
        "Client identifier not valid",
        "Bad user name or password",
        "Not authorized",
        "Banned",
        "Bad authentication method",
    }
)
"""A broker's answers to a connection (by name: paho gives MQTT 3.1.1's codes MQTT 5's
names) that say the settings are wrong: connecting again cannot help, the sink fails. The
others ("Server unavailable", "Server busy", ...) pass, and are retried."""


class MqttTransport:
    """Publishes records to an MQTT broker; paho's network thread reconnects in the background.

    Nothing is published while the client is disconnected, so records wait in
    the :class:`~vstream.sinks.buffered.BufferedSink` buffer, where overflow is
    counted. With QoS 1 or 2 a message paho has accepted is re-sent by paho
    after a reconnection (at least once), so it is never published twice by
    vstream; :meth:`send` waits for the broker's acknowledgements so a slow
    broker slows the sender, not the pipeline. A broker that refuses the
    connection for good (:data:`REFUSALS`: a wrong password) fails the sink once.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int = 1883,
        topic: str = "vstream/{stream}",
        qos: int = 1,
        pipeline: str = "",
        username: str | None = None,
        password: str | None = None,
        client_id: str | None = None,
        keepalive_seconds: int = 30,
        tls: bool = False,
        ack_timeout: float = 10.0,
        max_queued: int = 1000,
    ) -> None:
        self.host, self.port, self.topic, self.qos = host, port, topic, qos
        self.pipeline = pipeline
        self.ack_timeout = ack_timeout
        self._acked = threading.Condition()
        # Message ids, not MQTTMessageInfo: paho leaves ``rc`` at MQTT_ERR_NO_CONN on a
        # message accepted while disconnected, and ``is_published()`` then raises even
        # after paho re-sent it and the broker acknowledged it.
        self._unconfirmed: set[int] = set()
        """Messages of batches :meth:`send` returned, not acknowledged yet."""
        self._acknowledged: set[int] = set()
        """Acknowledgements of the batch :meth:`send` is sending, not yet taken by it."""
        self._refused: str | None = None
        """Why the broker refused the connection for good (:data:`REFUSALS`)."""
        self._unreachable: str | None = None
        """Why the last attempt to connect failed (the host unknown, the port closed), until
        one succeeds: said with each "not connected"."""
        self.client = mqtt.Client(
            callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id or "",
            protocol=mqtt.MQTTv311,
        )
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls:
            self.client.tls_set()
        self.client.reconnect_delay_set(min_delay=1, max_delay=5)
        self.client.max_inflight_messages_set(max(20, max_queued // 10))
        self.client.max_queued_messages_set(max_queued)
        self.client.on_publish = self._on_publish
        self.client.on_connect = self._on_connect
        self.client.on_connect_fail = self._on_connect_fail
        self.client.on_disconnect = self._on_disconnect
        self.client.connect_async(host, port, keepalive=keepalive_seconds)
        self.client.loop_start()

    @property
    def address(self) -> str:
        return f"mqtt broker {self.host}:{self.port}"

    def _on_connect(
        self,
        client: mqtt.Client,
        userdata: object,
        flags: mqtt.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        self._unreachable = None
        if reason_code.is_failure and reason_code.getName() in REFUSALS:
            self._refused = f"{self.address} refused the connection: {reason_code}"
            client.disconnect()  # no reconnecting: the sink fails at its next send
        elif reason_code.is_failure:
            log.warning("%s refused the connection: %s", self.address, reason_code)
        else:
            log.info("connected to %s", self.address)

    def _on_connect_fail(self, client: mqtt.Client, userdata: object) -> None:
        """paho says no more than that an attempt failed, from inside the ``except`` of the
        attempt's ``OSError``: that error is the one being handled."""
        error = sys.exception()
        if isinstance(error, socket.gaierror):
            self._unreachable = f"cannot resolve {self.host}: {error.strerror}"
        elif isinstance(error, OSError):
            self._unreachable = error.strerror or type(error).__name__

    def _on_disconnect(
        self,
        client: mqtt.Client,
        userdata: object,
        flags: mqtt.DisconnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        log.info("disconnected from %s: %s", self.address, reason_code)

    def _on_publish(
        self,
        client: mqtt.Client,
        userdata: object,
        mid: int,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if self.qos == 0:
            return
        with self._acked:
            if mid in self._unconfirmed:
                self._unconfirmed.discard(mid)
            else:
                self._acknowledged.add(mid)
            self._acked.notify_all()

    def send(self, records: Sequence[Record]) -> None:
        if self._refused is not None:
            raise VstreamError(self._refused)
        if not self.client.is_connected():
            why = f": {self._unreachable}" if self._unreachable else ""
            raise DeliveryError(f"not connected to {self.address}{why}")
        pending: set[int] = set()
        for record in records:
            payload = encode_records(record)
            info = self.client.publish(
                stream_key(self.topic, record, self.pipeline), payload, qos=self.qos
            )
            taken = info.rc == mqtt.MQTT_ERR_SUCCESS or (
                # paho keeps QoS 1/2 messages and sends them once it is connected again.
                self.qos > 0 and info.rc == mqtt.MQTT_ERR_NO_CONN
            )
            if not taken:
                delivered = len(pending)
                self._accepted(pending)
                raise DeliveryError(
                    f"{self.address}: {mqtt.error_string(info.rc)}", delivered=delivered
                )
            pending.add(info.mid)
        if self.qos > 0:
            self._wait_acknowledged(
                pending, time.monotonic() + self.ack_timeout, while_connected=True
            )
        self._accepted(pending)

    def _accepted(self, pending: set[int]) -> None:
        """Leave a batch's unacknowledged messages to :meth:`close` once the sink counts them.

        Not before: the messages of a send still waiting when its sink closes
        are counted by the sink (as dropped), not a second time here.
        """
        if self.qos > 0:
            with self._acked:
                self._claim(pending)
                self._unconfirmed |= pending

    def _claim(self, pending: set[int]) -> None:
        """Take the acknowledged messages out of ``pending`` (holding ``_acked``)."""
        acknowledged = pending & self._acknowledged
        pending -= acknowledged
        self._acknowledged -= acknowledged

    def _wait_acknowledged(
        self, pending: set[int], deadline: float, *, while_connected: bool = False
    ) -> None:
        """Wait until each message of ``pending`` is acknowledged (and gone) or ``deadline`` passed.

        With ``while_connected`` the wait also ends when the connection is lost:
        paho re-sends those messages after reconnecting, nothing is gained by waiting.
        """
        with self._acked:
            while True:
                self._claim(pending)
                remaining = deadline - time.monotonic()
                if not pending or remaining <= 0:
                    return
                if while_connected and not self.client.is_connected():
                    return
                self._acked.wait(min(remaining, 0.5))

    def close(self, timeout: float) -> int:
        """Wait for outstanding acknowledgements, disconnect; return how many never came."""
        self._wait_acknowledged(self._unconfirmed, time.monotonic() + timeout)
        with self._acked:
            unconfirmed = len(self._unconfirmed)
        self.client.disconnect()
        self._stop_network(max(timeout, 1.0))
        return unconfirmed

    def _stop_network(self, timeout: float) -> None:
        """paho's ``loop_stop``, bounded by ``timeout``: it joins paho's thread without one, and
        that thread waits up to a keepalive period for a broker that stopped answering (shut
        down) to let go of the connection; cut off there, it ends at once."""
        stopper = threading.Thread(target=self.client.loop_stop, name="mqtt-stop", daemon=True)
        stopper.start()
        stopper.join(timeout)
        if stopper.is_alive() and isinstance(sock := self.client.socket(), socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            stopper.join(STOP_AFTER_SHUTDOWN_SECONDS)
