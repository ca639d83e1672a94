"""MessagingCapabilities: what a queue can do, so callers and the contract suite can ask."""

from __future__ import annotations

from pip_services3_messaging.queues import MessagingCapabilities as _PipCapabilities

__all__ = ["MessagingCapabilities"]


class MessagingCapabilities(_PipCapabilities):  # type: ignore[misc]
    """pip-services' nine capability flags, plus two that Sluice's guarantees depend on.

    ``can_persist``: messages received but not completed come back to a new consumer after
    the old one closes or dies (Kafka consumer groups, MQTT persistent sessions).
    ``can_order``: messages with the same key (Kafka partition, MQTT topic) arrive in send order.
    """

    def __init__(
        self,
        can_message_count: bool,
        can_send: bool,
        can_receive: bool,
        can_peek: bool,
        can_peek_batch: bool,
        can_renew_lock: bool,
        can_abandon: bool,
        can_dead_letter: bool,
        can_clear: bool,
        *,
        can_persist: bool = False,
        can_order: bool = True,
    ) -> None:
        super().__init__(
            can_message_count,
            can_send,
            can_receive,
            can_peek,
            can_peek_batch,
            can_renew_lock,
            can_abandon,
            can_dead_letter,
            can_clear,
        )
        self._can_persist = can_persist
        self._can_order = can_order

    @classmethod
    def full(cls, **exceptions: bool) -> MessagingCapabilities:
        """Every capability, but ``exceptions`` (e.g. ``can_renew_lock=False``): a queue's
        declaration names just what it cannot do."""
        names = (
            "can_message_count", "can_send", "can_receive", "can_peek", "can_peek_batch",
            "can_renew_lock", "can_abandon", "can_dead_letter", "can_clear",
        )  # fmt: skip
        unknown = set(exceptions) - {*names, "can_persist", "can_order"}
        if unknown:
            raise TypeError(f"unknown capabilities: {', '.join(sorted(unknown))}")
        flags = {name: exceptions.get(name, True) for name in names}
        return cls(
            **flags,
            can_persist=exceptions.get("can_persist", True),
            can_order=exceptions.get("can_order", True),
        )

    @property
    def can_persist(self) -> bool:
        return self._can_persist

    @property
    def can_order(self) -> bool:
        return self._can_order

    def as_dict(self) -> dict[str, bool]:
        names = [n for n in dir(self) if n.startswith("can_")]
        return {n: bool(getattr(self, n)) for n in sorted(names)}
