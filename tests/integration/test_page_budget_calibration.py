"""The page-size model against the repack it predicts (issue 17), and the choices it makes at real sizes.

Tolerance, stated: the raw data (every chunk, contiguous and COMPACT data) is packed exactly as
HDF5's paged aggregation packs it; the metadata is an estimate of what the repack writes again. So
- on the samples (ATL03-like, GEOS-like; the demo's sizes and others) the predicted size of the
  copy is within one page or 1 % of the input, whichever is larger (measured: exact at 64 KiB and
  above except one page at 1 MiB on a 334 MB grid; 1-6 pages of 4 KiB);
- on the shared corpus's small third-party files within two pages plus the file's own metadata and
  global-heap bytes (measured: 604 of 678 file x page rows exact, every row within one page from
  256 KiB up, up to 23 pages of 4 KiB where a group's storage is rebuilt differently).
``benchmarks/bench_page_budget.py`` prints the whole table.
"""

from __future__ import annotations

import pytest

from layoutlab.convert.page_budget import choose_page_size, compare_with_repack
from layoutlab.convert.repack import repack
from layoutlab.errors import UserError
from layoutlab.samples import atl03, geos
from shared_corpus import binary_files, label

KiB, MiB = 2**10, 2**20
PAGES = (4 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 8 * MiB)
SAMPLES = {
    "atl03-20k": lambda path: atl03.write_atl03(path, photons=20_000),
    "atl03-200k-demo": lambda path: atl03.write_atl03(path, photons=200_000),  # the demo's granule (30 MB)
    "geos-240x91x144-demo": lambda path: geos.write_geos(path, shape=(240, 91, 144)),  # the demo's grid
    "geos-240x181x288": lambda path: geos.write_geos(path, shape=(240, 181, 288)),
}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("samples")
    return {name: write(workdir / f"{name}.h5") for name, write in SAMPLES.items()}


def _table(rows) -> str:
    return "\n".join(f"{r['file']}: {r['page_size'] // KiB} KiB predicted {r['predicted_overhead']:+.1%} "
                     f"actual {r['actual_overhead']:+.1%} ({r['error_bytes'] / r['page_size']:+.0f} pages)"
                     for r in rows)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_the_prediction_is_within_a_page_or_one_percent_on_the_samples(samples, tmp_path, name):
    rows = compare_with_repack(samples[name], PAGES, tmp_path)
    print("\n" + _table(rows))
    for row in rows:
        assert abs(row["error_bytes"]) <= max(row["page_size"], 0.01 * row["input_bytes"]), _table([row])


CORPUS = [p for p in binary_files() if p.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"]


# (GEDI L2B's subset was an expected failure until 2026-11-28: the copy re-encoded 1,162 datasets whose chunk
# was longer than their fixed axis, which the model, counting stored chunks as copied, did not foresee)
@pytest.mark.skipif(not CORPUS, reason="shared corpus absent (../shared/corpus or LAYOUTLAB_CORPUS)")
@pytest.mark.parametrize("path", CORPUS, ids=[label(p) for p in CORPUS])
def test_the_prediction_is_within_the_metadata_on_the_corpus(path, tmp_path):
    # the smallest page (the model's largest errors: up to 23 pages of 4 KiB) and the pipeline's 1 MiB; every
    # page size of the samples above, and 64 KiB / 8 MiB over the corpus in benchmarks/bench_page_budget.py
    # (a repack per file and page size: four of them over ~130 files were 4-8 minutes of the suite)
    try:
        rows = compare_with_repack(path, (4 * KiB, MiB), tmp_path)
    except UserError as error:  # a file the repack refuses with its reason (tests/integration/test_repack_corpus.py)
        pytest.skip(f"not repacked: {error}")
    for row in rows:
        estimated = row["metadata_bytes"] + row["global_heap_bytes"]
        assert abs(row["error_bytes"]) <= 2 * row["page_size"] + estimated, _table([row])


def test_the_demo_granule_gets_a_page_within_five_percent_where_8_mib_adds_42(samples, tmp_path):
    granule = samples["atl03-200k-demo"]
    choice = choose_page_size(granule)
    eight = next(p for p in choice.predictions if p.page_size == 8 * MiB)
    assert eight.overhead > 0.40  # the issue's +41.8 %
    assert not choice.skip and choice.page_size < 8 * MiB
    assert repack(granule, tmp_path / "paged.h5", page_size=choice.page_size).size_overhead <= 0.05


def test_a_large_geos_like_grid_keeps_8_mib_pages(tmp_path):
    """334 MB of 208 kB chunks: 40 fill an 8 MiB page, and one page of metadata is 2.5 % of the file."""
    grid = geos.write_geos(tmp_path / "geos.nc", shape=(1600, 181, 288), complevel=0)
    choice = choose_page_size(grid)
    assert choice.page_size == 8 * MiB, choice.reason
    assert repack(grid, tmp_path / "paged.h5", page_size=8 * MiB).size_overhead <= 0.05
