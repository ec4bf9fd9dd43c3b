"""``icechunk``: the grid copied to a native Icechunk repository, rechunked like ``rechunk-zarr`` (sharded
optionally), committed once so readers see all of it or nothing (convert/icechunk_store.py)."""

from __future__ import annotations

import tempfile

from layoutlab.kinds._grid import GridKind, extents_tuple
from layoutlab.kinds._recipe import pins

DEFAULT_MEMORY = 256 * 2**20  # the bound where the platform's memory is not known


class Icechunk(GridKind):
    name = "icechunk"
    listed = 7
    base = "icechunk"
    format = "icechunk"
    suffix = ".icechunk"

    def convert(self, spec, source, s3, context):
        from layoutlab.convert.icechunk_store import write_icechunk_native
        from layoutlab.kinds._transfer import download, memory_bound

        with tempfile.TemporaryDirectory(prefix="layoutlab-convert-") as scratch:
            local = download(s3, source, scratch)
            written = write_icechunk_native(str(local), spec["uri"], spec["chunks"], spec.get("shards"),
                                            memory_bound(context.memory_mb) or DEFAULT_MEMORY,
                                            ceilings=context.ceilings)
        return {"icechunk": written}

    def make_steps(self, variant, item, variants, steps_of):
        """A native Icechunk repository: the grid rechunked (and sharded) as convert/icechunk_store.py writes it."""
        spec = item.get("spec") or {}
        chunks = spec.get("chunks") or {}
        shards = spec.get("shards")
        pinned = pins(item, ("icechunk", "zarr"))
        python = ("import icechunk, zarr\n"
                  'repo = icechunk.Repository.create(icechunk.s3_storage(bucket="OUT_BUCKET", '
                  f'prefix="{spec.get("name") or "VARIANT"}.icechunk", region=REGION, from_env=True))\n'
                  'session = repo.writable_session("main")\n'
                  'root = zarr.open_group(session.store, mode="w", zarr_format=3)\n'
                  f"array = root.create_array(VARIABLE, shape=..., dtype=..., chunks={extents_tuple(chunks)}, "
                  f"shards={extents_tuple(shards) if isinstance(shards, dict) else 'None'}, compressors=\"auto\", "
                  f"dimension_names={list(chunks)!r})  # every (time, lat, lon) variable; the rest one chunk each\n"
                  "array[...] = VALUES  # in whole shards along time, as memory allows\n"
                  'session.commit("rechunked copy")  # one commit: readers see all of it or nothing')
        return {"kind": self.name, "commands": [pinned] if pinned else [], "python": python,
                "note": "native Icechunk: chunk data copied, compressors zarr's default (zstd)"}


KIND = Icechunk()
