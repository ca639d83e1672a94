"""The Py4J gateway between this Python process and its SparkSession's JVM, without Nagle's
algorithm on the JVM's side of it.

Py4J (0.10.9.9, the one PySpark 4 ships) writes each answer through a ``BufferedWriter`` of
8,192 characters on a socket with Nagle's algorithm on: an answer longer than that leaves in
two writes, and the second waits for the first's acknowledgement, which Linux delays by
about 40 ms. Every Py4J call that returns more than 8 KiB (a schema of many columns, the
observation that brings a batch's small quarantine back, :mod:`.jvm_writer`) took 44 ms
instead of half a millisecond (``bench/py4j_answers.py``; py4j/py4j#516, fixed in Py4J's
source after 0.10.9.9 but in no release yet). :func:`disable_nagle` sets ``TCP_NODELAY`` on
the JVM's end of every connection the gateway has, through reflection into Py4J's
``GatewayServer.connections`` and ``ClientServerConnection.socket``. Py4J opens one connection
per Python thread, so each ingest calls it again for the thread it runs in. A Py4J without
those fields, or a session over Spark Connect (no Py4J), is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["disable_nagle"]

log = logging.getLogger(__name__)

#: The session attribute holding the reflected fields, found once per session.
_FIELDS = "_sluice_gateway_fields"


def disable_nagle(spark: Any, disable: bool = True) -> int:
    """Turn Nagle's algorithm off (``disable``; on again: False, for a benchmark's other side)
    on the JVM's side of each connection of ``spark``'s Py4J gateway (module docstring); the
    number of connections changed."""
    context = getattr(spark, "_sc", None)
    gateway = getattr(context, "_gateway", None)
    if gateway is None:  # Spark Connect
        return 0
    try:
        server = gateway.java_gateway_server
        fields = getattr(spark, _FIELDS, None)
        if fields is None:
            fields = _Fields(_field(server.getClass(), "connections"))
            setattr(spark, _FIELDS, fields)
        changed = 0
        for connection in fields.connections.get(server).toArray():
            sock = fields.socket(connection).get(connection)
            if sock is not None and sock.getTcpNoDelay() != disable:
                sock.setTcpNoDelay(disable)
                changed += 1
        return changed
    except Exception:  # another Py4J, a closing gateway: only speed is at stake
        log.debug("could not turn Nagle's algorithm off on the Py4J gateway", exc_info=True)
        return 0


class _Fields:
    """Py4J's fields that :func:`disable_nagle` reads, found once per session: the server's
    list of connections, and each connection class's socket (``ClientServerConnection``, or
    ``GatewayConnection`` where PySpark does not pin threads)."""

    def __init__(self, connections: Any) -> None:
        self.connections = connections
        self._sockets: dict[str, Any] = {}

    def socket(self, connection: Any) -> Any:
        cls = connection.getClass()
        name = cls.getName()
        if name not in self._sockets:
            self._sockets[name] = _field(cls, "socket")
        return self._sockets[name]


def _field(cls: Any, name: str) -> Any:
    """The accessible field ``name`` declared by ``cls`` or a class it extends."""
    while cls is not None:
        for field in cls.getDeclaredFields():
            if field.getName() == name:
                field.setAccessible(True)
                return field
        cls = cls.getSuperclass()
    raise LookupError(f"no field {name!r} in Py4J's gateway classes")
