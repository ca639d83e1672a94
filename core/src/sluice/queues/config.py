"""The one configuration vocabulary: declared keys, type checks and unknown-key warnings.

Every queue declares the keys it understands as :class:`ConfigKey` objects. :func:`read_config`
checks a pip-services ``ConfigParams`` against them: a value of the wrong type raises
:class:`ConfigError` naming the key and the expected type, an unknown key produces an
:class:`UnknownConfigKeyWarning` naming it (with a "did you mean" when a known key is close).
The same declarations generate the configuration reference (docs/reference/configuration.md).
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pip_services3_commons.config import ConfigParams

from ..secrets import REDACTED, redact_text

__all__ = [
    "COMMON_KEYS",
    "ConfigError",
    "ConfigKey",
    "UnknownConfigKeyWarning",
    "did_you_mean",
    "read_config",
    "suggest_key",
    "to_config_params",
]

_TRUE = {"true", "1", "yes", "on", "y", "t"}
_FALSE = {"false", "0", "no", "off", "n", "f"}


class ConfigError(ValueError):
    """A configuration value is missing or has the wrong type. The message names the key."""


class UnknownConfigKeyWarning(UserWarning):
    """A configuration key that no component understands (often a typo)."""


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key: its name, type, default and meaning."""

    name: str
    type: type
    default: Any
    description: str
    secret: bool = False
    choices: tuple[Any, ...] = ()

    def parse(self, raw: Any, component: str) -> Any:
        """Convert a raw value (often a string from a URI or a file) to this key's type."""
        if raw is None:
            return None
        try:
            value = _convert(raw, self.type)
        except (TypeError, ValueError):
            shown = REDACTED if self.secret else redact_text(repr(raw))
            raise ConfigError(
                f"{component}: config key '{self.name}' expects {self.type.__name__}, got {shown}. "
                f"Fix the value of '{self.name}' in your configuration."
            ) from None
        if self.choices and value not in self.choices:
            options = ", ".join(repr(c) for c in self.choices)
            raise ConfigError(
                f"{component}: config key '{self.name}' must be one of {options}, got "
                f"{REDACTED if self.secret else redact_text(repr(value))}."
            )
        return value


def _convert(raw: Any, target: type) -> Any:
    if target is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(raw)
    if target is int:
        if isinstance(raw, bool):
            raise TypeError(raw)
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        return int(str(raw).strip())
    if target is float:
        if isinstance(raw, bool):
            raise TypeError(raw)
        return float(raw)
    if target is str:
        if isinstance(raw, (dict, list, tuple, set)):
            raise TypeError(raw)
        return str(raw)
    return target(raw)


# Keys every component accepts: the component name, and the connection and credential
# sections that pip-services' ConnectionResolver and CredentialResolver read.
COMMON_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("name", str, None, "Component name, used in logs."),
    ConfigKey("descriptor", str, None, "pip-services component descriptor (ignored by Sluice)."),
    ConfigKey(
        "connection.discovery_key",
        str,
        None,
        "Key to look the connection up in a discovery service.",
    ),
    ConfigKey(
        "connection.protocol", str, None, "Connection protocol (tcp, ssl, mqtt, mqtts, ...)."
    ),
    ConfigKey("connection.host", str, None, "Broker host name or IP address."),
    ConfigKey("connection.port", int, None, "Broker port."),
    ConfigKey("connection.uri", str, None, "Broker URI; may carry every other connection key."),
    ConfigKey(
        "credential.store_key", str, None, "Key to look the credential up in a credential store."
    ),
    ConfigKey("credential.username", str, None, "User name."),
    ConfigKey("credential.password", str, None, "Password (never logged).", secret=True),
    ConfigKey("credential.access_id", str, None, "Application access id."),
    ConfigKey(
        "credential.access_key", str, None, "Application secret key (never logged).", secret=True
    ),
)

# pip-services also accepts numbered sections: connections.0.host, credentials.1.username ...
_NUMBERED = re.compile(r"^(connection|credential)s\.\d+\.")


def _canonical(key: str) -> str:
    return _NUMBERED.sub(lambda m: m.group(1) + ".", key)


def to_config_params(config: ConfigParams | Mapping[str, Any] | None) -> ConfigParams:
    """Accept a ConfigParams, a flat dict of keys, or None."""
    if isinstance(config, ConfigParams):
        return config
    return ConfigParams.from_value(dict(config or {}))


def read_config(
    config: ConfigParams | Mapping[str, Any],
    keys: Iterable[ConfigKey],
    component: str,
) -> dict[str, Any]:
    """Validate ``config`` against ``keys`` and return every key's value (defaults applied).

    Raises :class:`ConfigError` for a value of the wrong type; warns with
    :class:`UnknownConfigKeyWarning` for a key not in ``keys`` or :data:`COMMON_KEYS`.
    """
    params = to_config_params(config)
    known: dict[str, ConfigKey] = {k.name: k for k in (*COMMON_KEYS, *keys)}
    values: dict[str, Any] = {name: k.default for name, k in known.items()}
    for raw_key in params.get_keys():
        key = _canonical(str(raw_key))
        spec = known.get(key)
        if spec is None:
            warn_unknown_key(str(raw_key), known, component)
            continue
        parsed = spec.parse(params.get(raw_key), component)
        if parsed is not None:
            values[key] = parsed
    return values


def suggest_key(key: str, known: Iterable[str], cutoff: float = 0.7) -> str | None:
    """The known key closest to ``key``, if one is close: the one place that guesses what a
    misspelt key meant (queue configs, URI queries, Airflow extras, Dagster fields).

    A URI's query parameter that is not a top-level key becomes ``options.<name>``, so
    ``?from_begining=true`` arrives as ``options.from_begining``: names are compared with and
    without the ``options.`` prefix (``from_beginning`` is suggested for it).
    """
    names = list(known)
    prefix = "options."
    bare = key[len(prefix) :] if key.startswith(prefix) else key
    # what the user may have typed, and the known name each comparable form stands for
    forms = {name: name for name in names}
    forms.update({name[len(prefix) :]: name for name in names if name.startswith(prefix)})
    close = difflib.get_close_matches(bare, list(forms), n=1, cutoff=cutoff)
    if not close:
        close = difflib.get_close_matches(key, names, n=1, cutoff=cutoff)
        return close[0] if close else None
    return forms[close[0]]


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` Did you mean 'X'?`` for a misspelt ``key``, or an empty string."""
    close = suggest_key(key, known)
    return f" Did you mean '{close}'?" if close else ""


def warn_unknown_key(key: str, known: Iterable[str], component: str) -> None:
    warnings.warn(
        f"{component}: unknown config key '{key}' is ignored.{did_you_mean(key, known)}",
        UnknownConfigKeyWarning,
        stacklevel=4,
    )
