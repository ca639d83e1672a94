"""KafkaConnection (as pip-services' KafkaConnection): one producer, an admin client and the
consumer subscriptions, shareable by several queues through the reference
``*:connection:kafka:*:1.0``."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka.structs import OffsetAndMetadata
from pip_services3_commons.config import ConfigParams, IConfigurable
from pip_services3_commons.refer import IReferenceable, IReferences
from pip_services3_commons.run import IOpenable

from ..queues.config import read_config, to_config_params
from ..queues.envelope import normalize_headers, to_bytes
from ..queues.references import resolve_references
from ..secrets import redact_text
from .clients import new_consumer
from .config import (
    CONNECTION_KEYS,
    bootstrap_servers,
    client_config,
    consumer_config,
    credentials,
    security_protocol,
    tls_switched_on_by,
)
from .logs import hide_secret, kafka_log_level
from .offsets import ENDS_CONSUMER, EndProbe, track, waiting_out_coordinator
from .session_errors import recorded_failures, session_advice
from .subscription import KafkaMessageListener, Subscription

__all__ = ["KafkaConnection"]

log = logging.getLogger("sluice.kafka")
T = TypeVar("T")


class KafkaConnection(IReferenceable, IConfigurable, IOpenable):  # type: ignore[misc]
    """A connection to a Kafka cluster on kafka-python (pip-services' KafkaConnection keys)."""

    def __init__(self) -> None:
        self._config: dict[str, Any] = read_config({}, CONNECTION_KEYS, "KafkaConnection")
        self._producer: KafkaProducer | None = None
        self._admin: KafkaAdminClient | None = None
        self._subscriptions: dict[tuple[str, str, int], list[Subscription]] = {}
        self._probes: dict[str, EndProbe] = {}  # by topic; guarded by self._lock
        self._lock = threading.Lock()  # the probes and the lazily made admin client
        self._references: IReferences | None = None

    # ---- configuration -------------------------------------------------------------------

    def configure(self, config: ConfigParams | Mapping[str, Any]) -> None:
        self.use_config(read_config(to_config_params(config), CONNECTION_KEYS, "KafkaConnection"))

    def use_config(self, values: Mapping[str, Any]) -> None:
        """Take already validated values (a queue that owns its connection passes its own)."""
        self._config = dict(values)
        hide_secret(credentials(self._config)[1])
        security_protocol(self._config)  # a misspelt connection.protocol fails here
        logging.getLogger("kafka").setLevel(kafka_log_level(int(values["options.log_level"])))

    def set_references(self, references: IReferences) -> None:
        """Keep the discovery services and credential stores that ``open`` resolves
        ``connection.discovery_key`` and ``credential.store_key`` through."""
        self._references = references

    @property
    def servers(self) -> list[str]:
        return bootstrap_servers(self._config)

    def client_config(self) -> dict[str, Any]:
        """kafka-python keyword arguments for a client of this cluster (contains secrets)."""
        return client_config(self._config)

    def consumer_config(self) -> dict[str, Any]:
        """:meth:`client_config` of a consumer (with the isolation level)."""
        return consumer_config(self._config)

    def __repr__(self) -> str:
        return f"KafkaConnection(servers={self.servers}, open={self.is_open()})"

    # ---- lifecycle -----------------------------------------------------------------------

    def is_open(self) -> bool:
        return self._producer is not None

    def open(self, correlation_id: str | None = None) -> None:
        """Connect the producer: ``options.max_retries`` tries, ``options.retry_timeout`` apart."""
        if self._producer is not None:
            return
        self.use_config(
            resolve_references(
                self._config, self._references, correlation_id, "KafkaConnection", join_servers=True
            )
        )
        self._producer = self._connect(
            lambda: KafkaProducer(
                acks="all" if self._config["options.acks"] == -1 else self._config["options.acks"],
                **self.client_config(),
            )
        )

    def _connect(self, build: Callable[[], T]) -> T:
        attempts = max(1, int(self._config["options.max_retries"]))
        with recorded_failures() as failures:
            for attempt in range(1, attempts + 1):
                try:
                    return build()
                except KafkaTimeoutError as exc:
                    last = exc
                    log.warning(
                        "Kafka at %s not reachable (attempt %d of %d)",
                        self.servers,
                        attempt,
                        attempts,
                    )
                    if attempt < attempts:
                        time.sleep(self._config["options.retry_timeout"] / 1000)
        advice = session_advice(
            self.client_config(), failures, tls_switched_on_by(self._config)
        ) or (
            "Check connection.host and connection.port (or connection.uri) and that the broker "
            "is running."
        )
        raise ConnectionError(
            redact_text(
                f"Cannot connect to Kafka at {','.join(self.servers)} after {attempts} "
                f"attempt(s): {last}. {advice}",
                self._config,
            )
        ) from None

    def close(self, correlation_id: str | None = None) -> None:
        for key in list(self._subscriptions):
            for subscription in self._subscriptions.pop(key):
                subscription.stop()
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=self._config["options.request_timeout"] / 1000)
        with self._lock:
            probes, self._probes = list(self._probes.values()), {}
            admin, self._admin = self._admin, None
        for probe in probes:
            probe.close()
        if admin is not None:
            admin.close()

    def _check_open(self) -> KafkaProducer:
        if self._producer is None:
            raise ConnectionError("The Kafka connection is not opened; call open() first.")
        return self._producer

    def get_connection(self) -> KafkaProducer | None:
        """The connection object: the producer (kafka-python has no connection pool object);
        None before ``open`` and after ``close``, as in pip-services."""
        return self._producer

    def get_producer(self) -> KafkaProducer | None:
        """The producer; None before ``open`` and after ``close``, as in pip-services."""
        return self._producer

    # ---- publishing ----------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        messages: Sequence[Mapping[str, Any] | bytes | str],
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Send ``messages`` and wait until all are acked: {value, key, timestamp, headers}
        dicts (pip-services' KafkaConnection), or bare values (bytes or str, as
        pip-services3-kafka publishes).

        ``options`` may hold ``partition`` (send everything to that partition).
        """
        producer = self._check_open()
        partition = (options or {}).get("partition")
        records: list[Mapping[str, Any]] = [
            m if isinstance(m, Mapping) else {"value": m} for m in messages
        ]
        futures = [
            producer.send(
                topic,
                value=to_bytes(message.get("value")),
                key=to_bytes(message.get("key")),
                headers=normalize_headers(message.get("headers")),
                timestamp_ms=message.get("timestamp"),
                partition=partition,
            )
            for message in records
        ]
        timeout = self._config["options.request_timeout"] / 1000
        producer.flush(timeout)
        for future in futures:
            future.get(timeout)

    # ---- consuming -----------------------------------------------------------------------

    def subscribe(
        self, topic: str, group_id: str, options: Mapping[str, Any], listener: KafkaMessageListener
    ) -> None:
        """Start ``options['read_partitions']`` consumers of ``topic`` in ``group_id``.

        Other options: ``from_beginning`` (bool), ``session_timeout`` (ms), ``start_offsets``
        ({partition: offset} where a partition without a committed offset starts; partitions
        not in it start at 0).
        """
        self._check_open()
        group_id = group_id or "default"  # as pip-services: the seed's group id is optional
        key = (topic, group_id, id(listener))
        if key in self._subscriptions:
            return
        session_ms = int(options.get("session_timeout", 10000))
        start_offsets = options.get("start_offsets")
        reset = (
            "earliest"
            if options.get("from_beginning")
            else "none"
            if start_offsets is not None
            else "latest"
        )
        consumer_config = {
            **self.consumer_config(),
            "auto_offset_reset": reset,
            "session_timeout_ms": session_ms,
            "heartbeat_interval_ms": max(100, session_ms // 3),
            "max_poll_records": 500,
            # A topic created (or auto-created) just before the subscription may be missing
            # from the first metadata answer; refresh soon instead of after 5 minutes.
            "metadata_max_age_ms": 5000,
        }
        subscriptions = [
            Subscription(topic, group_id, consumer_config, listener, index, start_offsets)
            for index in range(max(1, int(options.get("read_partitions", 1))))
        ]
        timeout = self._config["options.request_timeout"] / 1000
        for subscription in subscriptions:
            subscription.start_and_wait(timeout)
        self._subscriptions[key] = subscriptions

    def unsubscribe(self, topic: str, group_id: str, listener: KafkaMessageListener) -> None:
        key = (topic, group_id or "default", id(listener))
        for subscription in self._subscriptions.pop(key, []):
            subscription.stop()

    def subscriptions(
        self, topic: str, group_id: str, listener: KafkaMessageListener
    ) -> list[Subscription]:
        return list(self._subscriptions.get((topic, group_id or "default", id(listener)), []))

    def _owner(
        self, topic: str, group_id: str, partition: int, listener: KafkaMessageListener
    ) -> Subscription:
        subscriptions = self.subscriptions(topic, group_id, listener)
        if not subscriptions:
            raise RuntimeError(f"Not subscribed to topic '{topic}' in group '{group_id}'.")
        for subscription in subscriptions:
            if partition in subscription.assigned:
                return subscription
        return subscriptions[0]

    def commit(
        self, topic: str, group_id: str, partition: int, offset: int, listener: KafkaMessageListener
    ) -> None:
        """Commit ``offset`` (the next message to read) of ``partition`` for the group."""
        self.commit_async(topic, group_id, partition, offset, listener).result()

    def commit_async(
        self, topic: str, group_id: str, partition: int, offset: int, listener: KafkaMessageListener
    ) -> Future[None]:
        """Queue the commit on the consumer's thread; commits run in the order they were queued."""
        tp = TopicPartition(topic, partition)
        return self._owner(topic, group_id, partition, listener).submit(
            lambda consumer: consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
        )

    def seek(
        self, topic: str, group_id: str, partition: int, offset: int, listener: KafkaMessageListener
    ) -> None:
        """Make the group's consumer read ``partition`` from ``offset`` next."""
        tp = TopicPartition(topic, partition)
        self._owner(topic, group_id, partition, listener).call(
            lambda consumer: consumer.seek(tp, offset)
        )

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The current end offset of each partition of ``topic`` ({} if it does not exist)."""
        self._check_open()
        return self._probe(topic).ends()

    def group_offsets(
        self, topic: str, group_id: str
    ) -> tuple[dict[int, int | None], dict[int, int], dict[int, int]]:
        """(committed, beginning, end) offsets by partition, without joining the group.

        Cheap to call again: the ends come from the topic's long-lived probe consumer, the
        committed offsets of every partition from one OffsetFetch request.
        """
        self._check_open()
        probe = self._probe(topic)
        ends = probe.ends()
        beginnings = probe.beginnings(list(ends))
        return self._committed(topic, group_id, list(ends)), beginnings, ends

    def topic_id(self, topic: str) -> str | None:
        """``topic``'s id (None where the broker has no topic ids), from the metadata of the
        probe that :meth:`group_offsets` used."""
        self._check_open()
        return self._probe(topic).topic_id()

    def _probe(self, topic: str) -> EndProbe:
        with self._lock:
            probe = self._probes.get(topic)
            if probe is None:
                probe = self._probes[topic] = EndProbe(topic, self._probe_consumer)
            return probe

    def _probe_consumer(self) -> KafkaConsumer:
        return self._connect(
            lambda: track(
                new_consumer(
                    **self.consumer_config(),
                    enable_auto_commit=False,
                    # No long poll: the probe's fetches are meant to come back at once.
                    fetch_max_wait_ms=10,
                    # Partitions added to the topic show up within seconds, not minutes.
                    metadata_max_age_ms=5000,
                    **ENDS_CONSUMER,
                )
            )
        )

    def _committed(self, topic: str, group_id: str, partitions: list[int]) -> dict[int, int | None]:
        """The group's committed offset of each of ``partitions`` (None: never committed)."""
        if not partitions:
            return {}
        tps = [TopicPartition(topic, p) for p in partitions]
        admin = self._connect_to_admin()
        try:
            answer = admin.list_group_offsets({group_id: tps})
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # kafka-python caches a group's coordinator and keeps it after NOT_COORDINATOR: a
            # client that asked before the coordinator moved asks the old node ever after
            # (the nemesis' coordinator-move on three nodes, seed 4). A new client finds the
            # coordinator anew, then waits out one that is not available yet.
            admin = self._reconnect_admin()
            answer = waiting_out_coordinator(lambda: admin.list_group_offsets({group_id: tps}))
        offsets = answer.get(group_id, {})
        committed: dict[int, int | None] = {}
        for tp in tps:
            meta = offsets.get(tp)
            committed[tp.partition] = meta.offset if meta is not None and meta.offset >= 0 else None
        return committed

    # ---- administration ------------------------------------------------------------------

    def _reconnect_admin(self) -> KafkaAdminClient:
        """A new admin client in place of the one held (which is closed)."""
        with self._lock:
            old, self._admin = self._admin, None
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        return self._connect_to_admin()

    def _connect_to_admin(self) -> KafkaAdminClient:
        with self._lock:
            if self._admin is None:
                self._admin = self._connect(lambda: KafkaAdminClient(**self.client_config()))
            return self._admin

    def create_queue(self, name: str) -> None:
        """Create topic ``name`` (options.num_partitions, options.replication_factor).

        No error if it exists."""
        spec = {
            "num_partitions": self._config["options.num_partitions"],
            "replication_factor": self._config["options.replication_factor"],
        }
        with contextlib.suppress(TopicAlreadyExistsError):
            self._connect_to_admin().create_topics({name: spec}, wait_for_metadata=True)

    def delete_queue(self, name: str) -> None:
        """Delete topic ``name``; no error if it does not exist."""
        with contextlib.suppress(UnknownTopicOrPartitionError):
            self._connect_to_admin().delete_topics([name])

    def read_queue_names(self) -> list[str]:
        """The cluster's topics, without Kafka's internal ones."""
        try:
            names = self._connect_to_admin().list_topics()
        except KafkaError as exc:
            raise ConnectionError(
                f"Cannot list the topics of Kafka at {','.join(self.servers)}: {exc}"
            ) from None
        return sorted(str(name) for name in names if not str(name).startswith("__"))
