"""The schema registry client against the stand-in of sluice.testing (real HTTP on loopback):
only Confluent's 40403 makes a schema id unknown; any other 404 fails, naming the URL."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pyarrow as pa
import pytest

from sluice.formats.plan import PayloadPlan
from sluice.formats.registry import (
    RegistryError,
    RegistrySettings,
    SchemaNotFoundError,
    SchemaRegistry,
)
from sluice.formats.wire import frame
from sluice.registry_server import SchemaRegistryServer, start_schema_registry

PASSWORD = "reg-pass-7f3q"
READING = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "id", "type": "string"}],
}


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    """A stand-in registry with a login, and one schema (id 1)."""
    server = start_schema_registry("reader", PASSWORD)
    try:
        client = SchemaRegistry(f"http://reader:{PASSWORD}@{server.url.removeprefix('http://')}")
        assert client.register("readings-value", json.dumps(READING)) == 1
        yield server
    finally:
        server.stop()


def _url(server: SchemaRegistryServer, path: str = "") -> str:
    return f"http://reader:{PASSWORD}@{server.url.removeprefix('http://')}{path}"


def _plan(url: str) -> PayloadPlan:
    """A batch's plan of framed Avro values that read no schema yet (all asked by id)."""
    return PayloadPlan(
        "avro",
        "value",
        pa.struct([("id", pa.string())]),
        framed=True,
        registry=RegistrySettings.of(url),
        subject="readings-value",
    )


def test_the_stand_in_answers_an_unknown_id_like_confluent(
    registry: SchemaRegistryServer,
) -> None:
    request = urllib.request.Request(f"{registry.url}/schemas/ids/7")
    request.add_header("Authorization", "Basic " + _basic())
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 404
    assert caught.value.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    assert json.loads(caught.value.read()) == {"error_code": 40403, "message": "Schema 7 not found"}


def _basic() -> str:
    import base64

    return base64.b64encode(f"reader:{PASSWORD}".encode()).decode()


def test_only_error_code_40403_is_an_unknown_schema_id(registry: SchemaRegistryServer) -> None:
    client = SchemaRegistry(_url(registry))
    with pytest.raises(SchemaNotFoundError, match="unknown schema id 7") as caught:
        client.schema(7)
    assert getattr(caught.value, "error_code", None) == 40403
    assert client.schema(1).schema == json.dumps(READING)


def test_a_proxy_html_404_fails_naming_the_url_and_status_without_the_password(
    registry: SchemaRegistryServer,
) -> None:
    registry.proxy_404 = ("/schemas/ids/",)
    client = SchemaRegistry(_url(registry))
    with pytest.raises(RegistryError) as caught:
        client.schema(1)
    message = str(caught.value)
    shown = f"http://reader:***@{registry.url.removeprefix('http://')}"
    assert f"GET {shown}/schemas/ids/1 answered 404 (text/html)" in message
    assert "Check the URL" in message and PASSWORD not in message
    assert not isinstance(caught.value, SchemaNotFoundError)


def test_a_wrong_path_is_not_an_unknown_schema_id_nor_a_subject_without_versions(
    registry: SchemaRegistryServer,
) -> None:
    client = SchemaRegistry(_url(registry, "/registry"))
    with pytest.raises(RegistryError, match=r"/registry/schemas/ids/1 answered 404"):
        client.schema(1)
    with pytest.raises(RegistryError, match=r"/registry/subjects/readings-value/versions answ"):
        client.versions("readings-value")
    assert SchemaRegistry(_url(registry)).versions("nothing-here") == [], "40401: no versions"


def test_an_unknown_id_is_asked_once_per_batch_not_once_per_record(
    registry: SchemaRegistryServer,
) -> None:
    plan = _plan(_url(registry))
    values: list[bytes | None] = [frame(999, b"\x02x")] * 50
    _, errors = plan.decoder().decode(values)
    assert (
        errors
        == [
            "unknown schema id 999: the schema registry at "
            f"http://reader:***@{registry.url.removeprefix('http://')} has no schema "
            "with this id"
        ]
        * 50
    )
    _, again = plan.decoder().decode(values)  # another task of the batch, same worker process
    assert again == errors
    assert registry.requests["GET /schemas/ids/999"] == 1

    _plan(_url(registry)).decoder().decode(values[:3])  # the next batch asks again
    assert registry.requests["GET /schemas/ids/999"] == 2


def test_a_decoder_fails_the_batch_on_a_proxy_404(registry: SchemaRegistryServer) -> None:
    registry.proxy_404 = ("/schemas/ids/",)
    with pytest.raises(RegistryError, match="answered 404 \\(text/html\\)"):
        _plan(_url(registry)).decoder().decode([frame(1, b"\x02x")] * 5)
    assert registry.requests["GET /schemas/ids/1"] == 1


def test_a_200_that_is_not_json_fails_naming_the_url_and_status() -> None:
    """A login page of a proxy in front of the registry, answered with 200."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class LoginPage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = b"<html><body>Sign in</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), LoginPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        client = SchemaRegistry(f"http://reader:{PASSWORD}@127.0.0.1:{port}")
        with pytest.raises(RegistryError) as caught:
            client.schema(1)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    message = str(caught.value)
    assert f"GET http://reader:***@127.0.0.1:{port}/schemas/ids/1 answered 200 (text/html)" in (
        message
    )
    assert PASSWORD not in message
