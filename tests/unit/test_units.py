"""The one size parser: the same text means the same bytes in every option and plan field."""

from __future__ import annotations

import numpy as np
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


# What rechunk's own --max-mem parser read before it used this one (issue 18): the same bytes for every
# spelling it accepted (decimal KB/MB/GB, binary KiB/MiB/GiB, bytes, any case, spaces, decimals, numpy
# integers from a plan), and still no exponent or thousands separator.
@pytest.mark.parametrize("text, expected", [
    ("64MiB", 64 * 2**20), ("64MB", 64 * 10**6), ("2GB", 2 * 10**9), ("2GiB", 2 * 2**30), ("300KiB", 300 * 2**10),
    ("300kb", 300_000), (" 512 mib ", 512 * 2**20), (".5MB", 500_000), ("42", 42), ("42B", 42), ("0", 0),
    (64, 64), (np.int64(7), 7), (np.uint32(5), 5), (1.5e6, 1_500_000)])
def test_every_spelling_rechunks_max_mem_accepted_means_the_same_bytes(text, expected):
    assert parse_size(text, "--max-mem") == expected


@pytest.mark.parametrize("text", ["1e6", "1e6B", "1,000", "-1", "lots", "", "64 MiBs"])
def test_what_rechunks_max_mem_refused_is_still_refused_in_one_line(text):
    with pytest.raises(SizeError) as raised:
        parse_size(text, "--max-mem")
    message = str(raised.value)
    assert message.startswith(f"--max-mem: not a size: {text!r}") and "\n" not in message
