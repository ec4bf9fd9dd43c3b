"""The exact recipe for the layout a decision keeps: what to run to make it, and how to read it as measured.

A recommendation is only useful if a data producer can reproduce it: the
command (and, for paged HDF5, the ``h5repack`` flags that come closest), the
``zarr.create_array`` call for a Zarr layout, and the reader settings that got
the measured time (cache type, block size, page buffer, chunk cache,
concurrency), taken from the RESULT records of the best reader. ``recipe()``
returns them as data and as text to paste; the SUMMARY item, ``layoutlab
results --kind SUMMARY`` and the report show the text.
"""

from __future__ import annotations

import json
from collections import Counter

from layoutlab import kinds
from layoutlab.kinds._recipe import installed_version  # noqa: F401  (the recipe's versions, where tests find it)


def make_steps(variant: str, item: dict | None, variants: dict[str, dict] | None = None) -> dict:
    """How to produce ``variant`` from the uploaded file: commands (and the nearest h5repack flags), or the
    Python that does it (references, Icechunk): its kind's recipe (``layoutlab/kinds/``). References over a
    paged copy start with the copy's steps (``variants`` holds its item)."""
    item = item or {}
    variants = variants or {}
    kind = kinds.kind_of(variant, item)
    if kind is None:  # a kind this code does not know (or none recorded): the variant's own spec, so nothing is hidden
        spec = item.get("spec") or {}
        return {"kind": item.get("variant_kind") or spec.get("kind"), "commands": [],
                "spec": {k: v for k, v in spec.items() if k not in ("uri",)}}
    return kind.make_steps(variant, item, variants, lambda name: make_steps(name, variants.get(name), variants))


def read_settings(results: list[dict], platform: str, variant: str, best_reader_by_pattern: dict[str, str]) -> dict:
    """reader -> the settings its RESULT records on ``platform`` for ``variant`` ran with (most common)."""
    out = {}
    for reader in sorted(set(best_reader_by_pattern.values())):
        seen: Counter = Counter()
        for r in results:
            if (r.get("platform"), r.get("variant"), r.get("reader")) == (platform, variant, reader):
                settings = {k: v for k, v in (r.get("reader_settings") or {}).items()
                            if k not in ("h5py", "hdf5", "zarr", "xarray", "library")}
                # counted by their JSON text: a setting may be a list or a mapping (an Icechunk repository's
                # virtual chunk containers), which no tuple of items can hold as a key
                seen[json.dumps(settings, sort_keys=True, default=str)] += 1
        if seen:
            settings = json.loads(seen.most_common(1)[0][0])
            out[reader] = {"patterns": sorted(p for p, rd in best_reader_by_pattern.items() if rd == reader),
                           "settings": settings, "python": _reader_text(reader, settings)}
    return out


def _fsspec_cache_name(recorded) -> str | None:
    """fsspec's name for a cache (``readahead``) from what a record holds: the name or the class (``ReadAheadCache``)."""
    try:
        from fsspec.caching import caches
    except ImportError:
        caches = {}
    names = {cls.__name__: name for name, cls in caches.items()}
    text = str(recorded) if recorded is not None else None
    if text in caches:
        return text
    if text in names:
        return names[text]
    return "blockcache" if text and text.lower().startswith("block") else text


def _reader_text(reader: str, s: dict) -> str:
    """The Python that opens the data the way ``reader`` did (bench/readers.py), with its recorded settings."""
    if reader.startswith("h5py-s3fs"):
        cache = _fsspec_cache_name(s.get("cache_type"))
        options = f', cache_options={{"maxblocks": {s["maxblocks"]}}}' if s.get("maxblocks") else ""
        opener = f'fs.open(URL, "rb", cache_type="{cache}", block_size={s.get("block_size")}{options})'
        h5 = [f"rdcc_nbytes={s['rdcc_nbytes']}"] if isinstance(s.get("rdcc_nbytes"), int) else []
        if s.get("page_buf_size"):
            h5.insert(0, f"page_buf_size={s['page_buf_size']}")
        return f"h5py.File({opener}, \"r\"{', ' if h5 else ''}{', '.join(h5)})"
    if reader == "xarray-h5netcdf":
        cache = f" (the cache xarray picked: {s.get('cache_type')}, block size {s.get('block_size')})" \
            if s.get("cache_type") else ""
        return ('xr.open_dataset(URL, engine="h5netcdf", phony_dims="access", chunks=None, '
                f"storage_options={{...}}){cache}")
    if reader == "xarray-zarr":
        return 'xr.open_zarr(URL, group=GROUP, zarr_format=3, chunks=None, storage_options={...})  # consolidated metadata read'
    if reader == "xarray-icechunk":
        session = (f'repo.readonly_session(snapshot_id="{s["snapshot"]}")' if s.get("snapshot")
                   else 'repo.readonly_session("main")')
        return f"xr.open_zarr({session}.store, group=GROUP, consolidated=False, zarr_format=3, chunks=None)"
    if reader.startswith("zarr-"):
        config = {"async.concurrency": s.get("concurrency")}
        if s.get("sharding_coalesce_max_gap_bytes") is not None:
            config["array.sharding_coalesce_max_gap_bytes"] = s["sharding_coalesce_max_gap_bytes"]
            config["array.sharding_coalesce_max_bytes"] = s.get("sharding_coalesce_max_bytes")
        store = ("zarr.storage.ObjectStore(obstore.store.S3Store(BUCKET, prefix=PREFIX), read_only=True)"
                 if "obstore" in str(s.get("library", reader)) else "store")
        return f"zarr.config.set({config!r}); zarr.open_group({store}, mode=\"r\")"
    if reader == "kerchunk-fsspec":
        return ('fs = fsspec.filesystem("reference", fo=json.load(fsspec.open(REFS_URL).open()), '
                'remote_protocol="s3", remote_options={"version_aware": True}, asynchronous=True); '
                'zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)'
                f"  # {s.get('cache_type', 'a ranged GET per chunk')}")
    if reader == "icechunk":
        session = (f'repo.readonly_session(snapshot_id="{s["snapshot"]}")' if s.get("snapshot")
                   else 'repo.readonly_session("main")')
        tuned = {k: s[k] for k in ("max_concurrent_requests", "get_partial_values_concurrency") if s.get(k) is not None}
        config = (f"config = icechunk.RepositoryConfig.default(); " + "; ".join(f"config.{k} = {v}" for k, v in
                                                                               tuned.items()) + "; ") if tuned else ""
        return (f"{config}repo = icechunk.Repository.open(icechunk.s3_storage(bucket=BUCKET, prefix=PREFIX, "
                f"from_env=True){', config=config' if tuned else ''}, authorize_virtual_chunk_access="
                'icechunk.containers_credentials({"s3://SOURCE_BUCKET/": icechunk.s3_credentials(from_env=True)})); '
                f'zarr.open_group({session}.store, mode="r")  # Icechunk\'s default concurrency')
    if reader == "h5coro":
        return (f'h5coro.H5Coro("BUCKET/KEY", s3driver.S3Driver, credentials={{}}, '
                f"cacheLineSize={s.get('cache_line_size')}, errorChecking=True)")
    return ", ".join(f"{k}={v}" for k, v in sorted(s.items()))


VERSION_KEYS = ("h5py", "hdf5", "zarr", "xarray", "icechunk", "fsspec", "h5coro", "obstore", "s3fs", "numcodecs")


def _reader_versions(results: list[dict], platform: str, variant: str, reader: str) -> dict:
    """Library versions the reader's RESULT records ran with (reader settings, then the record's versions)."""
    for r in results:
        if (r.get("platform"), r.get("variant"), r.get("reader")) == (platform, variant, reader):
            settings, versions = r.get("reader_settings") or {}, r.get("versions") or {}
            wanted = {k for k in VERSION_KEYS if k in settings}
            wanted |= {"zarr", "obstore"} if reader.startswith("zarr-") else set()
            wanted |= {"h5py", "hdf5", "s3fs"} if reader.startswith("h5py-s3fs") else set()
            wanted |= {"xarray", "h5py", "s3fs"} if reader.startswith("xarray") else set()
            wanted |= {"zarr", "fsspec", "s3fs"} if reader.startswith("kerchunk") else set()
            found = {k: settings.get(k) or versions.get(k) for k in sorted(wanted)}
            return {k: v for k, v in found.items() if isinstance(v, str) and v and v[0].isdigit()}
    return {}


def recipe(decided_platform: dict, platform: str, variants: dict[str, dict], results: list[dict]) -> dict | None:
    """The recipe for the variant ``decided_platform`` (one platform of ``decision.decide``) keeps."""
    choice = decided_platform.get("choice")
    if not choice:
        return None
    variant = choice["variant"]
    best_reader_by_pattern = {}
    for pattern, entry in decided_platform["patterns"].items():
        by_reader = {reader: w["wall_s_by_variant"].get(variant) for reader, w in entry.get("by_reader", {}).items()}
        by_reader = {reader: wall for reader, wall in by_reader.items() if wall is not None}
        if by_reader:
            best_reader_by_pattern[pattern] = min(by_reader, key=by_reader.get)
    steps = make_steps(variant, variants.get(variant), variants)
    readers = read_settings(results, platform, variant, best_reader_by_pattern)
    for reader, info in readers.items():
        info["versions"] = _reader_versions(results, platform, variant, reader)
    lines = [f"# {platform}: keep {variant}"]
    lines += steps.get("commands", [])
    if steps.get("note"):
        lines.append(f"# {steps['note']}")
    if steps.get("h5repack"):
        lines.append(f"# nearest h5repack: {steps['h5repack']}")
    if steps.get("python"):
        lines.append(steps["python"])
    if steps.get("spec"):
        lines.append(f"# variant spec: {steps['spec']}")
    for reader, info in readers.items():
        lines.append(f"# read as measured ({reader}; {', '.join(info['patterns'])}):")
        lines.append(info["python"])
        if info["versions"]:
            lines.append("#   with " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    return {"platform": platform, "variant": variant, "make": steps, "read": readers, "text": "\n".join(lines)}
