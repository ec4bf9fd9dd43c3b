"""Readers: a library plus the settings that decide its I/O.

Each reader opens an ``s3://`` target and returns a ``Handle`` that patterns use
the same way whatever the library: ``array(path)`` (sliceable like numpy),
``listing()`` (every group/array with its attributes read), ``attrs()``.
``Reader.settings`` holds everything that changes I/O (cache type, block size,
page buffer, chunk cache, concurrency); after opening, ``Handle.settings`` adds
what the library actually used (e.g. HDF5's chunk cache when left at default).

Every reader counts its own S3 requests and response bytes at the client
(``Reader.requests``, a ``layoutlab.bench.accounting.RequestCounter``) through
the S3 client it creates, without changing what it requests: s3fs (h5py,
xarray, zarr-fsspec) through botocore events on an aiobotocore session of its
own, obstore through a counting zarr ObjectStore. HDF5's ros3 driver has no
hook (``counts_requests = False``).

Readers (``READERS``):
  h5py-s3fs-default  h5py on an s3fs file with every library default (what most users run)
  h5py-s3fs-aligned  s3fs block cache with blocks = HDF5 page size, HDF5 page buffer,
                     explicit 1 MiB chunk cache
  h5py-ros3          HDF5's own S3 driver (only when h5py was built with it; see README)
  xarray-h5netcdf    xarray.open_dataset(engine="h5netcdf") on an s3fs file (defaults)
  zarr-obstore       zarr 3 with obstore's S3Store (one GET per chunk, async)
  zarr-fsspec        zarr 3 with FsspecStore on s3fs (async)
"""

from __future__ import annotations

import abc

import re
from dataclasses import dataclass, field

import numpy as np

from layoutlab import storage
from layoutlab.bench import accounting
from layoutlab.errors import UserError

MiB = 2**20
DEFAULT_PAGE_SIZE = 8 * MiB
ALIGNED_CHUNK_CACHE = 1 * MiB
S3FS_DEFAULT_BLOCK_SIZE = 50 * MiB  # s3fs.S3FileSystem.default_block_size
S3FS_DEFAULT_CACHE = "readahead"  # s3fs.S3FileSystem.default_cache_type


def page_size_from_variant(variant: str | None) -> int | None:
    """``paged-8MiB`` / ``rechunked-paged-4MiB`` -> bytes; None when the name says nothing."""
    m = re.search(r"paged-(\d+)(KiB|MiB)", variant or "")
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) == "KiB" else MiB)


@dataclass
class Handle(abc.ABC):
    kind: str  # "hdf5" | "zarr"
    root: object
    settings: dict = field(default_factory=dict)
    closers: list = field(default_factory=list)

    @abc.abstractmethod
    def array(self, path: str):
        """The array at ``path`` (h5py Dataset, zarr Array or xarray variable)."""

    def has(self, path: str) -> bool:
        try:
            self.array(path)
            return True
        except (KeyError, FileNotFoundError, ValueError):
            return False

    @abc.abstractmethod
    def attrs(self) -> dict:
        """The root attributes."""

    @abc.abstractmethod
    def listing(self) -> dict:
        """Visit every group and array, reading all attributes: {"objects", "arrays", "attributes"}."""

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()


class H5pyHandle(Handle):
    def array(self, path):
        obj = self.root[path.lstrip("/")]
        if not hasattr(obj, "shape"):
            raise KeyError(f"{path} is a group, not a dataset")
        return obj

    def attrs(self):
        return {k: v for k, v in self.root.attrs.items()}

    def listing(self):
        counts = {"objects": 0, "arrays": 0, "attributes": 0}

        def visit(name, obj):
            counts["objects"] += 1
            counts["arrays"] += int(hasattr(obj, "shape"))
            for _key, _value in obj.attrs.items():  # reads every attribute value
                counts["attributes"] += 1

        counts["attributes"] += len(dict(self.root.attrs.items()))
        self.root.visititems(visit)
        return counts


class ZarrHandle(Handle):
    def array(self, path):
        obj = self.root[path.strip("/")]
        if not hasattr(obj, "shape"):
            raise KeyError(f"{path} is a group, not an array")
        return obj

    def attrs(self):
        return dict(self.root.attrs)

    def listing(self):
        counts = {"objects": 0, "arrays": 0, "attributes": len(dict(self.root.attrs))}
        for _name, obj in self.root.members(max_depth=None):
            counts["objects"] += 1
            counts["arrays"] += int(hasattr(obj, "shape"))
            counts["attributes"] += len(dict(obj.attrs))
        return counts


class _XarrayArray:
    """Positional indexing on an xarray variable, returning numpy (xarray does the reading)."""

    def __init__(self, data_array):
        self._da = data_array
        self.shape = data_array.shape
        self.dtype = data_array.dtype
        self.chunks = data_array.encoding.get("chunksizes")

    def __getitem__(self, key):
        return np.asarray(self._da[key].values)


class XarrayHandle(Handle):
    """xarray datasets opened per HDF5 group on first use (xarray opens one group at a time)."""

    def __init__(self, kind, root, settings, closers, opener):
        super().__init__(kind, root, settings, closers)
        self._opener = opener
        self._groups: dict[str, object] = {}

    def _group(self, group: str):
        if group not in self._groups:
            ds = self._opener(group or None)
            self.closers.append(ds.close)
            self._groups[group] = ds
        return self._groups[group]

    def array(self, path):
        group, _, name = path.strip("/").rpartition("/")
        ds = self._group(group)
        if name not in ds.variables:
            raise KeyError(f"no variable {path!r}")
        return _XarrayArray(ds[name])

    def attrs(self):
        return dict(self._group("").attrs)

    def listing(self):
        import xarray as xr

        tree = xr.open_datatree(self.root, engine="h5netcdf", phony_dims="access", decode_times=False)
        self.closers.append(tree.close)
        counts = {"objects": 0, "arrays": 0, "attributes": 0}
        for node in tree.subtree:
            counts["objects"] += 1
            counts["attributes"] += len(node.attrs)
            for var in node.variables.values():
                counts["objects"] += 1
                counts["arrays"] += 1
                counts["attributes"] += len(var.attrs)
        return counts


def _h5py_version_settings() -> dict:
    import h5py

    return {"h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version}


def _chunk_cache(h5file) -> dict:
    """The chunk cache HDF5 actually uses for this file (rdcc_*), default or not."""
    _mdc, nslots, nbytes, w0 = h5file.id.get_access_plist().get_cache()
    return {"rdcc_nbytes": int(nbytes), "rdcc_nslots": int(nslots), "rdcc_w0": float(w0)}


class Reader(abc.ABC):
    name = ""
    kind = ""  # what it reads: "hdf5" or "zarr"
    description = ""
    counts_requests = True  # False: the library sends requests this process cannot see (ros3)

    def __init__(self, options: dict | None = None, variant: str | None = None):
        self.options = dict(options or {})
        self.variant = variant
        self.requests = accounting.RequestCounter()  # every request of every open() of this reader

    modules: tuple = ()  # imported by prepare(), outside the timed region

    @property
    def settings(self) -> dict:
        return {}

    def prepare(self) -> None:
        """Import the libraries, so that ``open`` times opening and not importing."""
        import importlib

        for module in self.modules:
            importlib.import_module(module)

    @abc.abstractmethod
    def open(self, url: str) -> Handle:
        """Open ``url`` with this reader's settings."""


class H5pyS3fsDefault(Reader):
    name = "h5py-s3fs-default"
    kind = "hdf5"
    modules = ("h5py", "s3fs")
    description = "h5py on an s3fs file object, library defaults"

    @property
    def settings(self):
        return {"library": "h5py+s3fs", "cache_type": S3FS_DEFAULT_CACHE, "block_size": S3FS_DEFAULT_BLOCK_SIZE,
                "page_buf_size": 0, "rdcc_nbytes": "library default", "concurrency": 1}

    def _open_kwargs(self) -> tuple[dict, dict]:
        return {}, {}

    def open(self, url):
        import h5py

        fs = storage.s3fs_filesystem(for_url=url, skip_instance_cache=True,
                                     session=accounting.aiobotocore_session(self.requests))
        fs_kwargs, h5_kwargs = self._open_kwargs()
        fileobj = fs.open(url, "rb", **fs_kwargs)
        try:
            f = h5py.File(fileobj, "r", **h5_kwargs)
        except OSError as error:
            fileobj.close()
            raise UserError(f"{url}: not readable as HDF5 ({error})") from error
        settings = {**self.settings, **_chunk_cache(f), **_h5py_version_settings(),
                    "cache_type": type(fileobj.cache).__name__, "block_size": fileobj.blocksize}
        return H5pyHandle("hdf5", f, settings, [fileobj.close, f.close])


class H5pyS3fsAligned(H5pyS3fsDefault):
    name = "h5py-s3fs-aligned"
    description = "h5py on s3fs with a block cache aligned to the HDF5 page size, page buffer, 1 MiB chunk cache"

    @property
    def page_size(self) -> int:
        return int(self.options.get("page_size") or page_size_from_variant(self.variant) or DEFAULT_PAGE_SIZE)

    @property
    def settings(self):
        page = self.page_size
        return {"library": "h5py+s3fs", "cache_type": "blockcache", "block_size": page,
                "maxblocks": int(self.options.get("maxblocks", 32)),
                "page_buf_size": int(self.options.get("page_buf_pages", 4)) * page,
                "rdcc_nbytes": int(self.options.get("rdcc_nbytes", ALIGNED_CHUNK_CACHE)), "concurrency": 1}

    def _open_kwargs(self):
        s = self.settings
        fs_kwargs = {"block_size": s["block_size"], "cache_type": "blockcache",
                     "cache_options": {"maxblocks": s["maxblocks"]}}
        # HDF5 2.0 ignores page_buf_size on files without paged aggregation (DESIGN.md section 5)
        h5_kwargs = {"page_buf_size": s["page_buf_size"], "rdcc_nbytes": s["rdcc_nbytes"]}
        return fs_kwargs, h5_kwargs


class H5pyRos3(Reader):
    name = "h5py-ros3"
    kind = "hdf5"
    modules = ("h5py",)
    description = "h5py with HDF5's read-only S3 driver (needs an h5py built with ros3)"
    counts_requests = False  # libhdf5 sends its requests through libcurl: no hook to count them

    @property
    def settings(self):
        return {"library": "h5py+ros3", "page_buf_size": int(self.options.get("page_buf_size", 0)),
                "rdcc_nbytes": int(self.options.get("rdcc_nbytes", ALIGNED_CHUNK_CACHE)), "concurrency": 1}

    def open(self, url):
        import os

        import h5py

        if "ros3" not in h5py.registered_drivers():
            raise UserError(f"reader {self.name}: this h5py ({h5py.__version__}, HDF5 {h5py.version.hdf5_version}) "
                            "has no ros3 driver; build one against Debian's libhdf5 (see README, section bench)")
        loc = storage.S3Location.parse(url)
        if loc.version_id:
            raise UserError(f"reader {self.name}: HDF5's ros3 driver cannot read one object version ({url}); "
                            "use an h5py-s3fs reader")
        endpoint = storage.s3_endpoint_url() or f"https://s3.{storage.aws_region()}.amazonaws.com"
        http_url = f"{endpoint.rstrip('/')}/{loc.bucket}/{loc.key}"
        kwargs = {"aws_region": storage.aws_region().encode(),
                  "secret_id": os.environ.get("AWS_ACCESS_KEY_ID", "").encode(),
                  "secret_key": os.environ.get("AWS_SECRET_ACCESS_KEY", "").encode()}
        s = self.settings
        extra = {"rdcc_nbytes": s["rdcc_nbytes"]}
        if s["page_buf_size"]:
            extra["page_buf_size"] = s["page_buf_size"]
        f = h5py.File(http_url, "r", driver="ros3", **kwargs, **extra)
        return H5pyHandle("hdf5", f, {**s, **_chunk_cache(f), **_h5py_version_settings()}, [f.close])


class XarrayH5netcdf(Reader):
    name = "xarray-h5netcdf"
    kind = "hdf5"
    modules = ("h5py", "s3fs", "h5netcdf", "xarray")
    description = "xarray.open_dataset(engine='h5netcdf') on an s3fs file, defaults"

    @property
    def settings(self):
        return {"library": "xarray+h5netcdf+s3fs", "cache_type": S3FS_DEFAULT_CACHE,
                "block_size": S3FS_DEFAULT_BLOCK_SIZE, "page_buf_size": 0, "rdcc_nbytes": "library default",
                "chunks": None, "concurrency": 1}

    def open(self, url):
        import h5py
        import xarray as xr

        fs = storage.s3fs_filesystem(for_url=url, skip_instance_cache=True,
                                     session=accounting.aiobotocore_session(self.requests))
        fileobj = fs.open(url, "rb")
        try:
            h5py.File(fileobj, "r").close()  # fail early and clearly on non-HDF5 input
        except OSError as error:
            fileobj.close()
            raise UserError(f"{url}: not readable as HDF5/NetCDF-4 ({error})") from error

        def opener(group):
            return xr.open_dataset(fileobj, engine="h5netcdf", group=group, phony_dims="access",
                                   decode_times=False, chunks=None)

        import xarray

        settings = {**self.settings, "xarray": xarray.__version__, **_h5py_version_settings()}
        return XarrayHandle("hdf5", fileobj, settings, [fileobj.close], opener)


class ZarrObstore(Reader):
    name = "zarr-obstore"
    kind = "zarr"
    modules = ("zarr", "zarr.storage", "obstore", "obstore.store")
    description = "zarr 3 + obstore S3Store"

    @property
    def settings(self):
        import zarr

        return {"library": "zarr+obstore", "concurrency": int(zarr.config.get("async.concurrency")),
                "zarr_format": 3}

    def _store(self, loc):
        """(store, closers)"""
        store = storage.obstore_s3_store(loc.bucket, loc.key.rstrip("/") or None)
        return accounting.counting_object_store(store, self.requests, read_only=True), []

    def open(self, url):
        import zarr

        loc = storage.S3Location.parse(url)
        store, closers = self._store(loc)
        try:
            group = zarr.open_group(store, mode="r", zarr_format=3)
        except (FileNotFoundError, KeyError, ValueError) as error:
            for close in closers:
                close()
            raise UserError(f"{url}: not a Zarr v3 group ({type(error).__name__}: {error})") from error
        return ZarrHandle("zarr", group, {**self.settings, "zarr": zarr.__version__}, closers)


class ZarrFsspec(ZarrObstore):
    name = "zarr-fsspec"
    modules = ("zarr", "zarr.storage", "s3fs")
    description = "zarr 3 + FsspecStore on s3fs (async)"

    @property
    def settings(self):
        return {**super().settings, "library": "zarr+fsspec(s3fs)"}

    def _store(self, loc):
        from zarr.storage import FsspecStore

        fs = storage.s3fs_filesystem(asynchronous=True, skip_instance_cache=True,
                                     session=accounting.aiobotocore_session(self.requests))

        def close_session():
            # an asynchronous s3fs never closes its aiohttp session itself; close it on zarr's loop
            creator = getattr(fs, "_s3creator", None)
            if creator is not None:
                from zarr.core.sync import sync

                sync(creator.__aexit__(None, None, None))

        return FsspecStore(fs, read_only=True, path=f"{loc.bucket}/{loc.key.rstrip('/')}"), [close_session]


READERS = {r.name: r for r in (H5pyS3fsDefault, H5pyS3fsAligned, H5pyRos3, XarrayH5netcdf, ZarrObstore, ZarrFsspec)}


def make_reader(name: str, options: dict | None = None, variant: str | None = None) -> Reader:
    try:
        return READERS[name](options, variant)
    except KeyError:
        raise UserError(f"unknown reader {name!r}; choose from {', '.join(READERS)}") from None


def ros3_available() -> bool:
    import h5py

    return "ros3" in h5py.registered_drivers()
