"""``icechunk-virtual``: an Icechunk repository of virtual chunks over the original, each pinned to the
original's ETag (a re-upload makes reads fail, never read other bytes); no chunk data copied."""

from __future__ import annotations

from layoutlab.kinds._recipe import pins
from layoutlab.kinds._references import ReferencesKind


class IcechunkVirtual(ReferencesKind):
    name = "icechunk-virtual"
    listed = 6
    format = "icechunk"
    suffix = ".icechunk"
    one_object = False

    def write(self, layout, spec, s3, etag):
        from layoutlab.convert import virtual

        return virtual.write_icechunk_virtual(layout, spec["uri"], etag)

    def recipe(self, variant, spec, item, local, source, plain):
        record = item.get("virtual") or {}
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
        return pins(item, ("virtualizarr", "obspec-utils", "icechunk")), python, note


KIND = IcechunkVirtual()
