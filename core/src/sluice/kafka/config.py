"""The Kafka configuration keys (seeds 000 and 001) and their translation to kafka-python."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from ..queues import tls
from ..queues.config import ConfigError, ConfigKey
from ..secrets import redact_text

DEFAULT_BOOTSTRAP_ENV = "SLUICE_KAFKA_BOOTSTRAP"

#: The values of ``options.reader``: the client library that reads a batch's offset ranges
#: (:mod:`sluice.kafka.ranges`, :mod:`sluice.kafka.confluent_ranges`). ``auto`` (the default):
#: confluent-kafka where the reading process has it (a dependency of ``sluice-core[kafka]``)
#: and it can take the connection's settings, else kafka-python; each process (the driver, or
#: an executor's task) chooses for itself, so executors without confluent-kafka still read.
#: ``spark``: Spark's own Kafka source reads the ranges in the JVM (:mod:`sluice.spark.jvm_reader`);
#: ``auto`` never picks it (not measured faster yet).
READERS = ("kafka-python", "confluent")
SPARK_READER = "spark"
READER_CHOICES = ("auto", *READERS, SPARK_READER)
DEFAULT_READER = "auto"

#: Keys of KafkaConnection (as pip-services' KafkaConnection); a queue that owns its connection
#: accepts them too.
CONNECTION_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("client_id", str, None, "Kafka client id (default: the host name)."),
    ConfigKey(
        "credential.mechanism",
        str,
        None,
        "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (default plain when a "
        "username is given).",
        choices=(
            "plain",
            "scram-sha-256",
            "scram-sha-512",
            "PLAIN",
            "SCRAM-SHA-256",
            "SCRAM-SHA-512",
        ),
    ),
    ConfigKey(
        "options.log_level",
        int,
        1,
        "0 none, 1 error, 2 warn, 3 info, 4 debug (kafka-python's logger).",
    ),
    ConfigKey(
        "options.connect_timeout",
        int,
        1000,
        "Milliseconds of one attempt to connect to a broker (open() makes options.max_retries; "
        "a client built once, such as a batch reader, may take them all in one).",
    ),
    ConfigKey("options.max_retries", int, 5, "Connection attempts open() makes before it fails."),
    ConfigKey(
        "options.retry_timeout",
        int,
        30000,
        "Milliseconds between connection attempts (also the reconnect backoff cap).",
    ),
    ConfigKey(
        "options.request_timeout",
        int,
        30000,
        "Milliseconds to wait for a broker request or a flush.",
    ),
    ConfigKey(
        "options.isolation_level",
        str,
        "read_committed",
        "What consumers, planners and batch readers see of transactions: read_committed "
        "(committed records only, batches planned up to the last stable offset) or "
        "read_uncommitted (every record, aborted ones too, up to the high watermark).",
        choices=("read_committed", "read_uncommitted"),
    ),
    ConfigKey(
        "options.acks",
        int,
        -1,
        "Acknowledgements a send waits for: -1 all, 0 none, 1 leader.",
        choices=(-1, 0, 1),
    ),
    ConfigKey("options.num_partitions", int, 1, "Partitions of a topic create_queue makes."),
    ConfigKey(
        "options.replication_factor",
        int,
        -1,
        "Replication factor of a topic create_queue makes; -1: the cluster's "
        "default.replication.factor.",
    ),
    ConfigKey(
        "options.ssl_cafile",
        str,
        None,
        "CA certificate file for TLS (switches TLS on; an error with a plaintext "
        "connection.protocol).",
    ),
    ConfigKey("options.ssl_certfile", str, None, "Client certificate file (switches TLS on)."),
    ConfigKey("options.ssl_keyfile", str, None, "Client private key file (switches TLS on)."),
    ConfigKey(
        "options.ssl_check_hostname",
        bool,
        True,
        "Check the broker's host name against its certificate.",
    ),
    *tls.KEYS,
)

#: Keys of KafkaMessageQueue (as pip-services' KafkaMessageQueue), beyond the connection's.
QUEUE_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("topic", str, None, "Kafka topic to send to and receive from."),
    ConfigKey("queue", str, None, "pip-services alias of 'topic'."),
    ConfigKey("group_id", str, "default", "Consumer group id."),
    ConfigKey(
        "from_beginning",
        bool,
        False,
        "With no committed offset, start at the beginning of the topic (else at its end).",
    ),
    ConfigKey(
        "read_partitions", int, 1, "Consumers this queue runs in its group, each on its own thread."
    ),
    ConfigKey(
        "autocommit",
        bool,
        True,
        "True: a message is committed when receive() hands it out. False: only complete() commits.",
    ),
    ConfigKey(
        "options.autosubscribe",
        bool,
        False,
        "Subscribe when the queue opens, not at the first read.",
    ),
    ConfigKey(
        "options.create_topic",
        bool,
        True,
        "open() creates the topic when it does not exist (options.num_partitions, "
        "options.replication_factor), as pip-services does. Sluice's sensors, planners and "
        "commands that only read set it false: a misspelt topic is an error there, not a new "
        "topic.",
    ),
    ConfigKey("options.write_partition", int, None, "Send every message to this partition."),
    ConfigKey(
        "options.dead_letter_topic",
        str,
        None,
        "Topic of move_to_dead_letter (default '<topic>.dlq').",
    ),
    ConfigKey(
        "options.session_timeout", int, 10000, "Consumer group session timeout in milliseconds."
    ),
    ConfigKey(
        "options.max_buffer",
        int,
        1000,
        "Messages fetched ahead into the local buffer before fetching pauses.",
    ),
    ConfigKey(
        "options.reader",
        str,
        DEFAULT_READER,
        "Client library that reads a batch's offset ranges in an ingest: auto (confluent-kafka "
        "where installed and able to take the settings, else kafka-python; Spark's own Kafka "
        "source for a batch of 1,000,000 messages or more in a session that has it), "
        "kafka-python, or "
        "confluent (confluent-kafka, faster; a dependency of sluice-core[kafka]), or spark "
        "(Spark's own Kafka source, in the JVM; its jars come from Maven Central once, see "
        "sluice.spark.connector).",
        choices=READER_CHOICES,
    ),
)

_PROTOCOLS = {
    None: "PLAINTEXT",
    "tcp": "PLAINTEXT",
    "kafka": "PLAINTEXT",
    "plaintext": "PLAINTEXT",
    "ssl": "SSL",
    "tls": "SSL",
    "kafka+ssl": "SSL",
    "sasl_plaintext": "SASL_PLAINTEXT",
    "sasl_ssl": "SASL_SSL",
}


def _split_uri(uri: str) -> tuple[str | None, list[str], str | None, str | None]:
    """connection.uri as (scheme, servers, user, password).

    It may be "h1:9092,h2:9092", kafka://h:9092 or kafka://user:password@h1:9092,h2:9092/topic.
    """
    scheme, _, rest = uri.rpartition("://")
    userinfo, _, hosts = rest.split("/", 1)[0].rpartition("@")
    user, _, password = userinfo.partition(":")
    servers = [server.strip() for server in hosts.split(",") if server.strip()]
    return scheme.lower() or None, servers, unquote(user) or None, unquote(password) or None


def bootstrap_servers(config: dict[str, Any]) -> list[str]:
    """Servers from connection.uri or connection.host/port.

    With neither configured: $SLUICE_KAFKA_BOOTSTRAP, else localhost:9092.
    """
    uri = config.get("connection.uri")
    if uri:
        return _split_uri(str(uri))[1]
    host, port = config.get("connection.host"), config.get("connection.port")
    if host or port:
        return [f"{host or 'localhost'}:{port or 9092}"]
    return [s.strip() for s in os.environ.get(DEFAULT_BOOTSTRAP_ENV, "localhost:9092").split(",")]


def credentials(config: dict[str, Any]) -> tuple[str | None, str | None]:
    """(username, password): the credential.* keys, else the user info of connection.uri."""
    user, password = config.get("credential.username"), config.get("credential.password")
    if not user and config.get("connection.uri"):
        _, _, user, password = _split_uri(str(config["connection.uri"]))
    return user, password


def sasl_mechanism(config: dict[str, Any]) -> str:
    """The SASL mechanism of ``credential.mechanism`` as kafka-python names it (PLAIN when
    none is given)."""
    return str(config.get("credential.mechanism") or "plain").upper()


def _protocol_key(value: Any, where: str) -> str | None:
    key = str(value).lower() if value else None
    if key not in _PROTOCOLS:
        # Never fall back to plaintext: a typo would send the credentials unencrypted.
        allowed = ", ".join(sorted(k for k in _PROTOCOLS if k))
        raise ConfigError(
            f"KafkaConnection: {where} has the unknown value {redact_text(str(value))!r}. "
            f"Use one of: {allowed}."
        )
    return key


def security_protocol(config: dict[str, Any]) -> str:
    """kafka-python's ``security_protocol``: ``connection.protocol``, else the scheme of
    ``connection.uri`` (``kafka://``, ``kafka+ssl://``), else PLAINTEXT; SASL_ with credentials.

    TLS and credentials follow the rule of every transport (:mod:`sluice.queues.tls`):

    - a TLS scheme of ``connection.uri`` (``kafka+ssl://``) is never undone by
      ``connection.protocol``: tcp or sasl_plaintext there is an error naming both, not a
      downgrade. (``kafka://`` is the generic scheme of a Kafka URI, so a protocol may still
      choose TLS for it, as the Airflow connection form suggests: host ``kafka://h:9092``,
      extra ``connection.protocol`` sasl_ssl.)
    - TLS settings (``options.ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``) switch TLS on
      (SSL, or SASL_SSL with credentials) when no protocol is chosen (``kafka://``, no
      scheme); with a plaintext ``connection.protocol`` (tcp, plaintext, sasl_plaintext) they
      are an error;
    - a username on a plaintext connection with SASL/PLAIN, which sends the password as it
      is, is a :class:`ConfigError` unless ``options.allow_plaintext_credentials`` is true or
      ``connection.protocol`` is sasl_plaintext (Kafka's own name for that choice);
    - a SCRAM mechanism (``credential.mechanism`` scram-sha-256 or -512) over plaintext becomes
      SASL_PLAINTEXT without being asked: SCRAM never sends the password, only a salted,
      iterated proof of it, so an eavesdropper learns no password (though a weak one can be
      guessed offline from the exchange, and the messages themselves travel in clear: prefer
      TLS).
    """
    key, explicit, scheme = _named_protocol(config)
    chosen = _PROTOCOLS[key]
    tls_on = tls.tls_switched_on(
        config,
        "KafkaConnection",
        tls=chosen.endswith("SSL"),
        plaintext_chosen=f"config key 'connection.protocol' is {key!r}" if explicit else None,
    )
    if tls_on:
        chosen = "SASL_SSL" if chosen.startswith("SASL_") else "SSL"
    if not credentials(config)[0]:
        return chosen
    if explicit:
        where = f"config key 'connection.protocol' is {key!r}"
    elif scheme:
        where = f"the scheme of config key 'connection.uri' is '{scheme}://'"
    else:
        where = "no protocol is configured (the default is plaintext)"
    tls.check_credentials(
        config,
        "KafkaConnection",
        tls=tls_on,
        # SCRAM never sends the password; sasl_plaintext is Kafka's explicit opt-in
        sends_password=not sasl_mechanism(config).startswith("SCRAM-")
        and chosen != "SASL_PLAINTEXT",
        where=f"{where} and the SASL mechanism is PLAIN",
        use_tls="a kafka+ssl:// URI, or config key 'connection.protocol' sasl_ssl (with "
        "options.ssl_cafile for a private CA)",
        also_allowed_by="config key 'connection.protocol' sasl_plaintext",
    )
    return "SASL_SSL" if tls_on else "SASL_PLAINTEXT"


def tls_switched_on_by(config: dict[str, Any]) -> tuple[str, ...]:
    """The TLS files (``options.ssl_cafile`` ...) that switched TLS on, where neither
    ``connection.protocol`` nor the URI's scheme asked for it; () otherwise."""
    key = _named_protocol(config)[0]
    return tls.switched_on_by(config, tls=_PROTOCOLS[key].endswith("SSL"))


def _named_protocol(config: dict[str, Any]) -> tuple[str | None, Any, str | None]:
    """(the protocol's key in ``_PROTOCOLS``, ``connection.protocol``, the URI's scheme) as
    the configuration names them, before TLS settings switch TLS on."""
    explicit = config.get("connection.protocol")
    uri = config.get("connection.uri")
    scheme = _split_uri(str(uri))[0] if uri else None
    if explicit:
        key = _protocol_key(explicit, "config key 'connection.protocol'")
        if scheme:
            from_scheme = _protocol_key(scheme, "the scheme of config key 'connection.uri'")
            if _PROTOCOLS[from_scheme].endswith("SSL") and not _PROTOCOLS[key].endswith("SSL"):
                raise ConfigError(
                    f"KafkaConnection: config key 'connection.protocol' is {key!r} "
                    f"({_PROTOCOLS[key]}) but the scheme of config key 'connection.uri' is "
                    f"'{scheme}://' ({_PROTOCOLS[from_scheme]}): the URI asks for TLS, the "
                    "protocol for none. Make them agree (kafka+ssl:// with ssl or sasl_ssl), "
                    "or leave out connection.protocol."
                )
    else:
        key = _protocol_key(scheme, "the scheme of config key 'connection.uri'")
    return key, explicit, scheme


def consumer_config(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`client_config` plus what only consumers take (the isolation level)."""
    return {
        **client_config(config),
        "isolation_level": config.get("options.isolation_level") or "read_committed",
    }


def unretried_consumer_config(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`consumer_config` for a client built once, outside :class:`KafkaConnection`'s
    retry loop (a batch's readers, the audit, the lag metrics): its bootstrap may take all of
    ``options.max_retries`` attempts of ``options.connect_timeout`` (kafka-python retries
    inside it, with backoff). One attempt of the default 1 s is too short on a loaded machine.
    """
    attempts = max(1, int(config["options.max_retries"]))
    return {
        **consumer_config(config),
        "bootstrap_timeout_ms": int(config["options.connect_timeout"]) * attempts,
    }


def client_config(config: dict[str, Any]) -> dict[str, Any]:
    """The kafka-python keyword arguments shared by producer, consumers and admin client."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers(config),
        "request_timeout_ms": config["options.request_timeout"],
        "reconnect_backoff_max_ms": config["options.retry_timeout"],
        "bootstrap_timeout_ms": config["options.connect_timeout"],
        "security_protocol": security_protocol(config),
    }
    if config.get("client_id"):
        kwargs["client_id"] = config["client_id"]
    if kwargs["security_protocol"].startswith("SASL_"):
        kwargs["sasl_mechanism"] = sasl_mechanism(config)
        kwargs["sasl_plain_username"], kwargs["sasl_plain_password"] = credentials(config)
    if kwargs["security_protocol"].endswith("SSL"):
        kwargs["ssl_check_hostname"] = config["options.ssl_check_hostname"]
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if config.get(f"options.{name}"):
                kwargs[name] = config[f"options.{name}"]
    return kwargs


#: How one kafka-python keyword argument becomes another client's setting: (its key, its
#: value), or None where that client needs none.
Translation = Callable[[Any], tuple[str, Any] | None]


def translate_settings(
    kwargs: Mapping[str, Any], translations: Mapping[str, Translation], reader: str, instead: str
) -> dict[str, Any]:
    """kafka-python keyword arguments as the settings of the client ``options.reader``
    ``reader`` reads with. A key without a translation raises :class:`ConfigError` naming the
    key (never its value) and the reader to use ``instead``."""
    unknown = sorted(set(kwargs) - set(translations))
    if unknown:
        raise ConfigError(
            f"options.reader '{reader}' cannot translate the kafka-python setting(s) "
            f"{', '.join(map(repr, unknown))} to its client. Leave them out, or read with "
            f"options.reader '{instead}'."
        )
    translated = (translations[key](value) for key, value in kwargs.items() if value is not None)
    return dict(item for item in translated if item is not None)
