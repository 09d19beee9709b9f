"""The LAST USED and SIZE cells of `envlayer ls` / `reap`."""

from __future__ import annotations

import pytest

from envlayer.cli.table_cells import ago_cell, last_used_cell, size_cell

NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        (None, ""),
        ("in use", "in use"),
        ("", "?"),
        ("soon", "?"),
        (str(NOW - 0.2), "just now"),
        (str(NOW + 5), "just now"),
        (str(NOW - 65), "1m 5s ago"),
        (str(NOW - 7200), "2h ago"),
        (str(NOW - 3 * 86400 - 7200 - 5), "3d 2h ago"),
    ],
)
def test_last_used_cell(value: str | None, cell: str) -> None:
    assert last_used_cell(value, now=NOW) == cell


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        (None, ""),
        ("", "?"),
        ("-1x", "?"),
        ("0", "0 B"),
        ("1023", "1023 B"),
        ("1536", "1.5 KiB"),
        (str(5 << 30), "5.0 GiB"),
    ],
)
def test_size_cell(value: str | None, cell: str) -> None:
    assert size_cell(value) == cell


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("", ""),
        ("not a time", "not a time"),
        (str(NOW - 65), "1m 5s ago"),
        ("1970-01-12T12:45:40Z", "1h 1m ago"),  # NOW is 1970-01-12T13:46:40Z
        ("1970-01-12T13:46:35.000000001Z", "5s ago"),  # Docker's nanoseconds
        ("1970-01-12T14:46:30+01:00", "10s ago"),
        ("1970-01-12T13:46:00", "40s ago"),  # no zone: UTC
    ],
)
def test_ago_cell_gives_every_listing_one_time_format(value: str, cell: str) -> None:
    assert ago_cell(value, now=NOW) == cell
