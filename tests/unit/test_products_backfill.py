"""Backfill: the local item list in pages, the batch payload, and the state machine's contract (issue 35)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from layoutlab.errors import UserError
from layoutlab.products import backfill

ASL = Path(__file__).resolve().parents[2] / "stepfunctions" / "backfill.asl.json"


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        for bucket in ("archive", "out"):
            client.create_bucket(Bucket=bucket)
        yield client


def test_the_item_list_is_written_in_pages_of_the_listing_leaving_out_folders_and_empty_objects(s3):
    for i in range(7):
        s3.put_object(Bucket="archive", Key=f"p/{i:02d}.h5", Body=b"x" * (i + 1))
    s3.put_object(Bucket="archive", Key="p/folder/", Body=b"")
    s3.put_object(Bucket="archive", Key="p/empty.h5", Body=b"")
    s3.put_object(Bucket="archive", Key="q/other.h5", Body=b"y")
    written = backfill.write_item_pages(s3, "out", "b1", "archive", "p/", page_items=3)
    assert (written["pages"], written["items"], written["batches"]) == (3, 7, 7)
    pages = [json.loads(s3.get_object(Bucket="out", Key=backfill.page_key("b1", n))["Body"].read()) for n in (1, 2, 3)]
    assert [[len(b) for b in p] for p in pages] == [[1, 1, 1], [1, 1, 1], [1]]  # batches of one by default
    assert [i["Key"] for p in pages for b in p for i in b] == [f"p/{i:02d}.h5" for i in range(7)]
    assert pages[0][1][0]["Size"] == 2 and pages[0][0][0]["Etag"]


def test_the_item_pages_hold_batches_that_never_straddle_a_listing_page(s3):
    """Locally the CLI batches as ItemBatcher does in AWS: one child converts up to --batch granules."""
    for i in range(7):
        s3.put_object(Bucket="archive", Key=f"p/{i:02d}.h5", Body=b"x")
    written = backfill.write_item_pages(s3, "out", "b3", "archive", "p/", page_items=5, batch_items=2)
    assert (written["pages"], written["items"], written["batches"]) == (2, 7, 4)
    pages = [json.loads(s3.get_object(Bucket="out", Key=backfill.page_key("b3", n))["Body"].read()) for n in (1, 2)]
    assert [[[i["Key"][2:4] for i in b] for b in p] for p in pages] == [[["00", "01"], ["02", "03"], ["04"]],
                                                                        [["05", "06"]]]
    with pytest.raises(UserError, match="at least one granule"):
        backfill.write_item_pages(s3, "out", "b4", "archive", "p/", batch_items=0)


def test_a_batch_names_what_it_lacks():
    with pytest.raises(UserError, match="BatchInput lacks product"):
        backfill.BackfillInput.from_batch({"Items": [], "BatchInput": {"bucket": "b", "prefix": "p/"}})
    with pytest.raises(UserError, match="expected"):
        backfill.BackfillInput.from_batch({"Key": "x.h5"})
    job, items = backfill.BackfillInput.from_batch({"Items": [{"Key": "p/a.h5"}],
                                                    "BatchInput": {"product": "P", "bucket": "b", "prefix": "p/"}})
    assert job == backfill.BackfillInput("P", "b", "p/") and items == [{"Key": "p/a.h5"}]


def test_the_backfill_map_lists_the_prefix_in_aws_and_reads_item_pages_locally_with_no_indexed_paths():
    text = ASL.read_text()
    asl = json.loads(text)
    listing, page = asl["States"]["BackfillListing"], asl["States"]["BackfillPage"]
    assert listing["ItemReader"]["Resource"] == "arn:aws:states:::s3:listObjectsV2"
    assert listing["ItemBatcher"]["BatchInput"] == page["ItemSelector"]["BatchInput"]
    assert "ToleratedFailurePercentagePath" in listing and "ToleratedFailurePercentagePath" in page
    assert listing["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert page["ItemReader"]["Resource"] == "arn:aws:states:::s3:getObject"
    assert "ResultWriter" in listing and "ResultWriter" in page
    assert not re.search(r"\$\.[\w.]*\[\d+\]", text)  # moto returns [x] for $.a[0].b
    # the key the Pass state builds is the key write_item_pages writes
    fmt = asl["States"]["PageKey"]["Parameters"]["key.$"]
    assert "runs/backfill/{}/items-{}.json" in fmt and backfill.page_key("B", 2) == "runs/backfill/B/items-2.json"


def test_the_local_definition_drops_only_the_item_batcher_moto_cannot_parse():
    from layoutlab.local.backfill import local_backfill_definition

    local = json.loads(local_backfill_definition())
    original = json.loads(ASL.read_text())
    assert "ItemBatcher" not in local["States"]["BackfillListing"]
    del original["States"]["BackfillListing"]["ItemBatcher"]
    assert set(local["States"]) == set(original["States"]) and "${" not in json.dumps(local)


def test_a_thousand_listed_objects_are_written_one_listing_page_at_a_time(s3, monkeypatch):
    """The item list of a big archive is planned in bounded memory: never more than one page held."""
    for i in range(1000):
        s3.put_object(Bucket="archive", Key=f"big/{i:05d}.h5", Body=b"x")
    held, put = [], s3.put_object

    def put_object(**kwargs):
        if kwargs.get("Key", "").startswith(backfill.RUNS_PREFIX):
            held.append(len(json.loads(kwargs["Body"])))
        return put(**kwargs)

    monkeypatch.setattr(s3, "put_object", put_object)
    pages = backfill.listed_objects(s3, "archive", "big/", page_items=300)
    assert next(pages) and not isinstance(pages, list)  # a generator: pages are listed as they are written
    written = backfill.write_item_pages(s3, "out", "b2", "archive", "big/", page_items=300)
    assert (written["pages"], written["items"]) == (4, 1000) and held == [300, 300, 300, 100]  # batches of one
