"""The configuration reference, generated from the code: every config key with its type,
default and meaning, and how an Airflow connection and the Dagster resources map onto them.

``python -m sluice.reference`` prints it; ``--write docs/reference/configuration.md`` puts it
between the ``<!-- config-reference:start -->`` and ``<!-- config-reference:end -->`` markers
of a file; ``--check docs/reference/configuration.md`` exits 1 when the file's copy is out of
date. :func:`cli_reference` is the reference of the ``sluice`` command, from its own
definitions (the documentation site's build puts it on its page).

The provider sections read ``sluice_airflow`` and ``sluice_dagster`` when they are installed
(this is a documentation tool: the core itself never needs them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .queues.config import COMMON_KEYS, ConfigKey
from .queues.uri import transports

__all__ = ["AIRFLOW_FIELDS", "END", "START", "cli_reference", "render", "replace_section"]

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"

#: How an Airflow Connection's fields become config keys (sluice.connection_fields does it;
#: tests/unit/test_config_reference.py checks this table against it).
AIRFLOW_FIELDS: tuple[tuple[str, str], ...] = (
    ("host", "`connection.host`; a server list (`h1:9092,h2:9092`) or a URI: `connection.uri`"),
    ("port", "`connection.port`"),
    ("login", "`credential.username`"),
    ("password", "`credential.password` (secret)"),
    ("extra", 'any other key of the tables above, as JSON: `{"group_id": "lake"}`'),
)

_ENVIRONMENT: tuple[tuple[str, str, str], ...] = (
    (
        "sluice.kafka.config:DEFAULT_BOOTSTRAP_ENV",
        "SLUICE_KAFKA_BOOTSTRAP",
        "Kafka servers when a queue's config names none (default `localhost:9092`).",
    ),
    (
        "sluice.spark.session:MASTER_ENV",
        "SLUICE_SPARK_MASTER",
        "Spark master of `sluice.spark.spark_session` and `sluice ingest` (default `local[*]`).",
    ),
    (
        "sluice.spark.session:SHIP_ENV",
        "SLUICE_SPARK_SHIP",
        "`1`: every session ships Sluice to its executors (`spark_session(ship_sluice=True)`).",
    ),
    (
        "sluice.spark.class_archive:CDS_ENV",
        "SLUICE_SPARK_CDS",
        "`0`: JVMs that Sluice starts neither write nor map the class archive of Spark's "
        "classes (default on; see `sluice.spark.class_archive`).",
    ),
    (
        "sluice.jars:CACHE_ENV",
        "SLUICE_CACHE_DIR",
        "Sluice's cache: the jars it resolves, that class archive, the test servers' "
        "downloads (default `$XDG_CACHE_HOME/sluice` or `~/.cache/sluice`).",
    ),
    (
        "sluice.cli.brokers:HOME_ENV",
        "SLUICE_HOME",
        "Where `sluice brokers` keeps the embedded brokers' state (default `~/.sluice`).",
    ),
    ("", "SLUICE_DEBUG", "`1`: the `sluice` command shows tracebacks and library logs."),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _value(value: Any) -> str:
    if value is None:
        return ""
    return f"`{json.dumps(value)}`"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _key_rows(keys: Iterable[ConfigKey]) -> list[list[str]]:
    rows = []
    for key in keys:
        meaning = key.description
        if key.choices:
            choices = ", ".join(_value(c) for c in key.choices)
            meaning += f" One of: {choices}."
        if key.secret and "never logged" not in meaning:
            meaning += " Secret: never logged."
        rows.append([f"`{key.name}`", key.type.__name__, _value(key.default), _cell(meaning)])
    return rows


def _queue_sections() -> list[str]:
    by_class: dict[str, list[str]] = {}
    for scheme, transport in sorted(transports().items()):
        by_class.setdefault(transport.target, []).append(f"`{scheme}://`")
    lines = [
        "## Keys every queue accepts",
        "",
        "pip-services' connection and credential sections. In a URI, host and port are "
        "`connection.host`/`connection.port`, user info is `credential.username`/"
        "`credential.password`, the path is `topic`, and each query parameter is a key "
        "(`options.` may be left out: `?qos=1` is `options.qos`).",
        "",
        *_table(["key", "type", "default", "meaning"], _key_rows(COMMON_KEYS)),
    ]
    for target, schemes in by_class.items():
        module_name, _, class_name = target.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except ImportError:
            lines += ["", f"## {class_name} ({', '.join(schemes)})", "", "Not installed here."]
            continue
        lines += [
            "",
            f"## {class_name} ({', '.join(schemes)})",
            "",
            *_table(["key", "type", "default", "meaning"], _key_rows(cls.CONFIG_KEYS)),
        ]
    return lines


def _airflow_section() -> list[str]:
    lines = ["## Airflow connection (`sluice_kafka`, `sluice_mqtt`)", ""]
    try:
        info = importlib.import_module("sluice_airflow.get_provider_info")
    except ImportError:
        return [*lines, "TODO: install sluice-airflow to document its connection form."]
    lines += [
        "A Connection of type `sluice_kafka` or `sluice_mqtt` (used by `QueueHook` and every "
        "Sluice operator, sensor and trigger) maps onto the keys above; an unknown key in its "
        "extra is an error that names it.",
        "",
    ]
    behaviour: dict[str, dict[str, Any]] = info.UI_FIELD_BEHAVIOUR
    types = sorted(behaviour)
    rows = []
    for field, key in AIRFLOW_FIELDS:
        labels = [_form_label(behaviour[t], field) for t in types]
        rows.append([f"`{field}`", *labels, _cell(key)])
    hidden = sorted({f for t in types for f in behaviour[t]["hidden-fields"]})
    lines += _table(["field", *(f"form: `{t}`" for t in types), "config key"], rows)
    if hidden:
        lines += ["", f"Hidden in the form: {', '.join(f'`{h}`' for h in hidden)}."]
    return lines


def _form_label(form: dict[str, Any], field: str) -> str:
    label = str(form["relabeling"].get(field, field))
    hint = form["placeholders"].get(field)
    return _cell(f"{label} (hint: `{hint}`)" if hint else label)


def _dagster_section() -> list[str]:
    lines = ["## Dagster resources", ""]
    try:
        resources = importlib.import_module("sluice_dagster.resources")
        ops = importlib.import_module("sluice_dagster.ops")
    except ImportError:
        return [*lines, "TODO: install sluice-dagster to document its resources."]
    classes = [
        getattr(resources, name, None)
        for name in ("KafkaQueueResource", "MqttQueueResource", "SparkResource")
    ]
    # the settings of an ingest job, asset or op (make_ingest_job(..., **settings))
    classes.append(getattr(ops, "IngestSettings", None))
    for cls in classes:
        if cls is None:
            continue
        rows = []
        for field, info in cls.model_fields.items():
            if field.startswith("_"):
                continue
            required = info.is_required()
            default = "required" if required else _field_default(info)
            rows.append(
                [
                    f"`{field}`",
                    _cell(_type_name(info.annotation)),
                    default,
                    _cell(info.description or ""),
                ]
            )
        lines += [
            f"`sluice_dagster.{cls.__name__}`",
            "",
            *_table(["field", "type", "default", "meaning"], rows),
            "",
        ]
    return lines[:-1]


def _field_default(info: Any) -> str:
    if info.default_factory is not None:
        return _value(info.default_factory())
    return _value(info.default)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def _environment_section() -> list[str]:
    rows = []
    for source, name, meaning in _ENVIRONMENT:
        if source:
            module_name, _, attribute = source.partition(":")
            with contextlib.suppress(ImportError):
                name = getattr(importlib.import_module(module_name), attribute)
        rows.append([f"`{name}`", _cell(meaning)])
    return ["## Environment variables", "", *_table(["variable", "meaning"], rows)]


def _catalog_section() -> list[str]:
    lines = ["## Iceberg catalog properties", ""]
    try:
        catalogs = importlib.import_module("sluice.spark.sinks.catalogs")
    except ImportError:
        return [*lines, "Not installed here."]
    lines += [
        "An Iceberg sink's catalog is configured the pyiceberg way (`.pyiceberg.yaml`, or "
        "`PYICEBERG_CATALOG__<NAME>__*` environment variables); Sluice reads these of its "
        "properties too.",
        "",
    ]
    rows = [
        [f"`{name}`", kind.__name__, _value(default), _cell(meaning)]
        for name, kind, default, meaning in catalogs.CATALOG_PROPERTIES
    ]
    return [*lines, *_table(["property", "type", "default", "meaning"], rows)]


def render() -> str:
    """The reference as Markdown (without the markers)."""
    lines = [
        "<!-- Generated by `python -m sluice.reference --write "
        "docs/reference/configuration.md`: edit the code, not this section. -->",
        "",
        *_queue_sections(),
        "",
        *_airflow_section(),
        "",
        *_dagster_section(),
        "",
        *_catalog_section(),
        "",
        *_environment_section(),
    ]
    return "\n".join(lines) + "\n"


def cli_reference() -> str:
    """The ``sluice`` command as Markdown, from its own definitions (Typer's commands): each
    command with its usage, help and every argument and option, as ``sluice X --help`` shows
    them."""
    import typer

    from .cli import app

    lines: list[str] = []

    def walk(command: Any, path: list[str], ctx: Any) -> None:
        if hasattr(command, "list_commands"):
            for name in sorted(command.list_commands(ctx)):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name], sub.context_class(sub, info_name=name, parent=ctx))
            return
        title = " ".join(path)
        lines.extend([f"## `{title}`", "", _cell((command.help or "").replace("\b", "")), ""])
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines.extend(["```text", f"{title} {usage}".rstrip(), "```", ""])
        rows = []
        for param in command.params:
            record = param.get_help_record(ctx)
            if param.param_type_name == "argument":
                rows.append(
                    [
                        f"`{(param.metavar or param.name or '').upper()}` (argument)",
                        _cell(param.help or ""),
                    ]
                )
            elif record is not None:
                rows.append([_cell(record[0]), _cell(record[1])])
        if rows:
            lines.extend([*_table(["argument or option", "meaning"], rows), ""])

    root = typer.main.get_command(app)
    walk(root, ["sluice"], root.context_class(root, info_name="sluice"))
    return "\n".join(lines).rstrip() + "\n"


def replace_section(text: str, section: str) -> str:
    """``text`` with what lies between the markers replaced by ``section``."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {START} and {END} are missing (or out of order)")
    return text[: start + len(START)] + "\n" + section + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.reference", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", help="update the section of FILE")
    group.add_argument("--check", metavar="FILE", help="exit 1 if FILE's section is outdated")
    args = parser.parse_args(argv)
    section = render()
    path = Path(args.write or args.check or "")
    if not (args.write or args.check):
        sys.stdout.write(section)
        return 0
    try:
        current = path.read_text(encoding="utf-8")
        updated = replace_section(current, section)
    except (OSError, ValueError) as exc:
        print(f"Error: {path}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != current:
            print(
                f"{path}: the configuration reference is out of date; run: "
                f"python -m sluice.reference --write {path}",
                file=sys.stderr,
            )
            return 1
        return 0
    if updated != current:
        path.write_text(updated, encoding="utf-8")
        print(f"{path}: configuration reference updated.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
