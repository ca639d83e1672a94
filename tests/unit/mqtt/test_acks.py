"""AckLedger: a PUBACK goes out only on the connection its message arrived on."""

from __future__ import annotations

import random
import threading
import time

from sluice.mqtt.acks import AckLedger

Wire = list[tuple[str, int]]


def test_a_message_is_acknowledged_only_while_its_connection_is_up() -> None:
    ledger, sent = AckLedger(), list[tuple[int, int]]()
    generation = ledger.connected(session_present=False)
    assert ledger.ack(7, 1, generation, lambda mid, qos: sent.append((mid, qos)))
    ledger.disconnected(session_kept=True)
    assert not ledger.ack(8, 1, generation, lambda mid, qos: sent.append((mid, qos)))
    assert ledger.connected(session_present=True) == generation + 1
    assert not ledger.ack(9, 1, generation, lambda mid, qos: sent.append((mid, qos)))
    assert not ledger.ack(10, 0, generation + 1, lambda mid, qos: sent.append((mid, qos)))
    assert sent == [(7, 1)]


def test_a_shared_message_is_acknowledged_when_its_last_listener_acks() -> None:
    ledger, sent = AckLedger(), list[int]()
    generation = ledger.connected(session_present=False)
    ledger.share(3, generation, listeners=3)
    outcomes = [ledger.ack(3, 1, generation, lambda mid, qos: sent.append(mid)) for _ in range(3)]
    assert outcomes == [False, False, True] and sent == [3]


def test_a_reconnection_forgets_the_holds_of_the_previous_connection() -> None:
    ledger = AckLedger()
    first = ledger.connected(session_present=False)
    ledger.share(3, first, listeners=2)
    ledger.disconnected(session_kept=True)
    second = ledger.connected(session_present=True)
    sent = list[int]()
    assert ledger.ack(3, 1, second, lambda mid, qos: sent.append(mid)), "packet 3 is new here"
    assert sent == [3]


def test_which_messages_the_broker_sends_again() -> None:
    ledger = AckLedger()
    first = ledger.connected(session_present=False)
    assert not ledger.redelivers(first), "the current connection's messages are not resent"
    ledger.disconnected(session_kept=True)
    assert ledger.redelivers(first), "a persistent session resends them to the next connection"
    second = ledger.connected(session_present=True)
    assert ledger.redelivers(first) and not ledger.redelivers(second)
    ledger.disconnected(session_kept=False)
    assert not ledger.redelivers(second), "a clean session resends nothing"
    ledger.connected(session_present=False)
    assert not ledger.redelivers(first), "the broker lost the session: nothing comes back"


def test_no_acknowledgement_reaches_the_wire_after_its_connection_dropped() -> None:
    """Threads acknowledge while another drops and re-establishes the connection 300 times.

    The wire is the order in which packets would leave: every PUBACK must lie between the
    CONNACK of the generation it was sent for and the next drop. ``send`` yields the GIL
    (as paho's socket write may), so a check-then-send outside the lock would lose."""
    ledger, wire, stop = AckLedger(), Wire(), threading.Event()

    def acknowledge() -> None:
        rng = random.Random()
        while not stop.is_set():
            generation = ledger.generation

            def send(mid: int, qos: int, generation: int = generation) -> None:
                time.sleep(0)
                wire.append(("puback", generation))

            ledger.ack(rng.randrange(1, 65535), 1, generation, send)

    workers = [threading.Thread(target=acknowledge) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        generation = ledger.connected(session_present=False)
        wire.append(("connack", generation))
        for _ in range(300):
            time.sleep(0)
            ledger.disconnected(session_kept=True)
            wire.append(("dropped", generation))
            wire.append(("connack", generation + 1))  # before the ledger lets anyone use it
            generation = ledger.connected(session_present=True)
    finally:
        stop.set()
        for worker in workers:
            worker.join()

    pubacks, up = 0, None
    for kind, generation in wire:
        if kind == "connack":
            up = generation
        elif kind == "dropped":
            up = None
        else:
            pubacks += 1
            assert generation == up, f"a PUBACK of connection {generation} left on {up}"
    assert pubacks > 300, "the workers should have acknowledged all along"
