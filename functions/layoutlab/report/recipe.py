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

from collections import Counter

DEFAULT_COMPRESSOR = "blosc-zstd:3"  # convert/rechunk_zarr.py's default codec chain


def _size_text(value) -> str:
    from layoutlab.units import size_label

    label = size_label(int(value))
    return label[:-1] if label.endswith("B") and not label.endswith("iB") else label  # plain bytes: "65536"


def make_steps(variant: str, item: dict | None) -> dict:
    """How to produce ``variant`` from the uploaded file: commands (and the nearest h5repack flags)."""
    item = item or {}
    spec = item.get("spec") or {}
    kind = item.get("variant_kind") or spec.get("kind") or ("original" if variant == "original" else None)
    if kind == "original":
        return {"kind": "original", "commands": [], "note": "keep the file as it is: no conversion, no extra storage"}
    if kind == "repack-paged":
        page = spec.get("page_size") or (item.get("repack") or {}).get("page_size")
        if page is None and variant.startswith("paged-"):  # an item without its spec: the name says the page
            from layoutlab.units import parse_size

            page = parse_size(variant.rsplit("-", 1)[-1], "page size in the variant's name")
        if page is None:
            return {"kind": kind, "commands": [], "note": "the page size was not recorded with this variant"}
        layoutlab = f"layoutlab repack INPUT.h5 OUTPUT.h5 --page-size {_size_text(page)}"
        h5repack = f"h5repack -S PAGE -G {int(page)}"
        if spec.get("target_chunk_bytes"):
            layoutlab += f" --target-chunk-bytes {int(spec['target_chunk_bytes'])}"
            h5repack += " -l CHUNK=... (per dataset; h5repack has no byte target)"
        return {"kind": kind, "commands": [layoutlab], "h5repack": f"{h5repack} INPUT.h5 OUTPUT.h5",
                "note": "h5repack -S PAGE leaves free-space tracking off and keeps COMPACT datasets and unlimited "
                        "dimensions; layoutlab repack also persists free space, makes COMPACT datasets CONTIGUOUS "
                        "and fixes unlimited dimensions at their size"}
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
        chunk_tuple = "(" + ", ".join(str(n) for n in chunks.values()) + ("," if len(chunks) == 1 else "") + ")"
        shard_tuple = ("(" + ", ".join(str(n) for n in shards.values()) + ")") if isinstance(shards, dict) else "None"
        python = (f"zarr.create_array(store, name=VARIABLE, shape=..., dtype=..., chunks={chunk_tuple}, "
                  f"shards={shard_tuple}, compressors={_codec_text(compressor)}, "
                  f"dimension_names={list(chunks)!r}, zarr_format=3)")
        return {"kind": kind, "commands": [command], "python": python}
    # kinds this module does not spell out yet (e.g. virtual references, Icechunk): the variant's own spec
    return {"kind": kind, "commands": [], "spec": {k: v for k, v in spec.items() if k not in ("uri",)}}


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
        seen = Counter()
        for r in results:
            if (r.get("platform"), r.get("variant"), r.get("reader")) == (platform, variant, reader):
                settings = {k: v for k, v in (r.get("reader_settings") or {}).items()
                            if k not in ("h5py", "hdf5", "zarr", "xarray", "library")}
                seen[tuple(sorted(settings.items(), key=lambda kv: kv[0]))] += 1
        if seen:
            settings = dict(seen.most_common(1)[0][0])
            out[reader] = {"patterns": sorted(p for p, rd in best_reader_by_pattern.items() if rd == reader),
                           "settings": settings, "python": _reader_text(reader, settings)}
    return out


def _reader_text(reader: str, s: dict) -> str:
    if reader.startswith("h5py-s3fs"):
        cache = "blockcache" if str(s.get("cache_type", "")).lower().startswith("block") else s.get("cache_type")
        opener = f'fs.open(URL, "rb", cache_type="{cache}", block_size={s.get("block_size")})'
        h5 = [f"rdcc_nbytes={s['rdcc_nbytes']}"] if isinstance(s.get("rdcc_nbytes"), int) else []
        if s.get("page_buf_size"):
            h5.insert(0, f"page_buf_size={s['page_buf_size']}")
        return f"h5py.File({opener}, \"r\"{', ' if h5 else ''}{', '.join(h5)})"
    if reader.startswith("zarr-"):
        return f"zarr.config.set({{'async.concurrency': {s.get('concurrency')}}}); zarr.open_group(store, mode=\"r\")"
    return ", ".join(f"{k}={v}" for k, v in sorted(s.items()))


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
    steps = make_steps(variant, variants.get(variant))
    readers = read_settings(results, platform, variant, best_reader_by_pattern)
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
        lines.append(f"# read as measured ({reader}; {', '.join(info['patterns'])}): {info['python']}")
    return {"platform": platform, "variant": variant, "make": steps, "read": readers, "text": "\n".join(lines)}
