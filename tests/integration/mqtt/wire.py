"""A TCP proxy between an MQTT client and a real broker that reads the packets going by.

Per client connection it records the packet ids of the QoS 1/2 PUBLISHes the broker sent and
the PUBACKs the client sent, so a test can check that every PUBACK names a message delivered
on the same connection. It can drop the connection (the client sees the broker hang up) and
hold the broker's CONNACK back, which widens the moment between the client's CONNECT and
its CONNACK.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

from sluice.testing import free_port

HOST = "127.0.0.1"
PUBLISH, PUBACK, CONNECT = 3, 4, 1


@dataclass
class Link:
    """One client connection through the proxy."""

    number: int
    client: socket.socket
    broker: socket.socket
    # broker -> client: waits for this before forwarding anything (the CONNACK comes first)
    release: threading.Event = field(default_factory=threading.Event)
    connect_seen: threading.Event = field(default_factory=threading.Event)
    outstanding: dict[int, bytes] = field(default_factory=dict)  # packet id -> payload
    acked: list[bytes] = field(default_factory=list)  # payloads, in PUBACK order
    stale: list[int] = field(default_factory=list)  # PUBACKs naming no outstanding message
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        for sock in (self.client, self.broker):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.release.set()


class Packets:
    """Splits a byte stream into MQTT control packets (type, flags, body)."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, int, bytes]]:
        self._data += chunk
        packets: list[tuple[int, int, bytes]] = []
        while True:
            length, multiplier, pos = 0, 1, 1
            while True:
                if pos >= len(self._data):
                    return packets
                byte = self._data[pos]
                length += (byte & 0x7F) * multiplier
                multiplier *= 128
                pos += 1
                if not byte & 0x80:
                    break
            if len(self._data) < pos + length:
                return packets
            header = self._data[0]
            packets.append((header >> 4, header & 0x0F, bytes(self._data[pos : pos + length])))
            del self._data[: pos + length]


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    value, multiplier = 0, 1
    while True:
        byte = body[pos]
        pos += 1
        value += (byte & 0x7F) * multiplier
        multiplier *= 128
        if not byte & 0x80:
            return value, pos


class MqttProxy:
    """Listens on a free port and forwards each client connection to ``broker_port``."""

    def __init__(self, broker_port: int, mqtt5: bool = False) -> None:
        self.host, self.port = HOST, free_port()
        self._broker_port = broker_port
        self._mqtt5 = mqtt5
        self.links: list[Link] = []
        self.hold_connack = False  # hold the CONNACK of the next connections until released
        self._server = socket.create_server((HOST, self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()
        for link in self.links:
            link.close()

    def drop(self) -> None:
        """Hang up the current connection, as a broker that closes its socket."""
        self.links[-1].close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            broker = socket.create_connection((HOST, self._broker_port))
            link = Link(len(self.links) + 1, client, broker)
            if not self.hold_connack:
                link.release.set()
            self.links.append(link)
            threading.Thread(target=self._upstream, args=(link,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(link,), daemon=True).start()

    def _upstream(self, link: Link) -> None:
        """Client -> broker: note CONNECT and PUBACKs."""
        packets = Packets()
        while chunk := _recv(link.client):
            if not _send(link.broker, chunk):  # first: what is noted has reached the broker
                return
            for kind, _, body in packets.feed(chunk):
                if kind == CONNECT:
                    link.connect_seen.set()
                elif kind == PUBACK:
                    self._note_puback(link, int.from_bytes(body[:2], "big"))

    def _downstream(self, link: Link) -> None:
        """Broker -> client: note QoS 1 PUBLISHes (before the client can answer them);
        nothing goes before ``release``."""
        packets = Packets()
        while chunk := _recv(link.broker):
            link.release.wait()
            for kind, flags, body in packets.feed(chunk):
                if kind == PUBLISH and (flags >> 1) & 3:
                    self._note_publish(link, body)
            if not _send(link.client, chunk):
                return

    def _note_publish(self, link: Link, body: bytes) -> None:
        pos = 2 + int.from_bytes(body[:2], "big")  # past the topic
        mid = int.from_bytes(body[pos : pos + 2], "big")
        pos += 2
        if self._mqtt5:
            length, pos = _varint(body, pos)
            pos += length
        with link.lock:
            link.outstanding[mid] = body[pos:]

    def _note_puback(self, link: Link, mid: int) -> None:
        with link.lock:
            payload = link.outstanding.pop(mid, None)
            if payload is None:
                link.stale.append(mid)
            else:
                link.acked.append(payload)

    def acked(self) -> list[bytes]:
        """The payloads acknowledged on every connection so far."""
        return [payload for link in self.links for payload in list(link.acked)]

    def stale(self) -> list[tuple[int, int]]:
        """(connection, packet id) of every PUBACK naming no message of its connection."""
        return [(link.number, mid) for link in self.links for mid in list(link.stale)]


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False
