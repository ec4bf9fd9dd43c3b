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


# -- references, Icechunk, shards, and the readers that read them ---------------------------------
def _installed(name):
    from layoutlab.report.recipe import installed_version

    return installed_version(name)


VIRTUAL_RECORD = {"virtual_arrays": 618, "virtual_chunks": 2100, "inlined": [{"variable": "a", "reason": "compact"}],
                  "skipped": [], "packed": [], "over": "s3://ingest/incoming/atl03.h5?versionId=v1",
                  "source_etag": '"930280d4"'}


def test_kerchunk_references_over_the_original_give_layoutlabs_call_and_the_plain_virtualizarr_one():
    steps = make_steps("kerchunk-original", {"variant_kind": "virtual-kerchunk", "virtual": VIRTUAL_RECORD,
                                             "spec": {"kind": "virtual-kerchunk", "over": "original"}})
    assert steps["commands"][0] == (f'pip install "virtualizarr=={_installed("virtualizarr")}" '
                                    f'"obspec-utils=={_installed("obspec-utils")}" "kerchunk=={_installed("kerchunk")}"'
                                    "  # as installed where this recipe was written")
    assert "# measured over s3://ingest/incoming/atl03.h5?versionId=v1" in steps["commands"]
    assert 'virtual.build_layout("INPUT.h5", "SOURCE_URL")' in steps["python"]
    assert "parser=HDFParser(group=GROUP)" in steps["python"]
    assert 'vds.vz.to_kerchunk("kerchunk-original.json", format="json", zarr_format=3)' in steps["python"]
    assert "618 arrays referenced (2100 chunks), 1 inlined, 0 skipped" in steps["note"]


def test_references_over_a_paged_copy_start_by_making_the_copy():
    variants = {"paged-8MiB": {"variant_kind": "repack-paged", "spec": {"kind": "repack-paged",
                                                                        "page_size": 8 * 2**20}}}
    steps = make_steps("kerchunk-paged-8MiB", {"variant_kind": "virtual-kerchunk",
                                               "spec": {"kind": "virtual-kerchunk", "over": "paged-8MiB"},
                                               "versions": {"virtualizarr": "2.8.0", "obspec-utils": "0.9.0",
                                                            "kerchunk": "0.2.10"}}, variants)
    assert steps["commands"][0] == "layoutlab repack INPUT.h5 OUTPUT.h5 --page-size 8MiB   # first: paged-8MiB"
    assert steps["commands"][1].endswith("# recorded with the variant")  # the item's own versions, pinned
    assert '"virtualizarr==2.8.0"' in steps["commands"][1]
    assert 'virtual.build_layout("OUTPUT.h5", "URL_OF_PAGED_8MIB")' in steps["python"]


def test_icechunk_virtual_gives_the_repository_with_its_container_and_the_etag_pin():
    steps = make_steps("icechunk-virtual", {"variant_kind": "icechunk-virtual", "virtual": VIRTUAL_RECORD,
                                            "spec": {"kind": "icechunk-virtual"}})
    assert f'"icechunk=={_installed("icechunk")}"' in steps["commands"][0]
    python = steps["python"]
    assert "virtual.write_icechunk_virtual(layout, " in python and "etag=SOURCE_ETAG" in python
    assert 'config.set_virtual_chunk_container(icechunk.VirtualChunkContainer("s3://BUCKET/"' in python
    assert "icechunk.Repository.create(" in python and "vds.vz.to_icechunk(session.store)" in python
    assert 'session.commit(' in python
    assert '"930280d4"' in steps["note"] and "ETag" in steps["note"]


def test_native_icechunk_and_sharded_zarr_give_create_array_with_chunks_and_shards():
    spec = {"kind": "icechunk", "name": "icechunk-sharded-24x50x50", "chunks": {"time": 24, "lat": 50, "lon": 50},
            "shards": {"time": 240, "lat": 100, "lon": 100}}
    steps = make_steps("icechunk-sharded-24x50x50", {"variant_kind": "icechunk", "spec": spec})
    assert "icechunk.Repository.create(icechunk.s3_storage(" in steps["python"]
    assert ("root.create_array(VARIABLE, shape=..., dtype=..., chunks=(24, 50, 50), shards=(240, 100, 100), "
            'compressors="auto", dimension_names=[\'time\', \'lat\', \'lon\'])') in steps["python"]
    zarr_steps = make_steps("zarr-sharded-24x50x50", {"variant_kind": "rechunk-zarr", "spec": {**spec,
                                                                                              "kind": "rechunk-zarr"}})
    assert "--shards time=240,lat=100,lon=100" in zarr_steps["commands"][0]
    assert "chunks=(24, 50, 50), shards=(240, 100, 100), compressors=BloscCodec(" in zarr_steps["python"]


def test_a_virtual_winner_s_recipe_has_its_step_and_the_settings_and_versions_its_reader_ran_with():
    results, variants = [], {
        "original": {"variant_kind": "original", "size_bytes": 30_000_000},
        "icechunk-virtual": {"variant_kind": "icechunk-virtual", "size_bytes": 300_000, "convert_s": 2.0,
                             "platform": "local-lambda", "virtual": VIRTUAL_RECORD,
                             "spec": {"kind": "icechunk-virtual"}}}
    for variant, reader, wall, settings in (
            ("original", "h5py-s3fs-default", 1.0, {"library": "h5py+s3fs", "cache_type": "ReadAheadCache",
                                                    "block_size": 52428800, "page_buf_size": 0}),
            ("icechunk-virtual", "icechunk", 0.2, {"library": "icechunk+zarr", "icechunk": "2.3.0", "zarr": "3.4.2",
                                                    "snapshot": "SNAP123", "max_concurrent_requests": None,
                                                    # as the reader records it: a list (the summary once
                                                    # failed on it with "unhashable type: 'list'")
                                                    "virtual_containers": ["s3://layoutlab-local-ingest/"]})):
        for rep in range(3):
            results.append({"kind": "RESULT", "dataset": "g", "variant": variant, "pattern": "beam-read",
                            "reader": reader, "platform": "local-lambda", "repetition": rep,
                            "wall_s": wall * (1 + rep / 50), "checksum_ok": True, "reader_settings": settings,
                            "versions": {"zarr": "3.4.2", "h5py": "3.16.0"}})
    decided = decide(results, variants=variants)
    made = recipe(decided["platforms"]["local-lambda"], "local-lambda", variants, results)
    assert made["variant"] == "icechunk-virtual"
    text = made["text"]
    assert "virtual.write_icechunk_virtual(" in text and "vds.vz.to_icechunk(session.store)" in text
    assert 'repo.readonly_session(snapshot_id="SNAP123")' in text  # the snapshot that was measured, pinned
    assert "#   with icechunk 2.3.0, zarr 3.4.2" in text


def test_reader_settings_text_for_each_reader():
    from layoutlab.report.recipe import _reader_text

    default = _reader_text("h5py-s3fs-default", {"cache_type": "ReadAheadCache", "block_size": 52428800,
                                                 "page_buf_size": 0, "rdcc_nbytes": "library default"})
    assert default == 'h5py.File(fs.open(URL, "rb", cache_type="readahead", block_size=52428800), "r")'
    aligned = _reader_text("h5py-s3fs-aligned", {"cache_type": "BlockCache", "block_size": 8388608, "maxblocks": 32,
                                                 "page_buf_size": 33554432, "rdcc_nbytes": 1048576})
    assert aligned == ('h5py.File(fs.open(URL, "rb", cache_type="blockcache", block_size=8388608, '
                       'cache_options={"maxblocks": 32}), "r", page_buf_size=33554432, rdcc_nbytes=1048576)')
    off = _reader_text("zarr-obstore-nocoalesce", {"concurrency": 10, "sharding_coalesce_max_gap_bytes": -1,
                                                   "sharding_coalesce_max_bytes": 0})
    assert "'array.sharding_coalesce_max_gap_bytes': -1, 'array.sharding_coalesce_max_bytes': 0" in off
    assert "obstore.store.S3Store(BUCKET, prefix=PREFIX)" in off
    assert 'fsspec.filesystem("reference"' in _reader_text("kerchunk-fsspec", {})
    assert "cacheLineSize=4194304" in _reader_text("h5coro", {"cache_line_size": 4194304})
    xr = _reader_text("xarray-h5netcdf", {"cache_type": "BlockCache", "block_size": 4194304})
    assert 'engine="h5netcdf"' in xr and "the cache xarray picked: BlockCache, block size 4194304" in xr


def test_a_page_chosen_by_auto_gives_the_size_made_and_says_how_it_was_chosen():
    item = {"variant_kind": "repack-paged", "page_size": 2 * 2**20, "size_budget": 0.05,
            "page_size_choice": "2 MiB: the largest page within 5% (predicted +3.1%)",
            "spec": {"kind": "repack-paged", "page_size": 2 * 2**20, "page_size_requested": "auto"}}
    steps = make_steps("paged-auto", item)
    assert steps["commands"] == ["layoutlab repack INPUT.h5 OUTPUT.h5 --page-size 2MiB"]
    assert steps["h5repack"] == "h5repack -S PAGE -G 2097152 INPUT.h5 OUTPUT.h5"
    assert steps["note"].startswith("page size: 2 MiB: the largest page within 5% (predicted +3.1%) "
                                    "(--page-size auto --size-budget 5% chooses it from the file).")
