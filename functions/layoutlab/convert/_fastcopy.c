/* layoutlab repack's C code, one module: the stored-chunk and plain-attribute loops of the
 * repack engine (repack_hdf5.py) and --verify's plain-attribute comparison.
 *
 * Why by hand: h5py offers one Python call per chunk (read_direct_chunk /
 * write_direct_chunk) and several per attribute, and on an ATL03 granule
 * (55,000 chunks, 6,000 attributes) that per-call cost was most of the gap to
 * h5repack, which copies with H5Ocopy in C. H5Ocopy cannot be used for the datasets
 * that must change (it keeps the dataspace and layout: unlimited dimensions and COMPACT
 * datasets would stay), and no library offers "copy the stored chunks of one dataset
 * into another".
 *
 * The module calls the HDF5 library h5py links (no second copy of libhdf5,
 * identifiers shared with h5py), found with load(); the declarations are in
 * _hdf5_api.h.
 *
 * Callers hold h5py's lock (h5py._objects.phil) around every call when h5py is
 * imported, as h5py does around its own calls into the library.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "_hdf5_api.h"

struct hdf5_api h5;
static int bound = 0;

/* load(path): the HDF5 functions looked up through the shared object at `path`,
 * one of h5py's extension modules. dlsym through it searches what it links, so
 * this finds the libhdf5 h5py uses even when another copy is loaded too (e.g.
 * netCDF4's wheel brings its own). */
static PyObject *load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) return PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, dlerror());
    struct hdf5_api found;
    void *address;
#define HDF5_LOOK_UP(ret, name, params)                                                                 \
    if (!(address = dlsym(library, "H5" #name)))                                                        \
        return PyErr_Format(PyExc_OSError, "%s: the HDF5 library it links has no H5" #name, path);      \
    memcpy(&found.name, &address, sizeof address);
    HDF5_FUNCTIONS(HDF5_LOOK_UP)
#undef HDF5_LOOK_UP
    unsigned major = 0, minor = 0, release = 0;
    if (found.get_libversion(&major, &minor, &release) < 0 || major * 100 + minor < 114)
        return PyErr_Format(PyExc_OSError, "%s links HDF5 %u.%u.%u; layoutlab's C code needs 1.14 or newer", path,
                            major, minor, release);
    h5 = found;
    bound = 1;
    return Py_BuildValue("(III)", major, minor, release);
}

static int check_bound(void) {
    if (!bound) PyErr_SetString(PyExc_RuntimeError, "layoutlab.convert._fastcopy: load() was not called");
    return bound;
}

/* --- stored chunks ---------------------------------------------------------------------- */

typedef struct {
    haddr_t address;
    hsize_t size;
    unsigned mask;
    size_t index; /* row of its offset in `offsets` */
} located_chunk;

typedef struct {
    located_chunk *chunks;
    hsize_t *offsets;
    size_t count, capacity;
    int rank;
    hsize_t extent[32]; /* the destination's current shape */
    int beyond;         /* a chunk was listed wholly beyond it */
} chunk_list;

static int collect_chunk(const hsize_t *offset, unsigned mask, haddr_t address, hsize_t size, void *data) {
    chunk_list *list = data;
    for (int i = 0; i < list->rank; i++)
        if (offset[i] >= list->extent[i]) list->beyond = 1;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 1024;
        located_chunk *chunks = realloc(list->chunks, capacity * sizeof *chunks);
        if (chunks) list->chunks = chunks;
        hsize_t *offsets = realloc(list->offsets, capacity * list->rank * sizeof *offsets);
        if (offsets) list->offsets = offsets;
        if (!chunks || !offsets) return -1;
        list->capacity = capacity;
    }
    located_chunk *chunk = &list->chunks[list->count];
    chunk->address = address;
    chunk->size = size;
    chunk->mask = mask;
    chunk->index = list->count;
    memcpy(&list->offsets[list->count * list->rank], offset, list->rank * sizeof *offset);
    list->count++;
    return 0;
}

static int by_address(const void *a, const void *b) {
    haddr_t x = ((const located_chunk *)a)->address, y = ((const located_chunk *)b)->address;
    return (x > y) - (x < y);
}

static int read_fully(int fd, char *buffer, size_t length, off_t position) {
    while (length) {
        ssize_t got = pread(fd, buffer, length, position);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return got < 0 ? -1 : 0;
        buffer += got;
        length -= (size_t)got;
        position += got;
    }
    return 1;
}

/* --- reading ahead --------------------------------------------------------------------------
 *
 * A run of neighbouring chunks ("span") is read with one pread into one of two buffers by a
 * reader thread while the caller's thread hands the previous span to HDF5 (H5Dwrite_chunk): the
 * copy from the page cache into the buffer then runs on another core. Measured on the GEOS-like
 * 1 GB file, reading is ~30 % of a repack (dd: 0.12 s read, 0.29 s write), all of it overlapped
 * when a second core is free; on one core the two take turns as before. The reader thread touches
 * neither Python nor HDF5. Datasets under READ_AHEAD_MIN_BYTES are read in line (a thread costs
 * tens of microseconds; an ATL03 granule has hundreds of small datasets). */

#define READ_AHEAD_MIN_BYTES (8u << 20)

typedef struct {
    haddr_t start, end;
    size_t first, last; /* chunks [first, last) of the sorted list */
} span_t;

typedef struct {
    int fd;
    const span_t *spans;
    size_t nspans;
    char *buffers[2];
    size_t sizes[2];
    int state[2]; /* 0: free for the reader, 1: holds span span_of[b], -1: the read failed (errnum), -2: past the end */
    size_t span_of[2];
    int errnum[2], stop;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
} read_ahead_t;

/* Read `span` into buffer `b` (grown as needed); 1 read, 0 past the end of the file, -1 errno/no memory. */
static int read_span(read_ahead_t *ra, int b, const span_t *span) {
    size_t length = (size_t)(span->end - span->start);
    if (length > ra->sizes[b]) {
        char *grown = realloc(ra->buffers[b], length);
        if (!grown) {
            errno = ENOMEM;
            return -1;
        }
        ra->buffers[b] = grown;
        ra->sizes[b] = length;
    }
    return read_fully(ra->fd, ra->buffers[b], length, (off_t)span->start);
}

static void *read_ahead(void *arg) {
    read_ahead_t *ra = arg;
    for (size_t k = 0; k < ra->nspans; k++) {
        int b = (int)(k & 1);
        pthread_mutex_lock(&ra->lock);
        while (ra->state[b] != 0 && !ra->stop) pthread_cond_wait(&ra->changed, &ra->lock);
        int stop = ra->stop;
        pthread_mutex_unlock(&ra->lock);
        if (stop) break;
        int got = read_span(ra, b, &ra->spans[k]); /* (buffer b is the reader's while its state is 0) */
        int errnum = got < 0 ? errno : 0;
        pthread_mutex_lock(&ra->lock);
        ra->span_of[b] = k;
        ra->errnum[b] = got < 0 ? errnum : 0;
        ra->state[b] = got > 0 ? 1 : (got < 0 ? -1 : -2);
        pthread_cond_broadcast(&ra->changed);
        pthread_mutex_unlock(&ra->lock);
        if (got <= 0) break;
    }
    return NULL;
}

/* Every stored chunk of `src` written unchanged (same offset, same filter mask)
 * into `dst`, which has the same chunk shape. Chunks are located with one
 * H5Dchunk_iter pass and read front to back from `fd` (the source file),
 * neighbours closer than max_gap in one pread of up to span_bytes, read ahead by
 * another thread (above). progress, if not None, is called with the bytes read
 * every 16 MiB and at the end. 0 on success; 1 when a chunk is listed beyond the shape (nothing
 * written); -1 with a Python exception set. */
int fastcopy_stored_chunks(hid_t src, hid_t dst, int fd, int rank, size_t span_bytes, size_t max_gap,
                           PyObject *progress, unsigned long long *copied_out, unsigned long long *bytes_out) {
    if (rank < 1 || rank > 32) {
        PyErr_Format(PyExc_ValueError, "rank %d out of range", rank);
        return -1;
    }
    chunk_list list = {.rank = rank};
    span_t *spans = NULL;
    size_t nspans = 0;
    read_ahead_t ra = {.fd = fd};
    int threaded = 0;
    unsigned long long copied = 0, bytes = 0, unreported = 0, total = 0;
    int status = -1;
    hid_t dst_space = h5.Dget_space(dst);
    int shaped = dst_space >= 0 && h5.Sget_simple_extent_ndims(dst_space) == rank &&
                 h5.Sget_simple_extent_dims(dst_space, list.extent, NULL) == rank;
    if (dst_space >= 0) h5.Sclose(dst_space);
    if (!shaped) {
        PyErr_SetString(PyExc_OSError, "cannot read the shape of the copy");
        return -1;
    }

    if (h5.Dchunk_iter(src, H5P_DEFAULT, collect_chunk, &list) < 0) {
        if (list.count == list.capacity && !list.chunks) PyErr_NoMemory();
        else PyErr_SetString(PyExc_OSError, "cannot list the stored chunks (damaged chunk index?)");
        goto done;
    }
    if (list.beyond) {
        /* A chunk listed wholly beyond the shape: the listing is not where readers find the values
         * (HDF5 2.0's H5Dchunk_iter on the extensible-array index of HDF5's tools' h5fc_ext1_f.h5 lists
         * (0, 6) and (0, 9) in a 4 x 6 dataset whose reads find them at (2, 0) and (2, 3)). Nothing
         * written: the caller copies the values decoded. */
        status = 1;
        goto done;
    }
    qsort(list.chunks, list.count, sizeof *list.chunks, by_address);
    spans = malloc((list.count ? list.count : 1) * sizeof *spans);
    if (!spans) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t first = 0; first < list.count;) {
        /* one run of neighbours (the rule of _read_spans in repack_hdf5.py) */
        haddr_t start = list.chunks[first].address, end = start + list.chunks[first].size;
        size_t last = first + 1;
        while (last < list.count) {
            located_chunk *next = &list.chunks[last];
            if (next->address < end || next->address - end > (haddr_t)max_gap ||
                next->address + next->size - start > (haddr_t)span_bytes)
                break;
            end = next->address + next->size;
            last++;
        }
        spans[nspans++] = (span_t){.start = start, .end = end, .first = first, .last = last};
        total += end - start;
        first = last;
    }
    ra.spans = spans;
    ra.nspans = nspans;
    if (nspans > 1 && total >= READ_AHEAD_MIN_BYTES && pthread_mutex_init(&ra.lock, NULL) == 0) {
        if (pthread_cond_init(&ra.changed, NULL) == 0) {
            pthread_t thread;
            if (pthread_create(&thread, NULL, read_ahead, &ra) == 0) {
                threaded = 1;
                ra.thread = thread;
            } else {
                pthread_cond_destroy(&ra.changed);
                pthread_mutex_destroy(&ra.lock);
            }
        } else {
            pthread_mutex_destroy(&ra.lock);
        }
    }
    for (size_t k = 0; k < nspans; k++) {
        const span_t *span = &spans[k];
        int b = threaded ? (int)(k & 1) : 0, got, errnum;
        if (threaded) {
            pthread_mutex_lock(&ra.lock);
            while (ra.state[b] == 0) pthread_cond_wait(&ra.changed, &ra.lock);
            got = ra.state[b];
            errnum = ra.errnum[b];
            pthread_mutex_unlock(&ra.lock);
        } else {
            got = read_span(&ra, b, span);
            errnum = got < 0 ? errno : 0;
            if (got == 0) got = -2;
        }
        if (got == -1) {
            errno = errnum;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        if (got == -2) {
            PyErr_Format(PyExc_OSError, "chunks up to byte %llu lie beyond the end of the file",
                         (unsigned long long)span->end);
            goto done;
        }
        for (size_t i = span->first; i < span->last; i++) {
            located_chunk *chunk = &list.chunks[i];
            if (h5.Dwrite_chunk(dst, H5P_DEFAULT, chunk->mask, &list.offsets[chunk->index * rank],
                                (size_t)chunk->size, ra.buffers[b] + (chunk->address - span->start)) < 0) {
                PyErr_Format(PyExc_OSError, "cannot write the chunk stored at byte %llu (%llu bytes)",
                             (unsigned long long)chunk->address, (unsigned long long)chunk->size);
                goto done;
            }
            copied++;
        }
        if (threaded) {
            pthread_mutex_lock(&ra.lock);
            ra.state[b] = 0;
            pthread_cond_broadcast(&ra.changed);
            pthread_mutex_unlock(&ra.lock);
        }
        size_t length = (size_t)(span->end - span->start);
        bytes += length;
        unreported += length;
        if (progress != Py_None && unreported >= (16u << 20)) {
            PyObject *r = PyObject_CallFunction(progress, "K", unreported);
            if (!r) goto done;
            Py_DECREF(r);
            unreported = 0;
        }
    }
    if (progress != Py_None && unreported) {
        PyObject *r = PyObject_CallFunction(progress, "K", unreported);
        if (!r) goto done;
        Py_DECREF(r);
    }
    *copied_out += copied;
    *bytes_out += bytes;
    status = 0;
done:
    if (threaded) {
        pthread_mutex_lock(&ra.lock);
        ra.stop = 1;
        pthread_cond_broadcast(&ra.changed);
        pthread_mutex_unlock(&ra.lock);
        pthread_join(ra.thread, NULL);
        pthread_cond_destroy(&ra.changed);
        pthread_mutex_destroy(&ra.lock);
    }
    free(ra.buffers[0]);
    free(ra.buffers[1]);
    free(spans);
    free(list.chunks);
    free(list.offsets);
    return status;
}

/* copy_chunks(src_dset, dst_dset, fd, rank, span_bytes, max_gap, progress) -> (chunks, bytes read) */
static PyObject *copy_chunks(PyObject *self, PyObject *args) {
    long long src, dst;
    int fd, rank;
    Py_ssize_t span_bytes, max_gap;
    PyObject *progress;
    if (!PyArg_ParseTuple(args, "LLiinnO", &src, &dst, &fd, &rank, &span_bytes, &max_gap, &progress)) return NULL;
    if (!check_bound()) return NULL;
    unsigned long long copied = 0, bytes = 0;
    int status = fastcopy_stored_chunks((hid_t)src, (hid_t)dst, fd, rank, (size_t)span_bytes, (size_t)max_gap,
                                        progress, &copied, &bytes);
    if (status < 0) return NULL;
    if (status == 1) Py_RETURN_NONE; /* (not copied: the stored chunks are not where readers find the values) */
    return Py_BuildValue("KK", copied, bytes);
}

/* --- attributes -------------------------------------------------------------------------- */

/* Stored bytes can be copied as they are (the rule of _type_kind in repack_hdf5.py), and the type is
 * not a committed one (the destination has its own copy of those: Python maps them). */
int fastcopy_plain_type(hid_t type) {
    if (h5.Tcommitted(type) != 0) return 0;
    if (h5.Tdetect_class(type, H5T_VLEN) != 0 || h5.Tdetect_class(type, H5T_REFERENCE) != 0) return 0;
    int cls = h5.Tget_class(type);
    if (cls < 0) return 0;
    if (cls == H5T_STRING && h5.Tis_variable_str(type) != 0) return 0;
    if ((cls == H5T_COMPOUND || cls == H5T_ARRAY) && h5.Tdetect_class(type, H5T_STRING) != 0) return 0;
    return 1;
}

/* Attributes of `src` from *position (in index_type order: 0 name, 1 creation
 * order) created on `dst` with the same name, type, dataspace and stored bytes,
 * in `order` (0 increasing, 2 as stored), until one that is not plain (variable-length, holds references, or
 * of a committed type): *position is then its position (or the count when all
 * were copied), and the caller copies that one. 0 on success; -1 with a Python
 * exception set. */
/* One pass of H5Aiterate2 over the attributes, each opened by the name it gives: H5Aopen_by_idx on an
 * object whose attributes are in dense storage (more than 8, written with libver "latest") rebuilds
 * and sorts the table of all of them on every call, which made copying 2,000 attributes take ~6 s and
 * 20,000 look like a hung library. The pass stops at an attribute that is not plain and `position`
 * names it (repack_hdf5.py copies that one). */
typedef struct {
    hid_t dst;
    unsigned long long position, copied;
    void *data;
    size_t data_capacity;
} attribute_pass;

static herr_t copy_one_attribute(hid_t location, const char *name, const void *info, void *op_data) {
    (void)info;
    attribute_pass *pass = op_data;
    hid_t attr = h5.Aopen(location, name, H5P_DEFAULT);
    if (attr < 0) {
        PyErr_Format(PyExc_OSError, "cannot open attribute %llu", pass->position);
        return -1;
    }
    hid_t type = h5.Aget_type(attr);
    hid_t space = type < 0 ? -1 : h5.Aget_space(attr);
    int plain = space >= 0 && fastcopy_plain_type(type);
    const char *failed = NULL;
    if (space < 0) failed = "cannot read the type or dataspace of";
    if (plain && !failed) {
        hid_t copy = h5.Acreate2(pass->dst, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
        if (copy < 0) failed = "cannot create the copy of";
        else {
            if (h5.Sget_simple_extent_type(space) != H5S_NULL) {
                hssize_t points = h5.Sget_simple_extent_npoints(space);
                size_t size = points < 0 ? 0 : (size_t)points * h5.Tget_size(type);
                if (points < 0) failed = "cannot size";
                else if (size > pass->data_capacity) {
                    void *bigger = realloc(pass->data, size);
                    if (!bigger) failed = "out of memory for the value of";
                    else {
                        pass->data = bigger;
                        pass->data_capacity = size;
                    }
                }
                /* the file type as memory type: the stored bytes, unconverted */
                if (!failed && size && h5.Aread(attr, type, pass->data) < 0) failed = "cannot read";
                if (!failed && size && h5.Awrite(copy, type, pass->data) < 0) failed = "cannot write the copy of";
            }
            h5.Aclose(copy);
        }
    }
    if (space >= 0) h5.Sclose(space);
    if (type >= 0) h5.Tclose(type);
    herr_t result = 0;
    if (failed) {
        PyErr_Format(PyExc_OSError, "%s attribute %llu", failed, pass->position);
        result = -1;
    } else if (plain) {
        pass->copied++;
    } else {
        result = 1; /* stop: the caller copies this one */
    }
    h5.Aclose(attr);
    if (result == 0) pass->position++;
    return result;
}

/* Attributes of `src` from *position (in index_type order: 0 name, 1 creation
 * order) created on `dst` with the same name, type, dataspace and stored bytes,
 * in `order` (0 increasing, 2 as stored), until one that is not plain (variable-length, holds references, or
 * of a committed type): *position is then its position (or the count when all
 * were copied), and the caller copies that one. 0 on success; -1 with a Python
 * exception set. */
int fastcopy_plain_attributes(hid_t src, hid_t dst, int index_type, int order, unsigned long long *position_io,
                              unsigned long long *copied_out) {
    int count = h5.Aget_num_attrs(src);
    if (count < 0) {
        PyErr_Format(PyExc_OSError, "cannot count the attributes");
        return -1;
    }
    attribute_pass pass = {.dst = dst, .position = *position_io};
    int status = 0;
    if (pass.position < (unsigned long long)count) {
        hsize_t idx = pass.position;
        if (h5.Aiterate2(src, index_type, order, &idx, copy_one_attribute, &pass) < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_OSError, "cannot list the attributes");
            status = -1;
        }
    }
    *position_io = pass.position;
    *copied_out += pass.copied;
    free(pass.data);
    return status;
}

/* copy_plain_attributes(src_obj, dst_obj, index_type, start[, order]) -> (next, copied): see above. */
static PyObject *copy_plain_attributes(PyObject *self, PyObject *args) {
    long long src, dst;
    int index_type, order = H5_ITER_INC;
    unsigned long long position, copied = 0;
    if (!PyArg_ParseTuple(args, "LLiK|i", &src, &dst, &index_type, &position, &order)) return NULL;
    if (!check_bound()) return NULL;
    if (fastcopy_plain_attributes((hid_t)src, (hid_t)dst, index_type, order, &position, &copied) < 0) return NULL;
    return Py_BuildValue("KK", position, copied);
}

/* --- verification: attributes -------------------------------------------------------------
 *
 * same_plain_attributes(a, b, max_bytes) -> list of names (bytes), or None
 *
 * --verify's comparison of the attributes of object `a` (the input's) with those of `b` (the copy's).
 * When both hold as many attributes and each plain one of `a` (fastcopy_plain_type, a value of at most
 * max_bytes) is on `b` with an equal type, the same dataspace and the same stored bytes, the names of
 * the others (variable-length, references, committed types, large values) are returned: Python compares
 * those (repack_hdf5._compare_attribute knows how to walk them). On any difference, or any attribute it
 * cannot read, it returns None and Python compares every attribute of the object, wording what differs.
 * Why C: through h5py one attribute costs ~30 Python objects; 5,374 of an ATL03-like granule took 2.0 of
 * the 3.4 s its verification took. */
typedef struct {
    hid_t other;
    size_t max_bytes;
    char *a, *b;
    size_t capacity;
    PyObject *left;
    int python_error;
} attribute_check;

enum { SAME = 0, DIFFERS = 1, LEAVE_TO_PYTHON = 2 };

static int same_dataspace(hid_t space_a, hid_t space_b) {
    int kind = h5.Sget_simple_extent_type(space_a);
    if (kind < 0 || kind != h5.Sget_simple_extent_type(space_b)) return 0;
    if (kind != H5S_SIMPLE) return 1;
    hsize_t dims_a[32], dims_b[32];
    int rank = h5.Sget_simple_extent_ndims(space_a);
    if (rank < 0 || rank > 32 || rank != h5.Sget_simple_extent_ndims(space_b)) return 0;
    if (h5.Sget_simple_extent_dims(space_a, dims_a, NULL) < 0 || h5.Sget_simple_extent_dims(space_b, dims_b, NULL) < 0)
        return 0;
    return memcmp(dims_a, dims_b, (size_t)rank * sizeof *dims_a) == 0;
}

static int compare_attribute_values(attribute_check *check, hid_t attr_a, hid_t attr_b, hid_t type_a, hid_t type_b,
                                    hid_t space) {
    if (h5.Sget_simple_extent_type(space) == H5S_NULL) return SAME;
    if (!fastcopy_plain_type(type_a)) return LEAVE_TO_PYTHON;
    hssize_t points = h5.Sget_simple_extent_npoints(space);
    size_t item = h5.Tget_size(type_a);
    if (points < 0 || item == 0) return DIFFERS;
    size_t size = (size_t)points * item;
    if (size > check->max_bytes) return LEAVE_TO_PYTHON;
    if (size > check->capacity) {
        char *a = realloc(check->a, size), *b = a ? realloc(check->b, size) : NULL;
        if (a) check->a = a;
        if (b) check->b = b;
        if (!a || !b) return LEAVE_TO_PYTHON;
        check->capacity = size;
    }
    /* each file type as its memory type: the stored bytes, unconverted */
    if (size && (h5.Aread(attr_a, type_a, check->a) < 0 || h5.Aread(attr_b, type_b, check->b) < 0)) return DIFFERS;
    return size == 0 || memcmp(check->a, check->b, size) == 0 ? SAME : DIFFERS;
}

static herr_t check_one_attribute(hid_t location, const char *name, const void *info, void *op_data) {
    (void)info;
    attribute_check *check = op_data;
    if (h5.Aexists(check->other, name) <= 0) return 1; /* stop: Python words the difference */
    hid_t attr_a = h5.Aopen(location, name, H5P_DEFAULT);
    hid_t attr_b = attr_a < 0 ? -1 : h5.Aopen(check->other, name, H5P_DEFAULT);
    hid_t type_a = attr_b < 0 ? -1 : h5.Aget_type(attr_a), type_b = type_a < 0 ? -1 : h5.Aget_type(attr_b);
    hid_t space_a = type_b < 0 ? -1 : h5.Aget_space(attr_a), space_b = space_a < 0 ? -1 : h5.Aget_space(attr_b);
    int verdict = DIFFERS;
    if (space_b >= 0 && h5.Tequal(type_a, type_b) > 0 && same_dataspace(space_a, space_b))
        verdict = compare_attribute_values(check, attr_a, attr_b, type_a, type_b, space_a);
    if (space_b >= 0) h5.Sclose(space_b);
    if (space_a >= 0) h5.Sclose(space_a);
    if (type_b >= 0) h5.Tclose(type_b);
    if (type_a >= 0) h5.Tclose(type_a);
    if (attr_b >= 0) h5.Aclose(attr_b);
    if (attr_a >= 0) h5.Aclose(attr_a);
    if (verdict == LEAVE_TO_PYTHON) {
        PyObject *text = PyBytes_FromString(name);
        if (!text || PyList_Append(check->left, text) < 0) {
            Py_XDECREF(text);
            check->python_error = 1;
            return -1;
        }
        Py_DECREF(text);
    }
    return verdict == DIFFERS ? 1 : 0;
}

static PyObject *same_plain_attributes(PyObject *self, PyObject *args) {
    long long a, b;
    unsigned long long max_bytes;
    if (!PyArg_ParseTuple(args, "LLK", &a, &b, &max_bytes)) return NULL;
    if (!check_bound()) return NULL;
    int count = h5.Aget_num_attrs((hid_t)a);
    if (count < 0 || count != h5.Aget_num_attrs((hid_t)b)) Py_RETURN_NONE;
    attribute_check check = {.other = (hid_t)b, .max_bytes = (size_t)max_bytes, .left = PyList_New(0)};
    if (!check.left) return NULL;
    hsize_t idx = 0;
    herr_t status = count ? h5.Aiterate2((hid_t)a, H5_INDEX_NAME, H5_ITER_INC, &idx, check_one_attribute, &check) : 0;
    free(check.a);
    free(check.b);
    if (check.python_error) {
        Py_DECREF(check.left);
        return NULL;
    }
    if (status != 0) { /* a difference (or an attribute HDF5 could not read): Python looks at them all */
        Py_DECREF(check.left);
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return check.left;
}

static PyMethodDef methods[] = {
    {"load", load, METH_VARARGS,
     "load(path) -> (major, minor, release): bind to the libhdf5 the shared object at path links."},
    {"copy_chunks", copy_chunks, METH_VARARGS,
     "copy_chunks(src_dset, dst_dset, fd, rank, span_bytes, max_gap, progress) -> (chunks, bytes read)"},
    {"copy_plain_attributes", copy_plain_attributes, METH_VARARGS,
     "copy_plain_attributes(src_obj, dst_obj, index_type, start) -> (next position, attributes copied)"},
    {"same_plain_attributes", same_plain_attributes, METH_VARARGS,
     "same_plain_attributes(a_obj, b_obj, max_bytes) -> names left to compare in Python, or None; see above"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcopy", "layoutlab repack's C code.", -1, methods};

PyMODINIT_FUNC PyInit__fastcopy(void) { return PyModule_Create(&module); }
