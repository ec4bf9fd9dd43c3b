"""Variant kinds: one module each in layoutlab/kinds/, found by the registry (issue 26, item 1).

Adding a kind is one new module (and its tests): the last test here drops a new kind's module into a
copy of the package, touching no other file, and runs it through the plan, the benchmark cases, the
convert step and the report.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from layoutlab import kinds
from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.plan import DatasetFacts

REPO_ROOT = Path(__file__).resolve().parents[2]
KINDS_DIR = REPO_ROOT / "functions" / "layoutlab" / "kinds"
GRID = DatasetFacts(kind="grid", grid_shape=(240, 181, 288), variable="T2M")
GRANULE = DatasetFacts(kind="granule", beams=("gt1l",))


def test_each_kind_module_defines_one_kind_and_the_plan_names_exactly_those():
    modules = sorted(p.stem for p in KINDS_DIR.glob("*.py") if not p.name.startswith("_"))
    assert len(modules) == len(kinds.registry())
    assert plans.plan_schema()["$defs"]["variant"]["properties"]["kind"]["enum"] == list(kinds.names())
    assert kinds.names()[0] == "original"  # the baseline is listed first (plan errors, docs)
    assert all(kind.format in plans.READERS_BY_FORMAT for kind in kinds.registry().values())


def test_an_unknown_kind_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="unknown variant kind 'magic'; known: original, repack-paged"):
        kinds.get("magic")


def test_a_paged_variant_carries_its_page_size_to_every_case_that_reads_it():
    """The aligned reader's blocks are the page size the spec carries (never parsed out of the variant's name)."""
    plan = plans.merge_plan({"variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "4MiB"},
                                          {"kind": "rechunked-paged", "page_size": "auto"}],
                             "readers": {"hdf5": ["h5py-s3fs-aligned"]}, "patterns": ["beam-read"],
                             "platforms": ["local-lambda"]})
    specs = plans.variant_specs(plan, GRANULE)
    cases = plans.expand_cases(plan, GRANULE, "d", [{**s, "uri": f"s3://b/{s['name']}"} for s in specs])
    options = {c["variant"]: c.get("reader_options") for c in cases}
    assert options == {"original": None, "paged-4MiB": {"page_size": 4 * 2**20}, "rechunked-paged-auto": None}

    from layoutlab.bench.readers import make_reader

    aligned = make_reader("h5py-s3fs-aligned", options["paged-4MiB"])
    assert aligned.settings["block_size"] == 4 * 2**20 and aligned.settings["page_buf_size"] == 16 * 2**20
    # "auto" is chosen at conversion, after the cases are written: the reader keeps its default, as before
    assert make_reader("h5py-s3fs-aligned", None).settings["block_size"] == 8 * 2**20


def test_references_over_a_paged_copy_are_built_by_that_copys_task_and_read_through_it():
    plan = plans.merge_plan({"variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"},
                                          {"kind": "virtual-kerchunk", "over": "all"}]})
    specs = plans.variant_specs(plan, GRANULE)
    assert [s["name"] for s in specs] == ["original", "paged-1MiB", "kerchunk-original", "kerchunk-paged-1MiB"]
    by_name = {s["name"]: s for s in specs}
    kerchunk = kinds.get("virtual-kerchunk")
    assert kerchunk.built_by(by_name["kerchunk-paged-1MiB"]) == "paged-1MiB"
    assert kerchunk.built_by(by_name["kerchunk-original"]) is None
    item = {"variant_kind": "virtual-kerchunk", "spec": by_name["kerchunk-paged-1MiB"]}
    assert kerchunk.reads_through(item) == "paged-1MiB"


def test_a_recorded_kind_wins_and_only_a_variant_without_one_is_known_by_the_kind_giving_its_name():
    """The pipeline's VARIANT items carry their kind; results measured by hand (``layoutlab bench --variant
    paged-8MiB``) have no item, and the kinds that give such names (original, the paged copies) claim them."""
    from layoutlab.report import budget
    from layoutlab.report.recipe import make_steps

    assert kinds.kind_of("paged-8MiB", {"variant_kind": "rechunk-zarr"}).name == "rechunk-zarr"
    assert kinds.kind_of("paged-8MiB", None).name == "repack-paged"
    assert kinds.kind_of("rechunked-paged-4MiB", {}).name == "rechunked-paged"
    assert kinds.kind_of("zarr-1x2x3", None) is None and kinds.kind_of("kerchunk-original", None) is None
    assert budget.is_paged("paged-8MiB", None) and not budget.is_paged("paged-8MiB", {"variant_kind": "icechunk"})
    assert budget.referenced_variant("kerchunk-original", None) is None  # (no kind claims the references' names)
    # the page size is never read out of the name: without a record of it, the recipe says so
    assert make_steps("paged-8MiB", None)["note"] == "the page size was not recorded with this variant"


NEW_KIND = '''"""``copy``: the upload copied byte for byte (made by the test of a new kind: this module, nothing else)."""

from __future__ import annotations

import tempfile

from layoutlab.kinds._base import VariantKind
from layoutlab.kinds._transfer import download, publish
from layoutlab.storage import S3Location


class Copy(VariantKind):
    name = "copy"
    listed = 100
    format = "hdf5"
    suffix = ".h5"
    options = {"label": {"type": "string", "minLength": 1, "maxLength": 20}}

    def check(self, entry, where):
        if entry.get("label", "x").startswith("-"):
            raise ValueError(f"{where}.label must not start with '-', got {entry['label']!r}")

    def expand(self, entry, facts):
        return [{**entry, "name": f"copy-{entry.get('label', 'plain')}", "format": self.format}]

    def convert(self, spec, source, s3, context):
        with tempfile.TemporaryDirectory() as scratch:
            path = download(s3, source, scratch)
            publish(s3, path, S3Location.parse(spec["uri"]))
        return {"copied": True}

    def make_steps(self, variant, item, variants, steps_of):
        return {"kind": self.name, "commands": ["cp INPUT.h5 OUTPUT.h5"]}


KIND = Copy()
'''

RUN_NEW_KIND = '''
import json, sys
from pathlib import Path

import h5py
import numpy as np

from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.plan import DatasetFacts, PlanError
from layoutlab.pipeline.planning import variant_uri
from layoutlab.pipeline.variants import convert_variant
from layoutlab.report.budget import budget_rows
from layoutlab.report.recipe import make_steps
from variant_helpers import pipeline_cloud, uploaded_variant_task

out = {}
for bad in ({"kind": "copy", "label": "-x"}, {"kind": "copy", "colour": "red"}):
    try:
        plans.merge_plan({"variants": [bad]})
    except PlanError as error:
        out.setdefault("refused", []).append(str(error))
plan = plans.merge_plan({"variants": [{"kind": "original"}, {"kind": "copy", "label": "a"}],
                         "readers": {"hdf5": ["h5py-s3fs-default"]}, "patterns": ["beam-read"],
                         "platforms": ["local-lambda"], "repetitions": 1})
facts = DatasetFacts(kind="granule", beams=("gt1l",))
specs = plans.variant_specs(plan, facts)
specs = [{**s, "uri": variant_uri("outputs", "ds", s, "s3://ingest/incoming/g.h5")} for s in specs]
out["specs"] = [(s["name"], s["format"], s["uri"]) for s in specs]
out["cases"] = [c["case_id"] for c in plans.expand_cases(plan, facts, "ds", specs)]
source = Path(sys.argv[1]) / "g.h5"
with h5py.File(source, "w") as f:
    f.create_dataset("gt1l/heights/h_ph", data=np.arange(1000.0))
with pipeline_cloud() as (s3, store):
    convert_variant(uploaded_variant_task(s3, source, specs[1]), s3=s3, store=store)
    item = store.get_variant("ds", "copy-a")
    copied = s3.get_object(Bucket="outputs", Key="variants/ds/copy-a.h5")["Body"].read()
    out["item"] = {k: item[k] for k in ("status", "variant_kind", "format", "size_bytes", "copied")}
    out["same_bytes"] = copied == source.read_bytes()
    out["budget"] = [(r["variant"], r["kind"], r["overhead"]) for r in budget_rows({"copy-a": item})]
    out["steps"] = make_steps("copy-a", item)["commands"]
print(json.dumps(out, default=str))
'''


def test_a_new_kind_is_one_new_module(tmp_path):
    """A copy of the package plus one module, ``kinds/copy.py``: its plan entry is validated with its own
    fields, it expands to specs, its format picks the readers of its cases, the convert step makes and
    records it, and the report's storage row and recipe are its. No other file is edited."""
    package = tmp_path / "functions" / "layoutlab"
    shutil.copytree(REPO_ROOT / "functions" / "layoutlab", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "kinds" / "copy.py").write_text(NEW_KIND)
    changed = subprocess.run(["diff", "-rq", "-x", "__pycache__", str(REPO_ROOT / "functions" / "layoutlab"),
                              str(package)], capture_output=True, text=True).stdout.splitlines()
    assert changed == [f"Only in {package / 'kinds'}: copy.py"]
    env = {"PYTHONPATH": f"{tmp_path / 'functions'}:{REPO_ROOT / 'tests'}", "PATH": "/usr/bin:/bin",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", RUN_NEW_KIND, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert "variants[0].label must not start with '-', got '-x'" in out["refused"][0]
    assert "variants[0].colour: unknown field; known: kind, applies_to, page_size" in out["refused"][1]
    assert "label" in out["refused"][1]  # the new kind's field is known to the schema
    assert out["specs"] == [["original", "hdf5", "s3://ingest/incoming/g.h5"],
                            ["copy-a", "hdf5", "s3://outputs/variants/ds/copy-a.h5"]]
    assert out["cases"] == ["original#beam-read#h5py-s3fs-default#local-lambda#000",
                            "copy-a#beam-read#h5py-s3fs-default#local-lambda#000"]
    assert out["item"]["status"] == "READY" and out["item"]["variant_kind"] == "copy" and out["item"]["copied"]
    assert out["same_bytes"] is True
    assert out["budget"] == [["copy-a", "copy", 0.0]]
    assert out["steps"] == ["cp INPUT.h5 OUTPUT.h5"]
