"""``rechunk-zarr``: the grid copied to Zarr v3, rechunked (and sharded, optionally) for the access patterns.

A big input fans out: the plan step stages the empty target and its work units (whole shards), the
units run in parallel, and a publish task writes the metadata last (convert/rechunk_zarr.py).
"""

from __future__ import annotations

import tempfile

from layoutlab.kinds._grid import GridKind, extents_tuple

DEFAULT_COMPRESSOR = "blosc-zstd:3"  # convert/rechunk_zarr.py's default codec chain


def rechunk_options(spec: dict, max_mem: int | None = None) -> dict:
    """Options of ``plan_rechunk``/``rechunk``; the bound is the smaller of the variant's
    ``max_mem`` and what the task's platform leaves (``max_mem``), when either is given."""
    from layoutlab.units import parse_size

    if spec.get("record_chunk"):  # a table's rows or a swath's scan lines: every array's first axis
        options = {"chunks": None, "record_chunk": int(spec["record_chunk"]), "overwrite": True}
    else:
        options = {"chunks": spec["chunks"], "shards": spec.get("shards"), "overwrite": True}
    if spec.get("compressor"):
        options["compressor"] = spec["compressor"]
    bounds = [b for b in (parse_size(spec["max_mem"]) if spec.get("max_mem") else None, max_mem) if b]
    if bounds:
        options["max_mem"] = min(bounds)
    return options


def _codec_text(spec: str) -> str:
    if spec == "none":
        return "None"
    name, _, level = spec.partition(":")
    if name.startswith("blosc-"):
        return f'BloscCodec(cname="{name[len("blosc-"):]}", clevel={level or 5}, shuffle="shuffle")'
    return f"ZstdCodec(level={level or 3})"


class RechunkZarr(GridKind):
    name = "rechunk-zarr"
    listed = 4
    base = "zarr"
    format = "zarr"
    suffix = ".zarr"
    fans_out = True
    record_layouts = True
    options = {**GridKind.options, "compressor": {"type": "string", "maxLength": 64}}

    def convert(self, spec, source, s3, context):
        from layoutlab.convert.rechunk_zarr import rechunk
        from layoutlab.kinds._transfer import download, memory_bound

        with tempfile.TemporaryDirectory(prefix="layoutlab-convert-") as scratch:
            local = download(s3, source, scratch)
            summary = rechunk(str(local), spec["uri"], progress=False, ceilings=context.ceilings,
                              **rechunk_options(spec, memory_bound(context.memory_mb)))
        return {"rechunk": {k: v for k, v in summary.items() if k != "destination"}}

    def prepare_work_units(self, spec: dict, source_url: str, ceilings) -> int:
        """Stage the target and return its number of work units (of all stages: they run in any order)."""
        from layoutlab.convert.rechunk_zarr import plan_rechunk

        return len(plan_rechunk(source_url, spec["uri"], prepare=True, ceilings=ceilings,
                                **rechunk_options(spec))["units"])

    def run_work_unit(self, spec: dict, k: int) -> dict:
        from layoutlab.convert.rechunk_zarr import load_plan, run_unit

        return run_unit(load_plan(spec["uri"]), k)

    def publish_work_units(self, spec: dict) -> None:
        from layoutlab.convert.rechunk_zarr import finalize, load_plan

        finalize(load_plan(spec["uri"]))

    def make_steps(self, variant, item, variants, steps_of):
        spec = item.get("spec") or {}
        if spec.get("record_chunk"):
            n = int(spec["record_chunk"])
            return {"kind": self.name,
                    "commands": [f"layoutlab rechunk INPUT.h5 OUTPUT.zarr --record-chunk {n}"],
                    "python": f"zarr.create_array(store, name=VARIABLE, shape=..., dtype=..., chunks=(min({n}, "
                              "shape[0]), *shape[1:]), compressors=..., zarr_format=3)  # every array, by its first axis"}
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
        python = (f"zarr.create_array(store, name=VARIABLE, shape=..., dtype=..., chunks={extents_tuple(chunks)}, "
                  f"shards={extents_tuple(shards) if isinstance(shards, dict) else 'None'}, "
                  f"compressors={_codec_text(compressor)}, dimension_names={list(chunks)!r}, zarr_format=3)")
        return {"kind": self.name, "commands": [command], "python": python}


KIND = RechunkZarr()
