"""The one size parser: the same text means the same bytes in every option and plan field."""

from __future__ import annotations

import pytest

from layoutlab.errors import UserError
from layoutlab.units import SizeError, parse_size, size_label


@pytest.mark.parametrize("text, expected", [("8MiB", 8 * 2**20), ("4 MB", 4 * 10**6), ("65536", 65536),
                                            ("1.5GiB", 3 * 2**29), ("512k", 512_000), (4096, 4096)])
def test_sizes_as_people_write_them(text, expected):
    assert parse_size(text) == expected


def test_a_bad_size_names_the_setting_and_is_both_a_user_error_and_a_value_error():
    with pytest.raises(SizeError, match=r"--max-mem: not a size: '8 bananas'") as raised:
        parse_size("8 bananas", "--max-mem")
    assert isinstance(raised.value, UserError) and isinstance(raised.value, ValueError)
    with pytest.raises(SizeError):
        parse_size(True)


def test_labels_round_trip():
    assert [size_label(n) for n in (8 * 2**20, 2**30, 1536, 1000)] == ["8MiB", "1GiB", "1536B", "1000B"]
    assert parse_size(size_label(4 * 2**20)) == 4 * 2**20
