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
  h5py-ros3          HDF5's own S3 driver (only when h5py was built with it; see docs/bench-and-readers.md)
  xarray-h5netcdf    xarray.open_dataset(engine="h5netcdf") on an s3fs file (defaults)
  zarr-obstore       zarr 3 with obstore's S3Store (one GET per chunk, async); zarr's shard
                     coalescing at its defaults (1 MiB gap, 16 MiB cap)
  zarr-obstore-nocoalesce  the same with shard coalescing off (every inner chunk its own GET)
  zarr-fsspec        zarr 3 with FsspecStore on s3fs (async)
  xarray-zarr        xarray.open_zarr(url, group=...) (xarray's zarr engine; zarr opens the URL with s3fs)
  kerchunk-fsspec    kerchunk references (JSON) through fsspec's ReferenceFileSystem on s3fs,
                     opened by zarr 3 (counted at s3fs: the references and every chunk)
  icechunk           an Icechunk repository through zarr 3 (Rust I/O: no client hook,
                     ``counts_requests = False``; the local proxy counts it)
  xarray-icechunk    xarray.open_zarr(session.store, group=...) on an Icechunk repository (icechunk's
                     xarray path; proxy-counted as icechunk)
  h5coro             SlideRule's h5coro with its S3 driver (boto3, counted by botocore events)
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field

import numpy as np

from layoutlab import bounded_decoding, storage
from layoutlab.bench import accounting
from layoutlab.errors import UserError
from layoutlab.hdf5_input import deny_external_links

MiB = 2**20
DEFAULT_PAGE_SIZE = 8 * MiB
ALIGNED_CHUNK_CACHE = 1 * MiB
S3FS_DEFAULT_BLOCK_SIZE = 50 * MiB  # s3fs.S3FileSystem.default_block_size
S3FS_DEFAULT_CACHE = "readahead"  # s3fs.S3FileSystem.default_cache_type


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

    def settings_after_timing(self) -> dict:
        """``settings`` with what is found out only by looking (read after the timed region: looking costs)."""
        return self.settings

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()


class _BoundedDataset:
    """An h5py Dataset whose reads refuse a deflate chunk that inflates past its declared size
    (layoutlab.bounded_decoding) instead of holding it: the benchmark reads uploads and their copies."""

    def __init__(self, dataset):
        self._dataset = dataset

    def __getitem__(self, index):
        from layoutlab.bounded_decoding import within

        with within(self._dataset):
            return self._dataset[index]

    def __getattr__(self, name):
        return getattr(self._dataset, name)

    def __len__(self):
        return len(self._dataset)


class H5pyHandle(Handle):
    def array(self, path):
        from layoutlab.hdf5_input import data_outside_file

        obj = self.root[path.lstrip("/")]
        if not hasattr(obj, "shape"):
            raise KeyError(f"{path} is a group, not a dataset")
        # a pattern reads what the plan names (pattern_params.variable): never values from outside the file
        outside = data_outside_file(obj)
        if outside:
            raise UserError(f"{path}: {outside}")
        return _BoundedDataset(obj)

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
        from layoutlab.bounded_decoding import bounded_by

        with bounded_by(self._declared_chunk_bytes()):  # (h5netcdf reads in this thread through h5py)
            return np.asarray(self._da[key].values)

    def _declared_chunk_bytes(self) -> int | None:
        """What one stored chunk decodes to, from the encoding xarray read (the stored type, not the
        unpacked one); None when unknown (HDF5's own limit then bounds a chunk)."""
        encoding = self._da.encoding
        if not self.chunks:
            return None
        stored = np.dtype(encoding.get("dtype", self.dtype))
        return int(np.prod(self.chunks, dtype="i8")) * stored.itemsize + (4 if encoding.get("fletcher32") else 0)

    def stored_whole(self):
        """The whole array in its stored units (CF scale_factor / add_offset undone, rounded back to the stored
        integer type): a plan's row range is given in stored units, as h5py reads them (GLM's int16 event_lat)."""
        values = np.asarray(self._da.values)
        stored = self.as_stored(values)
        return values if stored is None else stored

    def as_stored(self, values):
        """``values`` read from this variable, packed back into its stored integers (scale_factor / add_offset
        undone, rounded, wrapped to the stored type as h5py's view does: GLM's _Unsigned int16 latitudes are
        negative numbers to h5py) as float64 with xarray's NaN fill kept; None for a variable not packed.

        The same stored integers decode to float32 from an HDF5 original (float32 attributes) and to float64
        from a Zarr or Icechunk copy (JSON attributes): packed back, both give the integers the copy holds."""
        encoding = self._da.encoding
        scale, offset = encoding.get("scale_factor"), encoding.get("add_offset")
        if scale is None and offset is None:
            return None
        values = (np.asarray(values, dtype="f8") - (offset or 0)) / (scale if scale is not None else 1)
        stored = np.dtype(encoding.get("dtype", values.dtype))
        if stored.kind not in "iu":
            return values
        out = np.full(values.shape, np.nan)
        valid = np.isfinite(values)
        out[valid] = np.round(values[valid]).astype("i8").astype(stored)
        return out


class XarrayHandle(Handle):
    """What one ``xr.open_dataset(url, group=...)`` (or ``xr.open_datatree(url)``) opened, as a scientist opens it.

    ``root`` is the URL. The reader opens the group the pattern reads (``Pattern.group``) or, for a
    listing, the whole tree, once. A pattern asking for an array of another group opens that group
    then (one more open, as a user would write one more ``open_dataset``); none of layoutlab's
    patterns does."""

    def __init__(self, kind, root, settings, closers, opener, tree=None):
        super().__init__(kind, root, settings, closers)
        self._opener = opener
        self._groups: dict[str, object] = {}
        self._tree = tree
        self.look_later = None  # () -> dict of settings found by looking (the file cache xarray chose)

    def settings_after_timing(self) -> dict:
        return {**self.settings, **(self.look_later() if self.look_later is not None else {})}

    def _group(self, group: str):
        if self._tree is not None:
            return self._tree[group] if group else self._tree
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
        if self._tree is None:
            raise UserError("an xarray reader lists only what it opened with open_datatree (a pattern whose group is None)")
        counts = {"objects": 0, "arrays": 0, "attributes": 0}
        for node in self._tree.subtree:
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

    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})
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

    def open_for(self, url: str, group: str | None) -> Handle:
        """Open ``url`` for a pattern that reads in HDF5 group ``group`` ('' the root; None: the whole tree).

        Readers that open the whole file (h5py, h5coro, zarr) open it as ``open`` does; one that opens a
        group at a time (xarray) opens just that one, once, as its users call it."""
        return self.open(url)


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
        from layoutlab.hdf5_input import open_input

        fs = storage.s3fs_filesystem(for_url=url, skip_instance_cache=True,
                                     session=accounting.aiobotocore_session(self.requests))
        fs_kwargs, h5_kwargs = self._open_kwargs()
        fileobj = fs.open(url, "rb", **fs_kwargs)
        try:
            f = open_input(fileobj, url, **h5_kwargs)
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
        # the pipeline's cases carry a paged variant's page size (its kind's reader_options); the CLI takes
        # --reader-option page_size=
        return int(self.options.get("page_size") or DEFAULT_PAGE_SIZE)

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

        bounded_decoding.install()  # (a deflate chunk is never inflated past its declared size)
        if "ros3" not in h5py.registered_drivers():
            raise UserError(f"reader {self.name}: this h5py ({h5py.__version__}, HDF5 {h5py.version.hdf5_version}) "
                            "has no ros3 driver; build one against Debian's libhdf5 (see docs/bench-and-readers.md, 'h5py with ros3')")
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
        deny_external_links()  # (an upload's external links are never followed, as in every open of an input)
        bounded_decoding.install()  # (nor is a deflate chunk inflated past its declared size)
        f = h5py.File(http_url, "r", driver="ros3", **kwargs, **extra)
        return H5pyHandle("hdf5", f, {**s, **_chunk_cache(f), **_h5py_version_settings()}, [f.close])


class XarrayH5netcdf(Reader):
    name = "xarray-h5netcdf"
    kind = "hdf5"
    modules = ("h5py", "s3fs", "h5netcdf", "xarray")
    description = ("xarray.open_dataset(url, engine='h5netcdf'): xarray opens the s3:// URL itself (its defaults; "
                   "options cache_type, block_size, maxblocks, page_buf_size, rdcc_nbytes tune it)")
    # options handed to fsspec's open (open_kwargs) and to h5py.File (driver_kwds); none given: xarray's defaults
    FILE_OPTIONS = ("cache_type", "block_size", "maxblocks")
    HDF5_OPTIONS = ("page_buf_size", "rdcc_nbytes")

    @property
    def settings(self):
        tuned = {k: self.options[k] for k in self.FILE_OPTIONS + self.HDF5_OPTIONS if k in self.options}
        return {"library": "xarray+h5netcdf+s3fs", "opened_by": "xarray (URL + storage_options)",
                "page_buf_size": 0, "rdcc_nbytes": "library default", "chunks": None, "concurrency": 1,
                "tuned": bool(tuned), **tuned}

    def _open_options(self) -> tuple[dict | None, dict | None]:
        """(open_kwargs for fsspec, driver_kwds for h5py.File); None leaves xarray's default."""
        o = self.options
        open_kwargs = {k: (int(o[k]) if k == "block_size" else o[k]) for k in ("cache_type", "block_size") if k in o}
        if "maxblocks" in o:
            open_kwargs["cache_options"] = {"maxblocks": int(o["maxblocks"])}
        driver_kwds = {k: int(o[k]) for k in self.HDF5_OPTIONS if k in o}
        return open_kwargs or None, driver_kwds or None

    def open(self, url, group: str | None = ""):
        """``xr.open_dataset(url, engine="h5netcdf", group=group)`` once; ``group=None``: ``xr.open_datatree(url)``."""
        import xarray as xr

        probe = storage.s3fs_filesystem(for_url=url, skip_instance_cache=True,
                                        session=accounting.aiobotocore_session(self.requests))
        # the options xarray hands to fsspec: the same endpoint and counting session as every reader
        options = {"skip_instance_cache": True, "session": probe.session,
                   "client_kwargs": dict(probe.client_kwargs)}
        if probe.version_aware:
            options["version_aware"] = True
        open_kwargs, driver_kwds = self._open_options()
        common = {"engine": "h5netcdf", "phony_dims": "access", "decode_times": False, "storage_options": options,
                  "driver_kwds": driver_kwds, **({"open_kwargs": open_kwargs} if open_kwargs else {})}

        def opener(name):
            return xr.open_dataset(url, group=name, chunks=None, **common)

        try:
            if group is None:
                opened = tree = xr.open_datatree(url, **common)
            else:
                opened, tree = opener(group or None), None
        except (OSError, ValueError) as error:
            raise UserError(f"{url}: not readable as HDF5/NetCDF-4 through xarray ({error})") from error
        settings = {**self.settings, "xarray": xr.__version__, **_h5py_version_settings(),
                    "opened": "open_datatree(url)" if group is None else f"open_dataset(url, group={group or None!r})"}
        handle = XarrayHandle("hdf5", url, settings, [opened.close], opener, tree=tree)
        # the cache xarray chose is found by following the dataset's references: after the timed region
        handle.look_later = lambda: _xarray_file_cache(opened)
        if tree is None:
            handle._groups[group or ""] = opened
        return handle

    def open_for(self, url, group):
        return self.open(url, group)


class XarrayZarr(Reader):
    """``xr.open_zarr(url, group=...)``: xarray's own zarr engine on a Zarr v3 store at an s3:// URL, as its users
    call it (zarr opens the URL through fsspec's s3fs; every request counted on the same botocore events)."""

    name = "xarray-zarr"
    kind = "zarr"
    modules = ("zarr", "zarr.storage", "s3fs", "xarray")
    description = "xarray.open_zarr(url, group=...): xarray's zarr engine, the store opened by zarr from the URL (s3fs)"
    # xarray's default, as its users leave it: the store's consolidated metadata where it has some (layoutlab's
    # Zarr stores do), else each array's own. consolidated=False, passed here until 2026-11-28, read every
    # zarr.json and listed every group: ATL07's store opened as a tree with 1,257 GETs and 144 LISTs where
    # xarray's default reads 14.
    open_options: dict = {}

    @property
    def settings(self):
        import zarr

        return {"library": "xarray+zarr+fsspec(s3fs)", "opened_by": "xarray (URL + storage_options)",
                "chunks": None, "consolidated": self.open_options.get("consolidated", "xarray's default (None)"),
                "zarr_format": 3, "concurrency": int(zarr.config.get("async.concurrency")), **_coalescing(zarr)}

    def _storage_options(self, url) -> dict:
        probe = storage.s3fs_filesystem(for_url=url, skip_instance_cache=True,
                                        session=accounting.aiobotocore_session(self.requests))
        return {"skip_instance_cache": True, "session": probe.session, "client_kwargs": dict(probe.client_kwargs)}

    def _source(self, url):
        """(what xarray opens, its extra keyword arguments, closers)"""
        return url, {"storage_options": self._storage_options(url)}, []

    def open(self, url, group: str | None = ""):
        """``xr.open_zarr`` of ``group`` once; ``group=None``: ``xr.open_datatree(engine="zarr")``."""
        import xarray as xr
        import zarr

        source, extra, closers = self._source(url)
        common = {**self.open_options, "zarr_format": 3, "decode_times": False, **extra}

        def opener(name):
            return xr.open_zarr(source, group=name, chunks=None, **common)

        try:
            if group is None:
                opened = tree = xr.open_datatree(source, engine="zarr", chunks=None, **common)
            else:
                opened, tree = opener(group or None), None
        except (FileNotFoundError, KeyError, ValueError, TypeError) as error:
            for close in closers:
                close()
            raise UserError(f"{url}: not readable as Zarr v3 through xarray ({type(error).__name__}: {error})") from error
        settings = {**self.settings, "xarray": xr.__version__, "zarr": zarr.__version__,
                    "opened": ("open_datatree(url, engine='zarr')" if group is None
                               else f"open_zarr(url, group={group or None!r})")}
        handle = XarrayHandle("zarr", url, settings, [opened.close, *closers], opener, tree=tree)
        if tree is None:
            handle._groups[group or ""] = opened
        return handle

    def open_for(self, url, group):
        return self.open(url, group)


class XarrayIcechunk(XarrayZarr):
    """``xr.open_zarr(session.store, group=...)``: icechunk's documented xarray path on a read-only session of
    branch main (Rust I/O: no client hook, the local proxy counts it)."""

    name = "xarray-icechunk"
    kind = "icechunk"
    modules = ("zarr", "icechunk", "xarray")
    description = "xarray.open_zarr(repo.readonly_session('main').store): icechunk's xarray path"
    counts_requests = False
    open_options = {"consolidated": False}  # (Icechunk's xarray guide: its stores keep no consolidated metadata)

    @property
    def settings(self):
        return {**IcechunkReader({}).settings, "library": "xarray+icechunk+zarr", "opened_by": "xarray (icechunk store)",
                "chunks": None, "consolidated": self.open_options["consolidated"], "zarr_format": 3}

    def _source(self, url):
        import icechunk

        from layoutlab.convert.virtual import open_icechunk_repository

        buckets = tuple(self.options["virtual_buckets"]) if self.options.get("virtual_buckets") else None
        try:
            session = open_icechunk_repository(url, buckets).readonly_session("main")
        except (icechunk.IcechunkError, FileNotFoundError, ValueError) as error:
            raise UserError(f"{url}: not an Icechunk repository ({type(error).__name__}: {error})") from error
        self._snapshot = session.snapshot_id
        return session.store, {}, []

    def open(self, url, group: str | None = ""):
        import icechunk

        handle = super().open(url, group)
        handle.settings.update(icechunk=icechunk.__version__, snapshot=self._snapshot)
        return handle


def _xarray_file_cache(ds) -> dict:
    """The fsspec cache xarray picked for the file it opened (its default since 2026.3: 4 MiB blocks)."""
    for candidate in open_fsspec_files(ds):
        cache = getattr(candidate, "cache", None)
        if cache is not None:
            return {"cache_type": type(cache).__name__, "block_size": int(candidate.blocksize),
                    "cache_seen": "on the file object xarray opened"}
    return {"cache_type": "unknown", "cache_seen": "xarray's file object not found"}


def open_fsspec_files(ds, depth: int = 8) -> list:
    """The open fsspec files of s3fs that ``ds`` reaches (xarray keeps its file object only inside its file
    manager: dataset -> closer -> store -> file manager -> file). Found by following references from ``ds``
    (a few thousand objects); every object of the process (0.1-0.4 s a case, after xarray's imports) is
    scanned only when that finds none."""
    import gc

    from fsspec.spec import AbstractBufferedFile

    seen, level = {id(ds)}, [ds]
    for _ in range(depth):
        found = [o for o in level if isinstance(o, AbstractBufferedFile) and not o.closed]
        if found:
            return found
        following = []
        for referent in gc.get_referents(*level):
            if id(referent) not in seen and not isinstance(referent, (str, bytes, int, float, type)):
                seen.add(id(referent))
                following.append(referent)
        level = following
    return [o for o in gc.get_objects() if isinstance(o, AbstractBufferedFile) and not o.closed]


class ZarrObstore(Reader):
    name = "zarr-obstore"
    kind = "zarr"
    modules = ("zarr", "zarr.storage", "obstore", "obstore.store")
    description = "zarr 3 + obstore S3Store"

    @property
    def settings(self):
        import zarr

        return {"library": "zarr+obstore", "concurrency": int(zarr.config.get("async.concurrency")),
                "zarr_format": 3, **_coalescing(zarr)}

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


class ZarrObstoreNoCoalesce(ZarrObstore):
    name = "zarr-obstore-nocoalesce"
    description = "zarr 3 + obstore S3Store, shard coalescing off (one GET per inner chunk)"
    coalesce = False

    @property
    def settings(self):
        import zarr

        return {**super().settings, **_coalescing(zarr)}

    def open(self, url):
        import zarr

        # the case runs in a process of its own: a process-wide setting is this case's setting
        zarr.config.set({"array.sharding_coalesce_max_gap_bytes": -1, "array.sharding_coalesce_max_bytes": 0})
        return super().open(url)


def _coalescing(zarr) -> dict:
    gap = int(zarr.config.get("array.sharding_coalesce_max_gap_bytes"))
    cap = int(zarr.config.get("array.sharding_coalesce_max_bytes"))
    return {"sharding_coalesce_max_gap_bytes": gap, "sharding_coalesce_max_bytes": cap,
            "sharding_coalescing": gap >= 0 and cap > 0}


class KerchunkFsspec(Reader):
    name = "kerchunk-fsspec"
    kind = "kerchunk"
    modules = ("zarr", "zarr.storage", "s3fs", "fsspec.implementations.reference", "ujson")
    description = "kerchunk references (JSON) through fsspec's ReferenceFileSystem on s3fs, read by zarr 3"

    @property
    def settings(self):
        return {"library": "zarr+fsspec ReferenceFileSystem(s3fs)", "references": "json",
                "cache_type": "none (ranged GET per referenced chunk)", "concurrency": "fsspec batch (async)"}

    def open(self, url):
        import fsspec
        import zarr
        from fsspec.implementations.reference import ReferenceFileSystem
        from zarr.storage import FsspecStore

        session = accounting.aiobotocore_session(self.requests)
        sync_fs = storage.s3fs_filesystem(skip_instance_cache=True, session=session)
        try:
            refs = json.loads(sync_fs.cat_file(url))
        except (FileNotFoundError, ValueError) as error:
            raise UserError(f"{url}: no kerchunk references ({type(error).__name__}: {error})") from error
        # chunks of an original pinned to a version say so in their URL (?versionId=): version-aware
        remote = storage.s3fs_filesystem(asynchronous=True, skip_instance_cache=True, session=session,
                                         version_aware=True)
        fs = ReferenceFileSystem(refs, fs={"s3": remote}, remote_protocol="s3", asynchronous=True)

        def close_session():
            creator = getattr(remote, "_s3creator", None)
            if creator is not None:
                from zarr.core.sync import sync

                sync(creator.__aexit__(None, None, None))

        try:
            group = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        except (FileNotFoundError, KeyError, ValueError) as error:
            close_session()
            raise UserError(f"{url}: references do not open as a Zarr v3 group ({error})") from error
        settings = {**self.settings, "zarr": zarr.__version__, "fsspec": fsspec.__version__,
                    "references_bytes": sum(len(str(v)) for v in refs.get("refs", {}).values())}
        return ZarrHandle("zarr", group, settings, [close_session])


class IcechunkReader(Reader):
    name = "icechunk"
    kind = "icechunk"
    modules = ("zarr", "icechunk")
    description = "an Icechunk repository (branch main) through zarr 3"
    counts_requests = False  # icechunk sends its requests from Rust: no hook; the local proxy counts them

    @property
    def settings(self):
        import icechunk

        config = icechunk.RepositoryConfig.default()
        return {"library": "icechunk+zarr", "branch": "main",
                "max_concurrent_requests": config.max_concurrent_requests,
                "get_partial_values_concurrency": config.get_partial_values_concurrency, "concurrency": "icechunk"}

    def open(self, url):
        import icechunk
        import zarr

        from layoutlab.convert.virtual import open_icechunk_repository

        loc = storage.S3Location.parse(url)
        buckets = tuple(self.options["virtual_buckets"]) if self.options.get("virtual_buckets") else None
        try:
            repo = open_icechunk_repository(url, buckets)
            session = repo.readonly_session("main")
            group = zarr.open_group(session.store, mode="r", zarr_format=3)
        except (icechunk.IcechunkError, FileNotFoundError, ValueError) as error:
            raise UserError(f"{url}: not an Icechunk repository ({type(error).__name__}: {error})") from error
        settings = {**self.settings, "icechunk": icechunk.__version__, "zarr": zarr.__version__,
                    "snapshot": session.snapshot_id, "bucket": loc.bucket,
                    "virtual_containers": sorted(repo.authorized_virtual_container_prefixes)}
        return ZarrHandle("zarr", group, settings, [])


# h5coro 1.0.7 reads a contiguous dataset's hyperslice from the dataset's first byte for the slice's length, then
# cuts the slice at its offset out of that short buffer: rows not starting at 0 come back as zeros (ARM's
# time series, tests/unit/test_h5coro_contiguous.py). Rows [start, stop) of such a dataset are read as [0, stop)
# and cut here: the values are right, the bytes counted are the ones h5coro then reads, and the record says so.
H5CORO_CONTIGUOUS_FROM_ROW_0 = ("h5coro 1.0.7 returns zeros for a contiguous dataset's rows not starting at 0: "
                                "those rows are read from row 0 and cut in numpy")


class _H5coroArray:
    """Slicing of one h5coro dataset: rows along axis 0 through a hyperslice, the rest in numpy."""

    CONTIGUOUS_LAYOUT = 1  # (h5coro's H5Dataset.CONTIGUOUS_LAYOUT)

    def __init__(self, h5obj, path, settings: dict | None = None):
        self._h5 = h5obj
        self._settings = settings if settings is not None else {}
        self.path = "/" + path.strip("/")
        self._key = path.strip("/")  # h5coro's promise names datasets without the leading slash
        promise = h5obj.readDatasets([{"dataset": self.path, "hyperslice": []}], metaOnly=True)
        meta = promise.datasets[self._key].meta
        if meta is None or meta.type is None:
            raise KeyError(f"{path} is not a dataset")
        self.shape = tuple(int(n) for n in meta.dimensions)
        self._contiguous = meta.layout == self.CONTIGUOUS_LAYOUT
        probe = self._read([(0, min(1, self.shape[0]))] if self.shape else [])
        self.dtype = np.asarray(probe).dtype

    def _read(self, hyperslice):
        promise = self._h5.readDatasets([{"dataset": self.path, "hyperslice": hyperslice}], block=True)
        return np.asarray(promise[self._key])

    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        if not self.shape:
            return self._read([])[index] if index else self._read([])
        first = index[0] if index else slice(None)
        if isinstance(first, slice) and first.step in (None, 1):
            start, stop, _ = first.indices(self.shape[0])
            return self._rows(start, max(start, stop))[(slice(None),) + tuple(index[1:])]
        if isinstance(first, (int, np.integer)):
            i = int(first) % self.shape[0]
            return self._rows(i, i + 1)[(0,) + tuple(index[1:])]
        return self._read([])[index]

    def _rows(self, start: int, stop: int):
        rest = [(0, n) for n in self.shape[1:]]
        if self._contiguous and start > 0:
            self._settings["contiguous_rows"] = H5CORO_CONTIGUOUS_FROM_ROW_0
            return self._read([(0, stop)] + rest)[start:]
        return self._read([(start, stop)] + rest)


class H5coroHandle(Handle):
    def array(self, path):
        return _H5coroArray(self.root, path, self.settings)

    def attrs(self):
        _links, attributes, _meta = self.root.inspectPath("/")
        return {k: (v.item() if isinstance(v, np.ndarray) and v.size == 1 else v) for k, v in attributes.items()}

    def listing(self):
        counts = {"objects": 0, "arrays": 0, "attributes": 0}

        def walk(path):
            variables, attributes, groups = self.root.list(path)
            counts["attributes"] += len(attributes)
            for name, attrs in variables.items():
                counts["objects"] += 1
                counts["arrays"] += 1
                counts["attributes"] += len(attrs) - 1  # '__metadata__'
            for name in groups:
                counts["objects"] += 1
                walk(f"{path.rstrip('/')}/{name}")

        walk("/")
        return counts


class H5coroReader(Reader):
    name = "h5coro"
    kind = "hdf5"
    modules = ("h5coro", "h5coro.s3driver", "boto3")
    description = "SlideRule's h5coro with its S3 driver (boto3; cache lines, no libhdf5)"

    @property
    def settings(self):
        from h5coro import h5coro as core

        return {"library": "h5coro", "cache_line_size": int(self.options.get("cache_line_size",
                                                                              core.CACHE_LINE_SIZE_DEFAULT)),
                "max_connections": 100, "concurrency": "threads per dataset"}

    def open(self, url):
        import boto3
        import h5coro
        from h5coro import h5coro as core
        from h5coro.s3driver import S3Driver

        loc = storage.S3Location.parse(url)
        counter = self.requests
        counter.method = counter.method or accounting.BOTOCORE_METHOD
        endpoint = storage.s3_endpoint_url()
        version_id = loc.version_id

        class CountingS3Driver(S3Driver):
            """h5coro's boto3 driver on a counting session, the configured endpoint, one object version."""

            def create_session(self, credentials):
                session = boto3.Session(region_name=storage.aws_region())
                accounting.count_botocore(session.events, counter)
                return session

            def __init__(self, resource, credentials, session=None, max_connections=None):
                super().__init__(resource, credentials, session, max_connections)
                if endpoint:  # h5coro's client leaves the endpoint to boto3's env; name it explicitly
                    self.client = self.session.client("s3", endpoint_url=endpoint, config=self.client.meta.config)

            def read(self, offset, size):
                if not version_id:
                    return super().read(offset, size)
                response = self.client.get_object(Bucket=self.bucket_name, Key=self.key, VersionId=version_id,
                                                  Range=f"bytes={offset}-{offset + size - 1}")
                return response["Body"].read()

        settings = self.settings
        try:
            h5obj = core.H5Coro(f"{loc.bucket}/{loc.key}", CountingS3Driver, credentials={},
                                cacheLineSize=settings["cache_line_size"], errorChecking=True)
        except Exception as error:  # h5coro raises its own FatalError/RuntimeError on non-HDF5 input
            raise UserError(f"{url}: not readable by h5coro ({type(error).__name__}: {error})") from error
        settings = {**settings, "h5coro": getattr(h5coro, "__version__", None) or _dist_version("h5coro"),
                    "version_id": version_id}
        return H5coroHandle("hdf5", h5obj, settings, [h5obj.close])


# h5coro's readSuperblock reads superblock versions 0 and 2 only; HDF5 writes a file with file-space paging (every
# paged variant) with superblock version 3 (tests/integration/test_bench_scripts_smoke.py sees h5coro refuse it)
H5CORO_PAGED_REFUSAL = ("h5coro reads HDF5 superblock versions 0 and 2 only; a paged copy is written with superblock "
                        "version 3 (HDF5's file-space paging)")


def h5coro_refusal(read, datasets) -> str | None:
    """Why h5coro cannot open this file, the metadata of one of ``datasets`` (paths) or the root's attributes,
    from h5coro itself parsing them through ``read(offset, size)`` (the plan step's own stream: no block re-read); None when it
    reads them all. One line, h5coro's own words."""
    from h5coro import h5coro as core
    from h5coro.h5dataset import H5Dataset

    class StreamDriver:
        """h5coro's driver interface (read, copy, close) over the stream the plan step reads the file through."""

        def __init__(self, resource, credentials):
            pass

        def read(self, pos, size):
            return read(pos, size)

        def copy(self, max_connections=None):
            return self

        def close(self):
            pass

    import logging

    from h5coro.logger import log

    quiet = log.level
    log.setLevel(logging.ERROR)  # (its warnings on attributes it skips, e.g. DIMENSION_LIST: not the plan's business)
    path = "(the file)"
    try:
        # cache lines = the stream's blocks: h5coro's reads fall on the blocks h5py read (no block fetched twice)
        line = int(getattr(read, "block_size", 0) or core.CACHE_LINE_SIZE_DEFAULT)
        h5 = core.H5Coro("upload", StreamDriver, cacheLineSize=line, errorChecking=True)
        try:
            for path in datasets:
                meta = H5Dataset(h5, path.strip("/"), earlyExit=False, metaOnly=True, enableAttributes=False).meta
                if meta is None or meta.type is None:
                    return f"h5coro finds no dataset at {path}"
            path = "the root's attributes"  # (the bench's value check reads them: H5coroHandle.attrs)
            h5.inspectPath("/")
        finally:
            h5.close()
    except Exception as error:  # h5coro raises its FatalError (a RuntimeError), struct errors... on what it cannot parse
        text = str(error).splitlines()[0] if str(error) else ""
        return f"h5coro cannot read {path}: {type(error).__name__}: {text}"[:300]
    finally:
        log.setLevel(quiet)
    return None


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


READERS = {r.name: r for r in (H5pyS3fsDefault, H5pyS3fsAligned, H5pyRos3, XarrayH5netcdf, ZarrObstore,
                               ZarrObstoreNoCoalesce, ZarrFsspec, XarrayZarr, KerchunkFsspec, IcechunkReader,
                               XarrayIcechunk, H5coroReader)}


def make_reader(name: str, options: dict | None = None) -> Reader:
    try:
        return READERS[name](options)
    except KeyError:
        raise UserError(f"unknown reader {name!r}; choose from {', '.join(READERS)}") from None


def ros3_available() -> bool:
    import h5py

    return "ros3" in h5py.registered_drivers()
