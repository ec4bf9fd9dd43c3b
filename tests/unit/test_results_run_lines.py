"""`layoutlab results` shows, under a RUN item, what the plan step read and the readers it left out (issue 34)."""

from decimal import Decimal

from layoutlab.commands.results import run_lines


def test_a_run_item_shows_the_plan_steps_requests_bytes_and_share_of_the_file():
    item = {"kind": "RUN", "dataset": "d1",
            "plan_io": {"requests": Decimal(22), "bytes": Decimal(5505024), "file_bytes": Decimal(931219703)},
            "readers_not_planned": [{"variant": "paged-auto", "reader": "h5coro", "why": "superblock version 3"}]}
    lines = run_lines(item)
    assert lines[0] == "d1: the plan step read 22 requests, 5,505,024 bytes (0.59% of the file's 931,219,703)"
    assert lines[1] == "  h5coro not planned on paged-auto: superblock version 3"


def test_a_run_item_of_before_shows_nothing():
    assert run_lines({"kind": "RUN", "dataset": "d1"}) == []
