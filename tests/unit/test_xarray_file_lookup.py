"""How the bench finds the fsspec file xarray opened (its cache goes in the record's reader settings): by
following the dataset's references, never by scanning every object of the process, which cost 0.1-0.4 s
of each xarray case's process in the default-plan studies."""

from __future__ import annotations

import functools
import gc

import fsspec
from fsspec.spec import AbstractBufferedFile

from layoutlab.bench.readers import open_fsspec_files


class _Manager:  # xarray's CachingFileManager keeps the file among its arguments
    def __init__(self, file):
        self._args = (file,)


class _Store:
    def __init__(self, file):
        self._manager = _Manager(file)

    def close(self):
        pass


class _Dataset:  # dataset -> closer (a bound method in a partial) -> store -> manager -> file
    def __init__(self, file):
        self._close = functools.partial(_Store(file).close)
        self.attrs = {"title": "x" * 10}


def _file():
    return AbstractBufferedFile(fsspec.filesystem("memory"), "/x.h5", mode="rb", size=10, cache_type="readahead")


def test_the_file_is_found_through_the_datasets_references_without_a_scan(monkeypatch):
    file = _file()
    ds = _Dataset(file)

    def no_scan(*args, **kwargs):
        raise AssertionError("scanned every object of the process")

    monkeypatch.setattr(gc, "get_objects", no_scan)
    assert open_fsspec_files(ds) == [file]


def test_a_file_out_of_reach_is_still_found_by_the_scan():
    file = _file()
    found = open_fsspec_files(object())
    assert any(f is file for f in found)
    file.close()
    assert not any(f is file for f in open_fsspec_files(object()))
