"""Errors a user can cause without any broker: one line on stderr, the right exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.cli.errors import CliError, describe
from sluice.secrets import redact_text, remember_text

from .runner import assert_error, run


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["publish", "kafkaa://h:9092/t", "--sample", "iot"], ["Unknown URI scheme 'kafkaa://'"]),
        (["publish", "localhost:9092/t", "--sample", "iot"], ["is not a queue URI"]),
        (
            ["publish", "kafka://h:9092", "--sample", "iot"],
            ["names no topic", "kafka://h:9092/TOPIC"],
        ),
        (["publish", "kafka://h:99999/t", "--sample", "iot"], ["invalid port"]),
        (["publish", "memory:///t", "--sample", "iot"], ["memory:// queues live inside one"]),
        (["publish", "kafka://h:9092/t"], ["exactly one of --file F, --stdin or --sample"]),
        (
            ["publish", "kafka://h:9092/t", "--stdin", "--sample", "iot"],
            ["got --stdin and --sample"],
        ),
        (
            ["publish", "kafka://h:9092/t", "--sample", "iot", "--count", "2", "--malformed", "3"],
            ["--malformed 3 is more than --count 2"],
        ),
        (
            ["publish", "kafka://h:9092/t", "--file", "/no/such/file"],
            ["'/no/such/file' does not exist", "sluice publish --help"],
        ),
        (
            ["publish", "kafka://h:9092/t?grup=1", "--sample", "iot"],
            ["unknown config key 'options.grup'", "Fix or remove it"],
        ),
        (
            ["publish", "kafka://h:9092/t?acks=7", "--sample", "iot"],
            ["'options.acks' must be one of"],
        ),
        (["publish", "mqtt://h:1883/a/%23?qos=1", "--sample", "iot"], ["Cannot publish to 'a/#'"]),
        (["publish"], ["Missing argument"]),
        (["no-such-command"], ["No such command 'no-such-command'"]),
        (["publsh"], ["No such command 'publsh'. Did you mean 'publish'? See 'sluice --help'."]),
        (["lag", "kafka://h:9092/t"], ["add ?group_id=NAME"]),
        (["lag", "mqtt://h:1883/t?group_id=g"], ["'sluice lag' works on kafka://"]),
        (["peek", "mqtt://h:1883/t"], ["add client_id=NAME&qos=1"]),
        (["peek", "mqtt://h:1883/t?client_id=c"], ["needs QoS 1 on a persistent session"]),
        (["ingest", "kafka://h:9092/t", "--sink", "out"], ["add ?group_id=NAME"]),
        (["ingest", "mqtt://h:1883/t", "--sink", "out"], ["persistent session", "client_id"]),
        (["dlq", "replay", "mqtt://h:1883/t"], ["works on kafka:// URIs"]),
        (["brokers", "up", "--kafka", "redpanda"], ["Invalid value for '--kafka'"]),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(args: list[str], fragments: list[str]) -> None:
    assert_error(run(*args), 2, *fragments)


def test_a_bad_json_line_is_named_before_anything_is_sent(tmp_path: Path) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"a": 1}\n\n{"a": 2,\n')
    # Nothing listens on this URI: the file is checked before any connection.
    line = assert_error(run("publish", "kafka://127.0.0.1:1/t", "--file", str(lines)), 2)
    assert f"Line 3 of {lines} is not valid JSON" in line


def test_a_missing_key_field_is_named(tmp_path: Path) -> None:
    result = run(
        "publish", "kafka://127.0.0.1:1/t", "--stdin", "--key-field", "id", input='{"id": 1}\n[2]\n'
    )
    assert_error(result, 2, "Line 2 of stdin has no field 'id'")


def test_passwords_never_appear_even_with_debug() -> None:
    uri = "kafkaa://svc:s3cr%3At@h:9092/t"
    plain = run("publish", uri, "--sample", "iot")
    assert_error(plain, 2, "kafkaa://svc:***@h:9092/t")
    debug = run("--debug", "publish", uri, "--sample", "iot")
    assert debug.exit_code == 2
    assert "Traceback" in debug.stderr  # --debug shows it
    assert "s3cr" not in debug.output


def test_describe_maps_library_errors() -> None:
    assert describe(ConnectionError("Cannot connect to Kafka.")) == ("Cannot connect to Kafka.", 1)
    dead = ConnectionError(
        "Cannot connect to Kafka at h:1: refused. Check connection.host and connection.port "
        "(or connection.uri) and that the broker is running."
    )
    assert describe(dead) == (
        "Cannot connect to Kafka at h:1: refused. Check the host and port in the URI and that "
        "the broker is running.",
        1,
    )
    assert describe(ImportError("pip install 'sluice-core[kafka]'"))[1] == 1
    assert describe(CliError("bad", usage=True)) == ("bad", 2)
    message, code = describe(KeyError("x"))
    assert code == 1
    assert message.startswith("Unexpected KeyError: 'x'") and "--debug" in message
    multi, _ = describe(RuntimeError("first\nsecond"))
    assert "\n" not in multi and "second" not in multi


def test_a_password_in_the_query_is_hidden_too() -> None:
    result = run("publish", "kafka://h:9092?credential.password=pa%24%24word", "--sample", "iot")
    line = assert_error(result, 2, "names no topic")
    assert "pa%24%24word" not in line and "pa$$word" not in line and "***" in line


def test_redact_hides_uri_passwords_and_remembered_secrets() -> None:
    remember_text("mqtt://u:p%40ss@h:1883/t")
    text = redact_text("mqtt://u:p%40ss@h:1883/t failed; the password p@ss was refused")
    assert "p%40ss" not in text and "p@ss" not in text
    assert "mqtt://u:***@h:1883/t" in text


def test_empty_input_to_publish_is_an_error_unless_allowed() -> None:
    empty = run("publish", "kafka://127.0.0.1:1/t", "--stdin", input="")
    assert_error(empty, 1, "Nothing to publish: standard input holds no JSON line", "--allow-empty")
    allowed = run("publish", "kafka://127.0.0.1:1/t", "--stdin", "--allow-empty", input="")
    assert allowed.exit_code == 0 and "Published 0 messages" in allowed.stdout


def test_a_registry_url_that_answers_like_no_registry_is_a_named_error_not_an_unexpected_one(
    tmp_path: Path,
) -> None:
    """A web server (here a proxy's HTML 404 for every path) where the registry should be:
    the CLI says what the registry client found and what to check, never "Unexpected ...
    please report it"."""
    from sluice.registry_server import start_schema_registry

    schema = tmp_path / "reading.avsc"
    schema.write_text(
        '{"type": "record", "name": "Reading", "fields": [{"name": "device", "type": "string"}]}'
    )
    server = start_schema_registry()
    server.proxy_404 = ("/",)
    try:
        result = run(
            *("publish", "kafka://127.0.0.1:1/t", "--sample", "iot", "--count", "1"),
            *("--format", "avro", "--schema", str(schema), "--registry", server.url),
        )
    finally:
        server.stop()
    line = assert_error(result, 1, f"The schema registry URL {server.url}", "Check the URL")
    assert "not a schema registry's" in line
    assert "Unexpected" not in line and "report" not in line
