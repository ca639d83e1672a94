"""A stand-in for a Confluent Schema Registry, over HTTP on 127.0.0.1: for the tests, and for
a first local try (``sluice brokers up --registry``).

No installable Schema Registry server could be had here: Confluent's is a Java service
outside PyPI and npm, and Karapace (Aiven's Python implementation) is not published on PyPI.
So this small server implements the documented subset of the Confluent REST API that Sluice
uses, and Sluice's own client (:mod:`sluice.formats.registry`), the one a user runs, talks
to it over HTTP:

- ``GET /subjects``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects/{subject}/versions/{version|latest}``;
- ``POST /subjects/{subject}/versions`` (``schema``, ``schemaType``, ``references``): the
  same schema under the same subject keeps its id and version; a schema that fails the
  subject's compatibility is refused with 409;
- ``GET /schemas/ids/{id}``; ``format=serialized`` is accepted (Protobuf schemas are kept as
  registered, which for Sluice and confluent-kafka's serializer is a base64
  FileDescriptorProto; a real registry also takes and returns .proto text);
- ``GET``/``PUT /config`` and ``/config/{subject}`` (``compatibility``: NONE or BACKWARD, the
  default), ``POST /compatibility/subjects/{subject}/versions/latest``;
- errors as the real one gives them: ``{"error_code": 40401 | 40402 | 40403 | 409 | 42201,
  "message": ...}`` (an unknown schema id: 404 with ``{"error_code": 40403, "message":
  "Schema 7 not found"}``; a path outside the API: 404 with error code 404, as the real one's
  web server answers); HTTP Basic authentication when a user and password are set (401).

Not the registry's own: paths starting with one of :attr:`SchemaRegistryServer.proxy_404`
get a proxy's 404, an HTML page without an error code (a proxy in front of a registry that
does not route them). ``requests`` counts every request by method and path.

Compatibility is checked for Avro only (BACKWARD: a new version may add fields with a
default, drop fields, and widen int to long or float to double; any other change of a field
is refused), which is what the tests need. It is a stand-in for tests and for a first local
try (``sluice brokers up --registry`` runs it as a process: :func:`main`), never a registry to
run for real: it keeps its schemas in memory, so they are gone when it stops.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["BANNER", "SchemaRegistryServer", "main", "start_schema_registry"]

_PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
}


@dataclass
class _Schema:
    id: int
    schema_type: str
    schema: str
    references: list[dict[str, Any]]


@dataclass
class _State:
    schemas: list[_Schema] = field(default_factory=list)
    subjects: dict[str, list[int]] = field(default_factory=dict)  # subject -> schema ids by version
    compatibility: dict[str, str] = field(default_factory=dict)  # "" is the global level


class _Refused(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _avro_fields(text: str) -> dict[str, dict[str, Any]] | None:
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    return {f["name"]: f for f in schema.get("fields", [])}


def _type_name(t: Any) -> str:
    return json.dumps(t, sort_keys=True) if not isinstance(t, str) else t


def _avro_backward(old: str, new: str) -> list[str]:
    """Why a reader of ``new`` cannot read data written with ``old`` (empty: it can)."""
    old_fields, new_fields = _avro_fields(old), _avro_fields(new)
    if old_fields is None or new_fields is None:
        return []
    problems = []
    for name, f in new_fields.items():
        if name not in old_fields:
            if "default" not in f:
                problems.append(f"new field '{name}' has no default")
            continue
        before, after = _type_name(old_fields[name]["type"]), _type_name(f["type"])
        if before != after and (before, after) not in _PROMOTIONS:
            problems.append(f"field '{name}' changed type from {before} to {after}")
    return problems


class _Handler(BaseHTTPRequestHandler):
    server: SchemaRegistryServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        registry = self.server
        if registry.username is None:
            return True
        expected = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
        return self.headers.get("Authorization") == f"Basic {expected}"

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = [unquote(p) for p in parts.path.strip("/").split("/") if p]
        self.server.requests[f"{method} {parts.path}"] += 1
        if parts.path.startswith(self.server.proxy_404):
            page = b"<html><head><title>404 Not Found</title></head><body>nginx</body></html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if not self._authorized():
            self._send(401, {"error_code": 40101, "message": "Unauthorized"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null") if length else None
        try:
            with self.server.lock:
                status, answer = self.server.route(method, path, parse_qs(parts.query), body)
        except _Refused as exc:
            self._send(exc.status, {"error_code": exc.code, "message": exc.message})
            return
        self._send(status, answer)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")


class SchemaRegistryServer(ThreadingHTTPServer):
    """The stand-in registry (see the module docstring); :func:`start_schema_registry`."""

    daemon_threads = True

    def __init__(
        self, username: str | None = None, password: str | None = None, port: int = 0
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.username, self.password = username, password
        self.state = _State()
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.proxy_404: tuple[str, ...] = ()  # path prefixes a "proxy" answers with HTML 404
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> SchemaRegistryServer:
        self._thread = threading.Thread(
            target=self.serve_forever, name="schema-registry", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering (the port is closed: clients get 'connection refused')."""
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> SchemaRegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the API ---------------------------------------------------------------------------

    def route(
        self, method: str, path: list[str], query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        state = self.state
        if method == "GET" and path == ["subjects"]:
            return 200, sorted(state.subjects)
        if path[:1] == ["subjects"] and len(path) >= 3 and path[2] == "versions":
            subject = path[1]
            if method == "POST" and len(path) == 3:
                return 200, {"id": self._register(subject, body or {})}
            versions = state.subjects.get(subject)
            if versions is None:
                raise _Refused(404, 40401, f"Subject '{subject}' not found.")
            if len(path) == 3:
                return 200, list(range(1, len(versions) + 1))
            number = len(versions) if path[3] == "latest" else int(path[3])
            if not 1 <= number <= len(versions):
                raise _Refused(404, 40402, f"Version {path[3]} not found.")
            schema = state.schemas[versions[number - 1] - 1]
            return 200, {"subject": subject, "version": number, **self._answer(schema)}
        if method == "GET" and path[:2] == ["schemas", "ids"] and len(path) == 3:
            schema_id = int(path[2])
            if not 1 <= schema_id <= len(state.schemas):
                raise _Refused(404, 40403, f"Schema {schema_id} not found")
            return 200, self._answer(state.schemas[schema_id - 1])
        if path[:1] == ["config"] and len(path) <= 2:
            subject = path[1] if len(path) == 2 else ""
            if method == "PUT":
                level = str((body or {}).get("compatibility", "")).upper()
                if level not in ("NONE", "BACKWARD"):
                    raise _Refused(422, 42203, f"Invalid compatibility level {level}")
                state.compatibility[subject] = level
                return 200, {"compatibility": level}
            if subject and subject not in state.compatibility:
                raise _Refused(404, 40408, f"Subject '{subject}' has no compatibility level")
            return 200, {"compatibilityLevel": state.compatibility.get(subject, "BACKWARD")}
        if method == "POST" and path[:2] == ["compatibility", "subjects"] and len(path) == 5:
            problems = self._incompatible(path[2], body or {})
            return 200, {"is_compatible": not problems, "messages": problems}
        raise _Refused(404, 404, f"{method} /{'/'.join(path)} is not part of this stand-in")

    def _answer(self, schema: _Schema) -> dict[str, Any]:
        answer: dict[str, Any] = {"id": schema.id, "schema": schema.schema}
        if schema.schema_type != "AVRO":
            answer["schemaType"] = schema.schema_type
        if schema.references:
            answer["references"] = schema.references
        return answer

    def _level(self, subject: str) -> str:
        return self.state.compatibility.get(subject) or self.state.compatibility.get("", "BACKWARD")

    def _incompatible(self, subject: str, body: dict[str, Any]) -> list[str]:
        versions = self.state.subjects.get(subject)
        kind = str(body.get("schemaType") or "AVRO")
        if not versions or kind != "AVRO" or self._level(subject) == "NONE":
            return []
        latest = self.state.schemas[versions[-1] - 1]
        return _avro_backward(latest.schema, str(body.get("schema", "")))

    def _register(self, subject: str, body: dict[str, Any]) -> int:
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise _Refused(422, 42201, "Invalid schema: 'schema' is missing")
        kind = str(body.get("schemaType") or "AVRO")
        if kind not in ("AVRO", "PROTOBUF", "JSON"):
            raise _Refused(422, 42201, f"Invalid schemaType {kind}")
        if kind in ("AVRO", "JSON"):
            try:
                json.loads(text)
            except ValueError as exc:
                raise _Refused(422, 42201, f"Invalid schema: {exc}") from None
        references = list(body.get("references") or [])
        versions = self.state.subjects.setdefault(subject, [])
        for schema_id in versions:
            known = self.state.schemas[schema_id - 1]
            if (known.schema, known.schema_type) == (text, kind):
                return known.id
        problems = self._incompatible(subject, body)
        if problems:
            raise _Refused(
                409,
                409,
                f"Schema being registered is incompatible with an earlier schema for subject "
                f"'{subject}': {'; '.join(problems)}",
            )
        same = next(
            (s for s in self.state.schemas if (s.schema, s.schema_type) == (text, kind)), None
        )
        if same is None:
            same = _Schema(len(self.state.schemas) + 1, kind, text, references)
            self.state.schemas.append(same)
        versions.append(same.id)
        return same.id


def start_schema_registry(
    username: str | None = None, password: str | None = None
) -> SchemaRegistryServer:
    """A stand-in registry on a free port of 127.0.0.1, serving in a thread; ``stop()`` it."""
    return SchemaRegistryServer(username, password).start()


#: What the process says first, so that nobody takes it for a registry to keep schemas in.
BANNER = (
    "Sluice's stand-in Schema Registry, for trying Sluice out: schemas are kept in memory "
    "and lost when it stops. Run Confluent Schema Registry (or another compatible one) for "
    "real work."
)


def main(argv: list[str] | None = None) -> None:
    """``python -m sluice.registry_server --port P``: serve on 127.0.0.1 until SIGTERM or
    SIGINT (``sluice brokers up --registry``)."""
    parser = argparse.ArgumentParser(description=BANNER)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    args = parser.parse_args(argv)
    server = SchemaRegistryServer(port=args.port)

    def stop(*_: object) -> None:  # shutdown() waits for serve_forever: not from its thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{BANNER}\nServing at {server.url}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
