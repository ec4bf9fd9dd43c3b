"""The recipe a recommendation comes with: the command to make the layout, and the reader settings measured."""

from __future__ import annotations

from report_records import GRID, grid_items

from layoutlab.report.decision import decide
from layoutlab.report.recipe import make_steps, recipe


def test_a_paged_variant_gives_the_repack_command_and_the_nearest_h5repack_flags():
    steps = make_steps("paged-8MiB", {"variant_kind": "repack-paged",
                                      "spec": {"kind": "repack-paged", "page_size": 8 * 2**20}})
    assert steps["commands"] == ["layoutlab repack INPUT.h5 OUTPUT.h5 --page-size 8MiB"]
    assert steps["h5repack"] == "h5repack -S PAGE -G 8388608 INPUT.h5 OUTPUT.h5"
    assert "COMPACT" in steps["note"] and "unlimited" in steps["note"]


def test_a_zarr_variant_gives_the_rechunk_command_and_the_create_array_call():
    steps = make_steps("zarr-120x50x100", {"variant_kind": "rechunk-zarr", "spec": {
        "kind": "rechunk-zarr", "chunks": {"time": 120, "lat": 50, "lon": 100}, "shards": {"time": 240, "lat": 100,
                                                                                            "lon": 200}}})
    assert steps["commands"] == ["layoutlab rechunk INPUT.nc OUTPUT.zarr --chunks time=120,lat=50,lon=100 "
                                 "--shards time=240,lat=100,lon=200"]
    assert "chunks=(120, 50, 100), shards=(240, 100, 200)" in steps["python"]
    assert 'BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")' in steps["python"]


def test_the_summary_recipe_names_the_kept_variant_and_the_settings_its_reader_ran_with():
    items = grid_items()
    results = [i for i in items if i["kind"] == "RESULT" and i["dataset"] == GRID]
    for r in results:  # the settings a reader records (bench/readers.py)
        r["reader_settings"] = ({"library": "zarr+obstore", "concurrency": 10} if r["reader"] == "zarr-obstore" else
                                {"library": "h5py+s3fs", "cache_type": "BlockCache", "block_size": 8388608,
                                 "page_buf_size": 33554432, "rdcc_nbytes": 1048576})
    variants = {i["variant"]: i for i in items if i["kind"] == "VARIANT" and i["dataset"] == GRID}
    decided = decide(results, variants=variants)
    platform = decided["primary_platform"]
    made = recipe(decided["platforms"][platform], platform, variants, results)
    kept = decided["platforms"][platform]["choice"]["variant"]
    assert made["variant"] == kept and made["text"].startswith(f"# {platform}: keep {kept}")
    if kept.startswith("zarr-"):
        assert "layoutlab rechunk INPUT.nc OUTPUT.zarr --chunks time=" in made["text"]
        assert "'async.concurrency': 10" in made["text"]
    assert made["read"], made  # the reader settings that got the measured time are in it
