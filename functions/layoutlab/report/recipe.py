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

import re
from collections import Counter

DEFAULT_COMPRESSOR = "blosc-zstd:3"  # convert/rechunk_zarr.py's default codec chain


def _size_text(value) -> str:
    from layoutlab.units import size_label

    label = size_label(int(value))
    return label[:-1] if label.endswith("B") and not label.endswith("iB") else label  # plain bytes: "65536"


def make_steps(variant: str, item: dict | None, variants: dict[str, dict] | None = None) -> dict:
    """How to produce ``variant`` from the uploaded file: commands (and the nearest h5repack flags), or the
    Python that does it (references, Icechunk). References over a paged copy start with the copy's steps
    (``variants`` holds its item)."""
    item = item or {}
    spec = item.get("spec") or {}
    kind = item.get("variant_kind") or spec.get("kind") or ("original" if variant == "original" else None)
    if kind is None and variant.startswith("paged-"):
        kind = "repack-paged"
    if kind == "original":
        return {"kind": "original", "commands": [], "note": "keep the file as it is: no conversion, no extra storage"}
    if kind in ("repack-paged", "rechunked-paged"):
        pages = (item.get("page_size"), (item.get("repack") or {}).get("page_size"), spec.get("page_size"))
        page = next((p for p in pages if isinstance(p, int) and not isinstance(p, bool)), None)  # not "auto"
        if page is None and re.search(r"paged-\d+[KMG]?i?B$", variant):  # an item without its spec: the name says the page
            from layoutlab.units import parse_size

            page = parse_size(variant.rsplit("-", 1)[-1], "page size in the variant's name")
        if page is None:
            return {"kind": kind, "commands": [], "note": "the page size was not recorded with this variant"}
        layoutlab = f"layoutlab repack INPUT.h5 OUTPUT.h5 --page-size {_size_text(page)}"
        h5repack = f"h5repack -S PAGE -G {int(page)}"
        if spec.get("target_chunk_bytes"):
            layoutlab += f" --target-chunk-bytes {int(spec['target_chunk_bytes'])}"
            h5repack += " -l CHUNK=... (per dataset; h5repack has no byte target)"
        note = ("h5repack -S PAGE leaves free-space tracking off and keeps COMPACT datasets and unlimited "
                "dimensions; layoutlab repack also persists free space, makes COMPACT datasets CONTIGUOUS "
                "and fixes unlimited dimensions at their size")
        if item.get("page_size_choice"):
            budget = item.get("size_budget")
            chosen = (f" (--page-size auto{f' --size-budget {budget:.0%}' if isinstance(budget, float) else ''}"
                      " chooses it from the file)" if spec.get("page_size_requested") == "auto" else "")
            note = f"page size: {item['page_size_choice']}{chosen}. {note}"
        return {"kind": kind, "commands": [layoutlab], "h5repack": f"{h5repack} INPUT.h5 OUTPUT.h5", "note": note}
    if kind == "rechunk-zarr":
        chunks = spec.get("chunks") or {}
        chunk_text = ",".join(f"{dim}={n}" for dim, n in chunks.items())
        command = f"layoutlab rechunk INPUT.nc OUTPUT.zarr --chunks {chunk_text}"
        shards = spec.get("shards")
        if shards:
            command += " --shards " + (",".join(f"{d}={n}" for d, n in shards.items()) if isinstance(shards, dict)
                                       else str(shards))
        compressor = spec.get("compressor") or DEFAULT_COMPRESSOR
        if spec.get("compressor"):
            command += f" --compressor {compressor}"
        python = (f"zarr.create_array(store, name=VARIABLE, shape=..., dtype=..., chunks={_tuple(chunks)}, "
                  f"shards={_tuple(shards) if isinstance(shards, dict) else 'None'}, "
                  f"compressors={_codec_text(compressor)}, dimension_names={list(chunks)!r}, zarr_format=3)")
        return {"kind": kind, "commands": [command], "python": python}
    if kind == "icechunk":
        return _icechunk_native_steps(spec, item)
    if kind in ("virtual-kerchunk", "icechunk-virtual"):
        return _virtual_steps(variant, kind, spec, item, variants or {})
    # a kind this module does not know: the variant's own spec, so nothing is hidden
    return {"kind": kind, "commands": [], "spec": {k: v for k, v in spec.items() if k not in ("uri",)}}


def _tuple(sizes: dict) -> str:
    return "(" + ", ".join(str(n) for n in sizes.values()) + ("," if len(sizes) == 1 else "") + ")"


def installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _pins(item: dict, names: tuple[str, ...]) -> str:
    """``pip install "virtualizarr==2.8.0" ...``: the versions the VARIANT item recorded, else those installed
    where this recipe is written (the summary step runs in the pipeline's own image, so they are the ones
    that made the variant there)."""
    recorded = item.get("versions") or (item.get("virtual") or {}).get("versions") or {}
    pins, source = [], "recorded with the variant"
    for name in names:
        version = recorded.get(name)
        if version is None:
            version, source = installed_version(name), "as installed where this recipe was written"
        if version:
            pins.append(f'"{name}=={version}"')
    return f"pip install {' '.join(pins)}  # {source}" if pins else ""


def _virtual_record_note(item: dict) -> str | None:
    record = item.get("virtual") or {}
    if not record:
        return None
    inlined, skipped = record.get("inlined") or [], record.get("skipped") or []
    packed = [p for p in record.get("packed") or [] if p.get("kept") == "inlined"]
    note = (f"{record.get('virtual_arrays', '?')} arrays referenced ({record.get('virtual_chunks', '?')} chunks), "
            f"{len(inlined)} inlined, {len(skipped)} skipped")
    if packed:
        note += f" ({len(packed)} packed variables inlined: VirtualiZarr #1004/#1059)"
    return note + "; the reasons are listed in the VARIANT item's 'virtual' record"


def _virtual_steps(variant: str, kind: str, spec: dict, item: dict, variants: dict) -> dict:
    """References (kerchunk JSON, or an Icechunk repository of virtual chunks) over the original or over a
    paged copy: layoutlab's call that made them, and the nearest plain VirtualiZarr/Icechunk."""
    over = spec.get("over") or "original"
    first: list[str] = []
    python_first = ""
    if over != "original":
        before = make_steps(over, variants.get(over), variants)
        first = [f"{c}   # first: {over}" for c in before.get("commands", [])]
        python_first = before.get("python", "")
    source = "SOURCE_URL" if over == "original" else f"URL_OF_{over.upper().replace('-', '_')}"
    local = "INPUT.h5" if over == "original" else "OUTPUT.h5"  # the file itself, or the paged copy made first
    record = item.get("virtual") or {}
    measured = f"# measured over {record['over']}" if record.get("over") else ""
    plain = ('import obstore, virtualizarr as vz\n'
             'from obspec_utils.registry import ObjectStoreRegistry\n'
             'from virtualizarr.parsers import HDFParser\n'
             'registry = ObjectStoreRegistry({"s3://BUCKET": obstore.store.S3Store("BUCKET")})\n'
             f'vds = vz.open_virtual_dataset("{source}", registry=registry, parser=HDFParser(group=GROUP))')
    if kind == "virtual-kerchunk":
        pins = _pins(item, ("virtualizarr", "obspec-utils", "kerchunk"))
        references = spec.get("references", "json")
        python = ("from layoutlab.convert import virtual\n"
                  f'layout = virtual.build_layout("{local}", "{source}")  # references name {source}\n'
                  f'virtual.write_kerchunk(layout, "s3://OUT_BUCKET/{variant}.json", boto3.client("s3"))\n'
                  "# nearest plain VirtualiZarr (one group at a time; inlines nothing it cannot reference):\n"
                  f'{plain}\nvds.vz.to_kerchunk("{variant}.json", format="{references}", zarr_format=3)')
        note = "kerchunk references in Zarr format 3, no chunk data copied"
    else:
        pins = _pins(item, ("virtualizarr", "obspec-utils", "icechunk"))
        python = ("from layoutlab.convert import virtual\n"
                  f'layout = virtual.build_layout("{local}", "{source}")\n'
                  f'virtual.write_icechunk_virtual(layout, "s3://OUT_BUCKET/{variant}.icechunk", etag=SOURCE_ETAG)\n'
                  "# nearest plain Icechunk + VirtualiZarr (it pins chunks by time, last_updated_at=, not by ETag):\n"
                  "import icechunk\n"
                  "config = icechunk.RepositoryConfig.default()\n"
                  'config.set_virtual_chunk_container(icechunk.VirtualChunkContainer("s3://BUCKET/", '
                  "icechunk.s3_store(region=REGION)))\n"
                  'repo = icechunk.Repository.create(icechunk.s3_storage(bucket="OUT_BUCKET", '
                  f'prefix="{variant}.icechunk", region=REGION, from_env=True), config=config,\n'
                  '    authorize_virtual_chunk_access=icechunk.containers_credentials('
                  '{"s3://BUCKET/": icechunk.s3_credentials(from_env=True)}))\n'
                  'session = repo.writable_session("main")\n'
                  f"{plain}\nvds.vz.to_icechunk(session.store)\n"
                  f'session.commit("virtual references over {source}")')
        note = ("an Icechunk repository of virtual chunks, each pinned to the source object's ETag "
                f"({record.get('source_etag') or 'recorded as source_etag'}): a re-upload makes reads fail, "
                "never read other bytes")
    records = _virtual_record_note(item)
    if records:
        note += f"; {records}"
    if python_first:
        python = f"{python_first}\n{python}"
    return {"kind": kind, "commands": first + ([pins] if pins else []) + ([measured] if measured else []),
            "python": python, "note": note}


def _icechunk_native_steps(spec: dict, item: dict) -> dict:
    """A native Icechunk repository: the grid rechunked (and sharded) as convert/icechunk_store.py writes it."""
    chunks = spec.get("chunks") or {}
    shards = spec.get("shards")
    pins = _pins(item, ("icechunk", "zarr"))
    python = ("import icechunk, zarr\n"
              'repo = icechunk.Repository.create(icechunk.s3_storage(bucket="OUT_BUCKET", '
              f'prefix="{spec.get("name") or "VARIANT"}.icechunk", region=REGION, from_env=True))\n'
              'session = repo.writable_session("main")\n'
              'root = zarr.open_group(session.store, mode="w", zarr_format=3)\n'
              f"array = root.create_array(VARIABLE, shape=..., dtype=..., chunks={_tuple(chunks)}, "
              f"shards={_tuple(shards) if isinstance(shards, dict) else 'None'}, compressors=\"auto\", "
              f"dimension_names={list(chunks)!r})  # every (time, lat, lon) variable; the rest one chunk each\n"
              "array[...] = VALUES  # in whole shards along time, as memory allows\n"
              'session.commit("rechunked copy")  # one commit: readers see all of it or nothing')
    return {"kind": "icechunk", "commands": [pins] if pins else [], "python": python,
            "note": "native Icechunk: chunk data copied, compressors zarr's default (zstd)"}


def _codec_text(spec: str) -> str:
    if spec == "none":
        return "None"
    name, _, level = spec.partition(":")
    if name.startswith("blosc-"):
        return f'BloscCodec(cname="{name[len("blosc-"):]}", clevel={level or 5}, shuffle="shuffle")'
    return f"ZstdCodec(level={level or 3})"


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
