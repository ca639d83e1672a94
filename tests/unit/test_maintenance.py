"""The sizes and ages ``sluice compact`` and ``sluice expire`` take, and their errors."""

from __future__ import annotations

import pytest

from sluice.maintenance import parse_age, parse_size
from sluice.queues.config import ConfigError


def test_sizes_and_ages() -> None:
    assert parse_size("128MB") == parse_size("128mib") == 128 * 2**20
    assert (parse_size("512k"), parse_size("1GB"), parse_size("4096"), parse_size(10)) == (
        512 * 1024,
        2**30,
        4096,
        10,
    )
    assert (parse_age("7d"), parse_age("12h"), parse_age("30m"), parse_age("45")) == (
        7 * 86400,
        12 * 3600,
        1800,
        45,
    )
    assert parse_age("2w") == 14 * 86400 and parse_age(0) == 0


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: parse_size("12QB"), "write it as 128MB"),
        (lambda: parse_size("0MB"), "more than 0 bytes"),
        (lambda: parse_age("7x"), "write it as 7d"),
        (lambda: parse_age("-1d"), "write it as 7d"),
    ],
)
def test_wrong_sizes_and_ages_say_how_to_write_them(call: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        call()  # type: ignore[operator]
