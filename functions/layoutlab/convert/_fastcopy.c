/* layoutlab repack's C code, one module: the stored-chunk and plain-attribute loops (used by
 * the Python engine, repack_hdf5.py, and by the native engine below) and the native engine
 * (repack_file, called by repack_native.py).
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
 * netCDF4's wheel brings its own). Loading the module file does not import it:
 * the native repack runs without h5py (or numpy) in the process. */
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
    static const char *globals[] = {"H5P_CLS_FILE_CREATE_ID_g", "H5P_CLS_FILE_ACCESS_ID_g", "H5T_STD_REF_OBJ_g",
                                    "H5T_NATIVE_INT_g", "H5T_NATIVE_UINT_g", "H5P_CLS_OBJECT_COPY_ID_g",
                                    "H5P_CLS_LINK_CREATE_ID_g", "H5P_CLS_GROUP_CREATE_ID_g"};
    hid_t **slots[] = {&found.P_CLS_FILE_CREATE, &found.P_CLS_FILE_ACCESS, &found.T_STD_REF_OBJ, &found.T_NATIVE_INT,
                      &found.T_NATIVE_UINT, &found.P_CLS_OBJECT_COPY, &found.P_CLS_LINK_CREATE,
                       &found.P_CLS_GROUP_CREATE};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++) {
        if (!(*slots[i] = dlsym(library, globals[i])))
            return PyErr_Format(PyExc_OSError, "%s: the HDF5 library it links has no %s", path, globals[i]);
    }
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
 * 20,000 look like a hung library. `other`, when set, copies an attribute that is not plain (the native
 * engine); without it the pass stops there and `position` names it (the Python engine copies it). */
typedef struct {
    hid_t dst;
    unsigned long long position, copied;
    void *data;
    size_t data_capacity;
    int (*other)(void *context, hid_t attr, hid_t dst, const char *name);
    void *other_context;
    int failed_in_other; /* `other` failed (and said why); else a failure is a Python OSError set here */
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
    } else if (!pass->other) {
        result = 1; /* stop: the caller copies this one */
    } else if (pass->other(pass->other_context, attr, pass->dst, name) < 0) {
        pass->failed_in_other = 1;
        result = -1;
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

/* --- the native engine ----------------------------------------------------------------------
 *
 * `layoutlab repack` of a whole file in C, with neither
 * h5py nor numpy in the process.
 *
 * Why: the Python engine (repack_hdf5.py) writes an equivalent file, but importing
 * numpy and h5py alone costs ~0.15 s and walking an ATL03 granule's ~1,200
 * objects and ~6,000 attributes through h5py ~0.3 s more; h5repack, the
 * reference, is a C program. The work itself is libhdf5's in both engines.
 *
 * The design is the Python engine's: HDF5's H5Ocopy copies every object that
 * does not change, one call per group member (a whole subtree at once); only the
 * datasets that must change (COMPACT -> CONTIGUOUS; unlimited axes fixed at their
 * current size, NetCDF-4's dimension-length rule included) are made anew from
 * their creation property list (stored chunks copied as they are, other data
 * decoded block by block), inside the groups on the way to them, which are made
 * with their creation properties and attributes in their link order. The object
 * references of attributes (DIMENSION_LIST / REFERENCE_LIST), whether H5Ocopy
 * copied them or this code did, are pointed at the copies once every object exists.
 * What must change is decided from the source before anything is written
 * (scan_members); what the Python engine handles by other means is declined
 * there: soft, external and user-defined links, objects linked twice, committed
 * datatypes, datasets holding references, variable-length fill values, a user
 * block; and, while writing, a dataset to be made anew whose type is not plain
 * (variable-length or references) and references other than plain object ones.
 *
 * repack_file(src, dst, page_size, options, progress) returns
 *   ("done", {counters and lists for RepackSummary}),
 *   ("declined", reason) or ("failed", reason: the HDF5 call that failed);
 * after "declined" or "failed" the destination is closed and may be removed.
 * options = (span_bytes, max_gap, block_bytes, metadata_cache_bytes,
 *            source_chunk_cache_bytes, source_chunk_cache_slots, created):
 * `created` is called once the destination exists, before any data is written.
 */
enum { OK = 0, DECLINED = 1, FAILED = 2, PYTHON_ERROR = 3 };

/* --- source address -> destination object ------------------------------------------------- */

typedef struct {
    haddr_t src;
    char *dst_path;
    haddr_t dst; /* HADDR_UNDEF until first needed */
    long long length; /* NetCDF dimension length when the object is a scale, -1 until computed */
    int change;       /* made anew (a dataset) or rebuilt member by member (a group); else one H5Ocopy */
    unsigned long long bytes, chunks; /* stored bytes and chunks H5Ocopy copies with it (its subtree) */
} object_entry;

/* Open addressing, keys are file addresses (written by hand: C has no map, and this is ~40 lines). */
typedef struct {
    object_entry *entries;
    size_t count, capacity;
    size_t *slots; /* entry index + 1, 0 = empty */
    size_t nslots;
} object_map;

static size_t slot_of(const object_map *map, haddr_t key) {
    size_t slot = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (map->nslots - 1);
    while (map->slots[slot] && map->entries[map->slots[slot] - 1].src != key) slot = (slot + 1) & (map->nslots - 1);
    return slot;
}

static object_entry *map_find(const object_map *map, haddr_t key) {
    if (!map->nslots) return NULL;
    size_t slot = slot_of(map, key);
    return map->slots[slot] ? &map->entries[map->slots[slot] - 1] : NULL;
}

static object_entry *map_add(object_map *map, haddr_t key, const char *dst_path) {
    if (2 * (map->count + 1) > map->nslots) {
        size_t nslots = map->nslots ? 2 * map->nslots : 1024;
        size_t *slots = calloc(nslots, sizeof *slots);
        if (!slots) return NULL;
        free(map->slots);
        map->slots = slots;
        map->nslots = nslots;
        for (size_t i = 0; i < map->count; i++) map->slots[slot_of(map, map->entries[i].src)] = i + 1;
    }
    if (map->count == map->capacity) {
        size_t capacity = map->capacity ? 2 * map->capacity : 512;
        object_entry *entries = realloc(map->entries, capacity * sizeof *entries);
        if (!entries) return NULL;
        map->entries = entries;
        map->capacity = capacity;
    }
    char *path = strdup(dst_path);
    if (!path) return NULL;
    object_entry *entry = &map->entries[map->count];
    *entry = (object_entry){.src = key, .dst_path = path, .dst = HADDR_UNDEF, .length = -1};
    map->slots[slot_of(map, key)] = ++map->count;
    return entry;
}

static void map_free(object_map *map) {
    for (size_t i = 0; i < map->count; i++) free(map->entries[i].dst_path);
    free(map->entries);
    free(map->slots);
}

/* --- attributes whose values are written last (they hold object references) ---------------- */

typedef struct {
    hid_t dst_attr, type, space;
    void *data;
    size_t points, value_size;
    int vlen;         /* values are hvl_t of object references; else fixed-size at `offsets` */
    size_t offsets[8];
    size_t noffsets;
} deferred_attribute;

typedef struct {
    hid_t src_file, dst_file, copy_plist;
    int src_fd;
    PyObject *progress;
    size_t span_bytes, max_gap, block_bytes;
    int netcdf4;
    object_map objects;
    deferred_attribute *deferred;
    size_t ndeferred, deferred_capacity;
    unsigned long long groups, datasets, attributes, chunks_raw, references;
    PyObject *compact, *fixed, *kept, *rechunked;
    int status;
    char reason[600];
} job_t;

static int stop(job_t *job, int status, const char *format, ...) {
    if (job->status == OK) {
        va_list args;
        va_start(args, format);
        vsnprintf(job->reason, sizeof job->reason, format, args);
        va_end(args);
        job->status = status;
    }
    return -1;
}

#define FAIL(...) stop(job, FAILED, __VA_ARGS__)
#define DECLINE(...) stop(job, DECLINED, __VA_ARGS__)

/* After a shared loop of _fastcopy.c failed: its OSError (an HDF5 or read failure) becomes this
 * job's failure reason; anything else (the progress callback raised) is passed on to Python. */
static int fail_with_python_error(job_t *job, const char *where) {
    if (!PyErr_ExceptionMatches(PyExc_OSError)) {
        job->status = PYTHON_ERROR;
        return -1;
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *reason = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
    FAIL("%s: %s", where, reason ? reason : "a copy loop failed");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
    return -1;
}

static int append_path(job_t *job, PyObject *list, const char *path) {
    PyObject *text = PyUnicode_DecodeUTF8(path, (Py_ssize_t)strlen(path), "surrogateescape");
    if (!text || PyList_Append(list, text) < 0) {
        Py_XDECREF(text);
        job->status = PYTHON_ERROR;
        return -1;
    }
    Py_DECREF(text);
    return 0;
}

static char *join(const char *parent, const char *name) {
    size_t n = strlen(parent);
    while (n && parent[n - 1] == '/') n--;
    char *path = malloc(n + strlen(name) + 2);
    if (path) sprintf(path, "%.*s/%s", (int)n, parent, name);
    return path;
}

static hsize_t product(const hsize_t *dims, int rank) {
    hsize_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    return n;
}

static int tracks_creation_order(herr_t (*getter)(hid_t, unsigned *), hid_t plist) {
    unsigned flags = 0;
    return getter(plist, &flags) >= 0 && (flags & H5P_CRT_ORDER_TRACKED);
}

/* --- references ------------------------------------------------------------------------------ */

/* Offsets of the plain object references (H5T_STD_REF_OBJ) in a fixed-size type, appended to
 * `offsets`; -1 when the type holds references that are not plain ones at fixed places. */
static int reference_offsets(hid_t type, size_t base, size_t *offsets, size_t *count, size_t capacity) {
    int cls = h5.Tget_class(type);
    if (cls == H5T_REFERENCE) {
        if (h5.Tequal(type, *h5.T_STD_REF_OBJ) <= 0 || *count == capacity) return -1;
        offsets[(*count)++] = base;
        return 0;
    }
    if (cls == H5T_COMPOUND) {
        int members = h5.Tget_nmembers(type);
        for (int i = 0; i < members; i++) {
            hid_t member = h5.Tget_member_type(type, (unsigned)i);
            if (member < 0) return -1;
            int result = reference_offsets(member, base + h5.Tget_member_offset(type, (unsigned)i), offsets, count,
                                           capacity);
            h5.Tclose(member);
            if (result < 0) return -1;
        }
        return 0;
    }
    return (h5.Tdetect_class(type, H5T_REFERENCE) != 0 || h5.Tdetect_class(type, H5T_VLEN) != 0) ? -1 : 0;
}

/* Address in the destination of the copy of the source object at `src` (0 and undefined stay). */
static int destination_address(job_t *job, haddr_t src, haddr_t *dst) {
    if (src == 0 || src == HADDR_UNDEF) {
        *dst = src;
        return 0;
    }
    object_entry *entry = map_find(&job->objects, src);
    if (!entry) return DECLINE("a reference to an object that is not copied (address %llu)", (unsigned long long)src);
    if (entry->dst == HADDR_UNDEF) {
        hid_t object = h5.Oopen(job->dst_file, entry->dst_path, H5P_DEFAULT);
        H5O_info2_t info;
        int got = object >= 0 && h5.Oget_info3(object, &info, H5O_INFO_BASIC) >= 0 &&
                  h5.VLnative_token_to_addr(job->dst_file, info.token, &entry->dst) >= 0;
        if (object >= 0) h5.Oclose(object);
        if (!got) return FAIL("cannot find the address of %s in the copy", entry->dst_path);
    }
    *dst = entry->dst;
    return 0;
}

static int write_deferred(job_t *job) {
    for (size_t i = 0; i < job->ndeferred; i++) {
        deferred_attribute *d = &job->deferred[i];
        if (d->vlen) {
            hvl_t *values = d->data;
            for (size_t p = 0; p < d->points; p++) {
                haddr_t *refs = values[p].p;
                for (size_t k = 0; k < values[p].len; k++) {
                    if (destination_address(job, refs[k], &refs[k]) < 0) return -1;
                    job->references++;
                }
            }
        } else {
            for (size_t p = 0; p < d->points; p++) {
                for (size_t k = 0; k < d->noffsets; k++) {
                    haddr_t address;
                    char *at = (char *)d->data + p * d->value_size + d->offsets[k];
                    memcpy(&address, at, sizeof address);
                    if (address != 0) job->references++; /* (as the Python engine counts) */
                    if (destination_address(job, address, &address) < 0) return -1;
                    memcpy(at, &address, sizeof address);
                }
            }
        }
        if (h5.Awrite(d->dst_attr, d->type, d->data) < 0) return FAIL("cannot write a reference attribute");
    }
    return 0;
}

static void free_deferred(job_t *job) {
    for (size_t i = 0; i < job->ndeferred; i++) {
        deferred_attribute *d = &job->deferred[i];
        if (d->vlen && d->data) h5.Treclaim(d->type, d->space, H5P_DEFAULT, d->data);
        free(d->data);
        h5.Aclose(d->dst_attr);
        h5.Tclose(d->type);
        h5.Sclose(d->space);
    }
    free(job->deferred);
}

/* --- attributes ------------------------------------------------------------------------------ */

/* The values of the source attribute `attr` (holding object references) read now and kept with
 * `copy`, the destination's attribute, for write_deferred to write once every object exists and
 * its address is known. `copy` is the deferred entry's from then on (closed here on failure). */
static int defer_references(job_t *job, hid_t attr, hid_t copy, const char *name) {
    hid_t type = h5.Aget_type(attr), space = type < 0 ? -1 : h5.Aget_space(attr);
    hssize_t points = space < 0 ? -1 : h5.Sget_simple_extent_npoints(space);
    size_t size = type < 0 ? 0 : h5.Tget_size(type);
    deferred_attribute d = {.dst_attr = copy, .type = type, .space = space, .points = (size_t)points,
                            .value_size = size};
    int result = -1, read = 0;
    if (points < 0 || !size || !(d.data = calloc((size_t)points ? (size_t)points : 1, size))) {
        FAIL("cannot size attribute %s", name);
        goto done;
    }
    /* The kind of references decided from the type, before any value is read: HDF5 1.12's references
     * (H5R_ref_t) read into memory hold the source file open until each is destroyed, and a declined
     * file left open that way could not be opened again by the Python engine ("file close degree
     * doesn't match", which read as a damaged file). */
    if (h5.Tget_class(type) == H5T_VLEN) {
        hid_t base = h5.Tget_super(type);
        int plain = base >= 0 && h5.Tequal(base, *h5.T_STD_REF_OBJ) > 0;
        if (base >= 0) h5.Tclose(base);
        d.vlen = 1;
        if (!plain) {
            DECLINE("attribute %s holds references other than object references", name);
            goto done;
        }
    } else if (reference_offsets(type, 0, d.offsets, &d.noffsets, sizeof d.offsets / sizeof *d.offsets) < 0) {
        DECLINE("attribute %s holds references other than object references", name);
        goto done;
    }
    if (h5.Aread(attr, type, d.data) < 0) {
        FAIL("cannot read attribute %s", name);
        goto done;
    }
    read = 1;
    if (job->ndeferred == job->deferred_capacity) {
        size_t capacity = job->deferred_capacity ? 2 * job->deferred_capacity : 256;
        deferred_attribute *grown = realloc(job->deferred, capacity * sizeof *grown);
        if (!grown) {
            FAIL("out of memory");
            goto done;
        }
        job->deferred = grown;
        job->deferred_capacity = capacity;
    }
    job->deferred[job->ndeferred++] = d;
    return 0;
done:
    if (read && h5.Tget_class(type) == H5T_VLEN) h5.Treclaim(type, space, H5P_DEFAULT, d.data);
    free(d.data);
    h5.Aclose(copy);
    if (space >= 0) h5.Sclose(space);
    if (type >= 0) h5.Tclose(type);
    return result;
}

/* An attribute that is not plain (attribute_pass's `other`, for copy_attributes): variable-length values
 * (converted through the library's memory form), or object references (created now, written
 * by write_deferred). `attr` stays the caller's. */
static int copy_other_attribute(void *context, hid_t attr, hid_t dst, const char *name) {
    job_t *job = context;
    hid_t type = h5.Aget_type(attr), space = type < 0 ? -1 : h5.Aget_space(attr), copy = -1;
    void *data = NULL;
    int result = -1;
    if (space < 0) {
        FAIL("cannot read attribute %s", name);
        goto done;
    }
    if (h5.Tcommitted(type) != 0) {
        DECLINE("attribute %s has a committed datatype", name);
        goto done;
    }
    copy = h5.Acreate2(dst, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (copy < 0) {
        FAIL("cannot create attribute %s", name);
        goto done;
    }
    job->attributes++;
    if (h5.Sget_simple_extent_type(space) == H5S_NULL) {
        result = 0;
        goto done;
    }
    if (h5.Tdetect_class(type, H5T_REFERENCE) > 0) {
        result = defer_references(job, attr, copy, name);
        copy = -1; /* (the deferred entry's, or closed) */
        goto done;
    }
    hssize_t points = h5.Sget_simple_extent_npoints(space);
    size_t size = h5.Tget_size(type);
    if (points < 0 || !size || !(data = calloc((size_t)points ? (size_t)points : 1, size))) {
        FAIL("cannot size attribute %s", name);
        goto done;
    }
    if (h5.Aread(attr, type, data) < 0) {
        FAIL("cannot read attribute %s", name);
        goto done;
    }
    if (h5.Awrite(copy, type, data) < 0) FAIL("cannot write attribute %s", name);
    else result = 0;
    h5.Treclaim(type, space, H5P_DEFAULT, data);
done:
    free(data);
    if (copy >= 0) h5.Aclose(copy);
    if (space >= 0) h5.Sclose(space);
    if (type >= 0) h5.Tclose(type);
    return result;
}

static int copy_attributes(job_t *job, hid_t src, hid_t dst, hid_t create_plist) {
    int count = h5.Aget_num_attrs(src);
    if (count < 0) return FAIL("cannot count attributes");
    if (!count) return 0;
    /* in creation order when tracked, else in the order the source's header stores them (the Python
     * engine's order; what netCDF lists for an untracked object) */
    int tracked = tracks_creation_order(h5.Pget_attr_creation_order, create_plist);
    int index = tracked ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME, order = tracked ? H5_ITER_INC : H5_ITER_NATIVE;
    /* all of them in one pass (attribute_pass): plain ones as stored bytes, the others by copy_other_attribute */
    attribute_pass pass = {.dst = dst, .other = copy_other_attribute, .other_context = job};
    hsize_t idx = 0;
    herr_t status = h5.Aiterate2(src, index, order, &idx, copy_one_attribute, &pass);
    free(pass.data);
    job->attributes += pass.copied;
    if (status >= 0) return 0;
    if (pass.failed_in_other) return -1;
    if (PyErr_Occurred()) return fail_with_python_error(job, "attributes");
    return FAIL("cannot list the attributes");
}

/* --- NetCDF-4 dimension lengths ------------------------------------------------------------- */

/* The attribute CLASS holds the fixed-length string "DIMENSION_SCALE" (what h5py reads as
 * b"DIMENSION_SCALE", the test the Python engine makes). */
static int is_dimension_scale(hid_t object) {
    if (h5.Aexists(object, "CLASS") <= 0) return 0;
    hid_t attr = h5.Aopen(object, "CLASS", H5P_DEFAULT);
    if (attr < 0) return 0;
    hid_t type = h5.Aget_type(attr), space = h5.Aget_space(attr);
    int yes = 0;
    if (type >= 0 && space >= 0 && h5.Tget_class(type) == H5T_STRING && h5.Tis_variable_str(type) == 0 &&
        h5.Sget_simple_extent_type(space) == H5S_SCALAR) {
        size_t size = h5.Tget_size(type);
        char *text = calloc(size + 1, 1);
        if (text && h5.Aread(attr, type, text) >= 0) yes = strcmp(text, "DIMENSION_SCALE") == 0;
        free(text);
    }
    if (space >= 0) h5.Sclose(space);
    if (type >= 0) h5.Tclose(type);
    h5.Aclose(attr);
    return yes;
}

static hid_t open_by_address(job_t *job, haddr_t address) {
    H5O_token_t token;
    if (h5.VLnative_addr_to_token(job->src_file, address, &token) < 0) return -1;
    return h5.Oopen_by_token(job->src_file, token);
}

/* Extent of axis `axis` of the dataset `object` (0 for a scalar or empty dataspace); -1 on failure. */
static long long extent(hid_t object, int axis) {
    hid_t space = h5.Dget_space(object);
    if (space < 0) return -1;
    hsize_t dims[32];
    int rank = h5.Sget_simple_extent_type(space) == H5S_SIMPLE ? h5.Sget_simple_extent_ndims(space) : 0;
    long long length = 0;
    if (rank > 32 || (rank > 0 && h5.Sget_simple_extent_dims(space, dims, NULL) < 0)) length = -1;
    else if (axis < rank) length = (long long)dims[axis];
    h5.Sclose(space);
    return length;
}

/* A dimension scale's length: its own, or the longest axis it is attached to (REFERENCE_LIST). */
static long long dimension_length(job_t *job, haddr_t address) {
    object_entry *entry = map_find(&job->objects, address);
    if (entry && entry->length >= 0) return entry->length;
    hid_t scale = open_by_address(job, address);
    if (scale < 0 || h5.Iget_type(scale) != H5I_DATASET) {
        if (scale >= 0) h5.Oclose(scale);
        DECLINE("a dimension scale that is not a dataset (address %llu)", (unsigned long long)address);
        return -1;
    }
    long long length = extent(scale, 0);
    if (length >= 0 && is_dimension_scale(scale) && h5.Aexists(scale, "REFERENCE_LIST") > 0) {
        hid_t attr = h5.Aopen(scale, "REFERENCE_LIST", H5P_DEFAULT);
        hid_t type = attr < 0 ? -1 : h5.Aget_type(attr), space = type < 0 ? -1 : h5.Aget_space(attr);
        hid_t second = -1;
        hssize_t points = space < 0 ? -1 : h5.Sget_simple_extent_npoints(space);
        size_t size = type < 0 ? 0 : h5.Tget_size(type);
        char *data = NULL;
        if (points < 0 || h5.Tget_class(type) != H5T_COMPOUND || h5.Tget_nmembers(type) != 2 ||
            (second = h5.Tget_member_type(type, 1)) < 0 ||
            (h5.Tequal(second, *h5.T_NATIVE_INT) <= 0 && h5.Tequal(second, *h5.T_NATIVE_UINT) <= 0) ||
            !(data = calloc((size_t)points + 1, size)) || h5.Aread(attr, type, data) < 0) {
            DECLINE("a REFERENCE_LIST attribute of an unexpected form");
            length = -1;
        } else {
            size_t ref_at = h5.Tget_member_offset(type, 0), axis_at = h5.Tget_member_offset(type, 1);
            for (hssize_t p = 0; p < points && length >= 0; p++) {
                haddr_t target_address;
                int axis; /* (a 4-byte int or unsigned int: either reads the same below 2^31) */
                memcpy(&target_address, data + p * size + ref_at, sizeof target_address);
                memcpy(&axis, data + p * size + axis_at, sizeof axis);
                hid_t target = open_by_address(job, target_address);
                long long along = target < 0 || axis < 0 ? -1 : extent(target, axis);
                if (target >= 0) h5.Oclose(target);
                if (along < 0) {
                    DECLINE("a REFERENCE_LIST entry that cannot be followed");
                    length = -1;
                } else if (along > length) length = along;
            }
        }
        free(data);
        if (second >= 0) h5.Tclose(second);
        if (space >= 0) h5.Sclose(space);
        if (type >= 0) h5.Tclose(type);
        if (attr >= 0) h5.Aclose(attr);
    }
    h5.Oclose(scale);
    if (length < 0) return DECLINE("cannot measure a dimension scale (address %llu)", (unsigned long long)address);
    if (entry) entry->length = length;
    return length;
}

/* Each unlimited axis at its current size: the dataset's own or, if longer, that of the dimension
 * scales on the axis (NetCDF variables may be shorter than an unlimited dimension). */
static int current_extent(job_t *job, hid_t src, haddr_t self, int rank, const hsize_t *maxdims, hsize_t *dims) {
    if (is_dimension_scale(src)) {
        if (maxdims[0] == H5S_UNLIMITED) {
            long long length = dimension_length(job, self);
            if (length < 0) return -1;
            if ((hsize_t)length > dims[0]) dims[0] = (hsize_t)length;
        }
        return 0;
    }
    if (h5.Aexists(src, "DIMENSION_LIST") <= 0) return 0;
    hid_t attr = h5.Aopen(src, "DIMENSION_LIST", H5P_DEFAULT);
    hid_t type = attr < 0 ? -1 : h5.Aget_type(attr), space = type < 0 ? -1 : h5.Aget_space(attr);
    hssize_t points = space < 0 ? -1 : h5.Sget_simple_extent_npoints(space);
    hvl_t *lists = points < 0 ? NULL : calloc((size_t)points + 1, sizeof *lists);
    int result = 0, read = 0;
    if (!lists || h5.Tget_class(type) != H5T_VLEN || h5.Aread(attr, type, lists) < 0) {
        result = DECLINE("a DIMENSION_LIST attribute of an unexpected form");
    } else {
        read = 1;
        for (hssize_t axis = 0; axis < points && axis < rank && result == 0; axis++) {
            if (maxdims[axis] != H5S_UNLIMITED) continue;
            haddr_t *refs = lists[axis].p;
            for (size_t k = 0; k < lists[axis].len && result == 0; k++) {
                if (!refs[k]) continue;
                long long length = dimension_length(job, refs[k]);
                if (length < 0) result = -1;
                else if ((hsize_t)length > dims[axis]) dims[axis] = (hsize_t)length;
            }
        }
    }
    if (read) h5.Treclaim(type, space, H5P_DEFAULT, lists);
    free(lists);
    if (space >= 0) h5.Sclose(space);
    if (type >= 0) h5.Tclose(type);
    if (attr >= 0) h5.Aclose(attr);
    return result;
}

/* --- datasets -------------------------------------------------------------------------------- */

/* Decoded data copied in blocks of whole chunks of ~block_bytes (the rule of _blocks in
 * repack_hdf5.py), with the file type as memory type: the values' bytes, unconverted. */
static int copy_decoded(job_t *job, hid_t src, hid_t dst, hid_t type, int rank, const hsize_t *dims,
                        const hsize_t *chunks, const char *path) {
    size_t itemsize = h5.Tget_size(type);
    hsize_t block[32], start[32], count[32];
    for (int i = 0; i < rank; i++) block[i] = chunks ? chunks[i] : dims[i];
    for (int axis = rank - 1; axis >= 0; axis--) {
        hsize_t unit = chunks ? chunks[axis] : dims[axis];
        hsize_t others = (block[axis] ? product(block, rank) / block[axis] : 0) * itemsize;
        hsize_t bytes = others * unit, whole = (hsize_t)job->block_bytes / (bytes ? bytes : 1);
        if (whole < 1) whole = 1;
        block[axis] = unit * whole < dims[axis] ? unit * whole : dims[axis];
        if (block[axis] < dims[axis]) break;
    }
    for (int i = 0; i < rank; i++) {
        if (!block[i]) block[i] = 1;
        start[i] = 0;
    }
    void *buffer = malloc((size_t)product(block, rank) * itemsize);
    if (!buffer) return FAIL("out of memory for a block of %s", path);
    int result = 0;
    for (;;) {
        for (int i = 0; i < rank; i++) count[i] = dims[i] - start[i] < block[i] ? dims[i] - start[i] : block[i];
        hid_t memory = h5.Screate_simple(rank, count, NULL);
        hid_t from = h5.Dget_space(src), to = h5.Dget_space(dst);
        if (memory < 0 || from < 0 || to < 0 ||
            h5.Sselect_hyperslab(from, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            h5.Sselect_hyperslab(to, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
            result = FAIL("cannot select a block of %s", path);
        else if (h5.Dread(src, type, memory, from, H5P_DEFAULT, buffer) < 0)
            result = FAIL("cannot read %s", path);
        else if (h5.Dwrite(dst, type, memory, to, H5P_DEFAULT, buffer) < 0)
            result = FAIL("cannot write %s", path);
        if (memory >= 0) h5.Sclose(memory);
        if (from >= 0) h5.Sclose(from);
        if (to >= 0) h5.Sclose(to);
        if (result < 0) break;
        int axis = rank - 1; /* next block start, last axis fastest */
        while (axis >= 0) {
            start[axis] += block[axis];
            if (start[axis] < dims[axis]) break;
            start[axis] = 0;
            axis--;
        }
        if (axis < 0) break;
    }
    free(buffer);
    if (result == 0 && job->progress != Py_None) {
        PyObject *r = PyObject_CallFunction(job->progress, "K", (unsigned long long)h5.Dget_storage_size(src));
        if (!r) return stop(job, PYTHON_ERROR, "progress");
        Py_DECREF(r);
    }
    return result;
}

static PyObject *shape_list(const hsize_t *dims, int rank) {
    PyObject *list = PyList_New(rank);
    for (int i = 0; list && i < rank; i++) {
        /* PyList_SetItem steals the reference, as the stable ABI's only list setter */
        if (PyList_SetItem(list, i, PyLong_FromUnsignedLongLong(dims[i])) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static int copy_dataset(job_t *job, hid_t src, haddr_t self, hid_t dst_group, const char *name, const char *path,
                        hid_t lcpl) {
    hid_t dcpl = h5.Dget_create_plist(src), space = h5.Dget_space(src), type = h5.Dget_type(src);
    hid_t new_space = -1, dst = -1;
    int result = -1;
    if (dcpl < 0 || space < 0 || type < 0) {
        FAIL("cannot read the description of %s", path);
        goto done;
    }
    int layout = h5.Pget_layout(dcpl), kind = h5.Sget_simple_extent_type(space);
    if (layout == H5D_VIRTUAL) {
        DECLINE("%s is a virtual dataset", path);
        goto done;
    }
    if (!fastcopy_plain_type(type)) {
        DECLINE("%s has a variable-length, reference or committed datatype", path);
        goto done;
    }
    hsize_t dims[32], maxdims[32], shape[32], newmax[32], chunks[32], newchunks[32];
    int rank = kind == H5S_SIMPLE ? h5.Sget_simple_extent_ndims(space) : 0;
    if (rank < 0 || rank > 32 || (rank && h5.Sget_simple_extent_dims(space, dims, maxdims) < 0)) {
        FAIL("cannot read the shape of %s", path);
        goto done;
    }
    if (layout == H5D_COMPACT) {
        if (h5.Pset_layout(dcpl, H5D_CONTIGUOUS) < 0 || append_path(job, job->compact, path) < 0) {
            FAIL("cannot change the layout of %s", path);
            goto done;
        }
    }
    int unlimited = 0;
    for (int i = 0; i < rank; i++) {
        shape[i] = dims[i];
        newmax[i] = maxdims[i];
        unlimited |= maxdims[i] == H5S_UNLIMITED;
    }
    if (unlimited) {
        if (job->netcdf4 && current_extent(job, src, self, rank, maxdims, shape) < 0) goto done;
        int empty = 0;
        for (int i = 0; i < rank; i++) empty |= shape[i] == 0;
        if (!empty) {
            for (int i = 0; i < rank; i++) newmax[i] = shape[i];
            if (append_path(job, job->fixed, path) < 0) goto done;
        } else if (append_path(job, job->kept, path) < 0) goto done;
    }
    int chunks_changed = 0;
    if (layout == H5D_CHUNKED && kind == H5S_SIMPLE) {
        if (h5.Pget_chunk(dcpl, rank, chunks) != rank) {
            FAIL("cannot read the chunk shape of %s", path);
            goto done;
        }
        for (int i = 0; i < rank; i++) {
            /* a fixed dimension cannot be smaller than its chunk: shrink the chunk to fit */
            newchunks[i] = newmax[i] != H5S_UNLIMITED && chunks[i] > newmax[i] ? newmax[i] : chunks[i];
            chunks_changed |= newchunks[i] != chunks[i];
        }
        if (chunks_changed && h5.Pset_chunk(dcpl, rank, newchunks) < 0) {
            FAIL("cannot set the chunk shape of %s", path);
            goto done;
        }
        if (chunks_changed && product(dims, rank)) {
            PyObject *change = Py_BuildValue("{s:N,s:N}", "from", shape_list(chunks, rank), "to",
                                             shape_list(newchunks, rank));
            PyObject *key = PyUnicode_DecodeUTF8(path, (Py_ssize_t)strlen(path), "surrogateescape");
            int bad = !change || !key || PyDict_SetItem(job->rechunked, key, change) < 0;
            Py_XDECREF(change);
            Py_XDECREF(key);
            if (bad) {
                job->status = PYTHON_ERROR;
                goto done;
            }
        }
    }
    /* Readers that list attributes in creation order (netCDF) list an untracked object's in the order its
     * header stores them; a new header stores them where they fit, not in the order written. Tracked in the
     * copy, that order is the source's (copied in its stored order). */
    int attrs_tracked = tracks_creation_order(h5.Pget_attr_creation_order, dcpl);
    if (!attrs_tracked && h5.Aget_num_attrs(src) > 1 && h5.Pset_attr_creation_order(dcpl, H5P_CRT_ORDER_TRACKED) < 0) {
        FAIL("cannot describe %s in the copy", path);
        goto done;
    }
    new_space = kind == H5S_SIMPLE ? h5.Screate_simple(rank, shape, newmax) : h5.Scopy(space);
    if (new_space < 0 || (dst = h5.Dcreate2(dst_group, name, type, new_space, lcpl, dcpl, H5P_DEFAULT)) < 0) {
        FAIL("cannot create %s in the copy", path);
        goto done;
    }
    hid_t src_dcpl = attrs_tracked ? dcpl : h5.Dget_create_plist(src);
    int copied = src_dcpl < 0 ? FAIL("cannot read the description of %s", path) : copy_attributes(job, src, dst, src_dcpl);
    if (src_dcpl >= 0 && src_dcpl != dcpl) h5.Pclose(src_dcpl);
    if (copied < 0) goto done;
    if (kind == H5S_SCALAR) {
        size_t size = h5.Tget_size(type);
        void *value = malloc(size ? size : 1);
        if (!value || h5.Dread(src, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, value) < 0 ||
            h5.Dwrite(dst, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, value) < 0)
            FAIL("cannot copy the value of %s", path);
        else result = 0;
        free(value);
    } else if (kind != H5S_SIMPLE || product(dims, rank) == 0) {
        result = 0;
    } else if (layout == H5D_CHUNKED && !chunks_changed) {
        int status = fastcopy_stored_chunks(src, dst, job->src_fd, rank, job->span_bytes, job->max_gap,
                                            job->progress, &job->chunks_raw, &(unsigned long long){0});
        if (status < 0) {
            fail_with_python_error(job, path);
            goto done;
        }
        result = status == 1 ? copy_decoded(job, src, dst, type, rank, dims, newchunks, path) : 0;
    } else {
        result = copy_decoded(job, src, dst, type, rank, dims, layout == H5D_CHUNKED ? newchunks : NULL, path);
    }
done:
    if (dst >= 0) h5.Dclose(dst);
    if (new_space >= 0) h5.Sclose(new_space);
    if (type >= 0) h5.Tclose(type);
    if (space >= 0) h5.Sclose(space);
    if (dcpl >= 0) h5.Pclose(dcpl);
    return result;
}

/* --- groups ---------------------------------------------------------------------------------- */

typedef struct {
    char *name;
    int link_type, cset;
    haddr_t address;
} member;

typedef struct {
    member *items;
    size_t count, capacity;
    hid_t file;
    int failed;
} member_list;

static herr_t collect_member(hid_t group, const char *name, const H5L_info2_t *info, void *data) {
    member_list *list = data;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 64;
        member *items = realloc(list->items, capacity * sizeof *items);
        if (!items) return -1;
        list->items = items;
        list->capacity = capacity;
    }
    member *item = &list->items[list->count];
    item->name = strdup(name);
    item->link_type = info->type;
    item->cset = info->cset;
    item->address = HADDR_UNDEF;
    if (!item->name) return -1;
    list->count++;
    if (info->type == H5L_TYPE_HARD && h5.VLnative_token_to_addr(list->file, info->u.token, &item->address) < 0)
        return -1;
    return 0;
}

/* Creation properties for the copy of a group whose own are `source_gcpl`: the source's creation-order
 * tracking and attribute storage thresholds in a new list, as h5repack does. Never the source's list itself:
 * H5Gget_create_plist puts the group's link-info message in it, with the addresses of the group's fractal
 * heap and B-trees in the SOURCE file, and H5Gcreate2 given that list in another file uses them there (a
 * group with more than 8 links tracked in creation order, as written by HDF5 1.8+ with creation order:
 * ICESat-2 and GPM products; "wrong fractal heap header signature" or "address of object past end of
 * allocation" at the next link made in the copy). */
static hid_t group_create_plist(hid_t source_gcpl) {
    hid_t gcpl = h5.Pcreate(*h5.P_CLS_GROUP_CREATE);
    unsigned links = 0, attrs = 0, max_compact = 0, min_dense = 0;
    if (gcpl < 0 || h5.Pget_link_creation_order(source_gcpl, &links) < 0 ||
        h5.Pget_attr_creation_order(source_gcpl, &attrs) < 0 ||
        h5.Pget_attr_phase_change(source_gcpl, &max_compact, &min_dense) < 0 ||
        h5.Pset_link_creation_order(gcpl, links) < 0 || h5.Pset_attr_creation_order(gcpl, attrs) < 0 ||
        h5.Pset_attr_phase_change(gcpl, max_compact, min_dense) < 0) {
        if (gcpl >= 0) h5.Pclose(gcpl);
        return -1;
    }
    return gcpl;
}

/* (name, link type, object address) in creation order when the group tracks it, else by name. */
static int list_members(job_t *job, hid_t group, member_list *list) {
    hid_t gcpl = h5.Gget_create_plist(group);
    if (gcpl < 0) return FAIL("cannot read a group's creation properties");
    int index = tracks_creation_order(h5.Pget_link_creation_order, gcpl) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    h5.Pclose(gcpl);
    list->file = job->src_file;
    if (h5.Literate2(group, index, H5_ITER_INC, NULL, collect_member, list) < 0)
        return FAIL("cannot list the members of a group");
    return 0;
}

static void free_members(member_list *list) {
    for (size_t i = 0; i < list->count; i++) free(list->items[i].name);
    free(list->items);
}

/* --- what must change, decided from the source before anything is written ------------------ */

/* Whether the dataset must be made anew: COMPACT (-> CONTIGUOUS) or with an unlimited axis (-> fixed),
 * the rule of the Python engine's _plan; 0: H5Ocopy's copy is right as it is (its stored bytes and
 * chunks go into `entry`); -1: declined (what the Python engine does by other means) or failed. */
static int dataset_must_change(job_t *job, hid_t dset, const char *path, object_entry *entry) {
    hid_t dcpl = h5.Dget_create_plist(dset), space = h5.Dget_space(dset), type = h5.Dget_type(dset);
    int result = -1, fill = 0;
    if (dcpl < 0 || space < 0 || type < 0 || h5.Pfill_value_defined(dcpl, &fill) < 0) {
        FAIL("cannot read the description of %s", path);
        goto done;
    }
    if (h5.Tdetect_class(type, H5T_REFERENCE) != 0) { /* H5Ocopy would not point them at the copies */
        DECLINE("%s holds references", path);
        goto done;
    }
    if (h5.Tcommitted(type) != 0) {
        DECLINE("%s has a committed datatype", path);
        goto done;
    }
    if (fill == H5D_FILL_VALUE_USER_DEFINED && !fastcopy_plain_type(type)) {
        /* (H5Ocopy copies a variable-length fill value's heap address unchanged) */
        DECLINE("%s has a variable-length fill value", path);
        goto done;
    }
    int layout = h5.Pget_layout(dcpl), kind = h5.Sget_simple_extent_type(space);
    if (layout == H5D_VIRTUAL || h5.Pget_external_count(dcpl) > 0) { /* (the Python engine decides) */
        DECLINE("%s is a virtual dataset or has external raw-data files", path);
        goto done;
    }
    result = 0;
    if (layout == H5D_VIRTUAL || kind == H5S_NULL) {
        result = 0;
    } else if (kind == H5S_SCALAR || h5.Pget_external_count(dcpl) > 0) {
        result = layout == H5D_COMPACT && kind == H5S_SCALAR;
    } else if (layout == H5D_COMPACT) {
        result = 1;
    } else {
        hsize_t dims[32], maxdims[32];
        int rank = h5.Sget_simple_extent_ndims(space);
        if (rank < 0 || rank > 32 || h5.Sget_simple_extent_dims(space, dims, maxdims) < 0) {
            result = FAIL("cannot read the shape of %s", path);
            goto done;
        }
        for (int i = 0; i < rank; i++) result |= maxdims[i] == H5S_UNLIMITED;
    }
    if (result == 1) {
        /* H5Dcreate needs every mandatory filter: without its plugin the dataset cannot be made anew */
        int filters = h5.Pget_nfilters(dcpl);
        for (int i = 0; i < filters; i++) {
            size_t none = 0;
            int id = h5.Pget_filter2(dcpl, (unsigned)i, NULL, &none, NULL, 0, NULL, NULL);
            if (id < 0 || h5.Zfilter_avail(id) <= 0) {
                result = DECLINE("%s: its filter %d is not installed here", path, id);
                goto done;
            }
        }
    }
    if (result == 0) {
        hsize_t chunks = 0;
        entry->bytes = h5.Dget_storage_size(dset);
        if (layout == H5D_CHUNKED && h5.Dget_num_chunks(dset, H5S_ALL, &chunks) < 0) {
            result = FAIL("cannot count the chunks of %s", path);
            goto done;
        }
        entry->chunks = chunks;
    }
done:
    if (type >= 0) h5.Tclose(type);
    if (space >= 0) h5.Sclose(space);
    if (dcpl >= 0) h5.Pclose(dcpl);
    return result;
}

/* --- walking groups without recursion --------------------------------------------------------
 *
 * The nesting depth of groups is the uploader's: a recursive walk used one C stack frame per level, and
 * groups nested 2,000 deep crashed the native engine (SIGSEGV) under a 1 MiB stack (Lambda's and
 * thread stacks are that small or smaller), which the guard then called a damaged file. Each walk keeps
 * its own stack of open groups (one frame per level, on the heap). */

#define MAX_H5OCOPY_DEPTH 32 /* levels of groups one H5Ocopy may copy (below) */

typedef struct {
    member_list list;
    size_t next;      /* the next member to look at */
    hid_t group;      /* the source group (closed when the frame is popped, unless it is the caller's) */
    hid_t copy;       /* copy_members: the destination group (closed likewise) */
    char *path;       /* owned, or the caller's for the first frame */
    haddr_t address;  /* scan_members: the group's address (its map entry) */
    int changes;      /* scan_members: something under the group changes */
    size_t height;    /* scan_members: levels of groups under it (0: no subgroup) */
    unsigned long long bytes, chunks; /* scan_members: stored bytes and chunks of what does not change */
} walk_frame;

typedef struct {
    walk_frame *frames;
    size_t depth, capacity;
} walk_stack;

/* A new frame for `group` (its members listed), which then owns `group`, `copy` and `path`; or NULL (the
 * job failed; nothing pushed, they stay the caller's). */
static walk_frame *walk_push(job_t *job, walk_stack *stack, hid_t group, hid_t copy, char *path, haddr_t address) {
    if (stack->depth == stack->capacity) {
        size_t capacity = stack->capacity ? 2 * stack->capacity : 64;
        walk_frame *frames = realloc(stack->frames, capacity * sizeof *frames);
        if (!frames) {
            FAIL("out of memory");
            return NULL;
        }
        stack->frames = frames;
        stack->capacity = capacity;
    }
    walk_frame *frame = &stack->frames[stack->depth];
    memset(frame, 0, sizeof *frame);
    if (list_members(job, group, &frame->list) < 0) {
        free_members(&frame->list);
        return NULL;
    }
    frame->group = group;
    frame->copy = copy;
    frame->path = path;
    frame->address = address;
    stack->depth++;
    return frame;
}

/* The top frame closed and freed (the first frame's group, copy and path are the caller's). */
static void walk_pop(walk_stack *stack) {
    walk_frame *frame = &stack->frames[--stack->depth];
    free_members(&frame->list);
    if (stack->depth > 0) {
        if (frame->copy >= 0) h5.Gclose(frame->copy);
        if (frame->group >= 0) h5.Oclose(frame->group);
        free(frame->path);
    }
}

/* The frame whose next member is due, after popping the groups walked to the end (each parent then
 * moves past the group just walked); NULL once the whole walk is done. */
static walk_frame *walk_next(walk_stack *stack) {
    while (stack->depth) {
        walk_frame *frame = &stack->frames[stack->depth - 1];
        if (frame->next < frame->list.count) return frame;
        walk_pop(stack);
        if (stack->depth) stack->frames[stack->depth - 1].next++;
    }
    return NULL;
}

static void walk_free(walk_stack *stack) {
    while (stack->depth) walk_pop(stack);
    free(stack->frames);
}

/* Every object under `group` entered in the address map with its path (the copy has the same
 * paths) and what must change; a group changes when anything under it does. Declined: links other
 * than hard ones, an object linked twice, a committed datatype (the Python engine's cases). */
static int scan_members(job_t *job, hid_t group, const char *path, int *changes, unsigned long long *bytes,
                        unsigned long long *chunks) {
    walk_stack stack = {0};
    int result = walk_push(job, &stack, group, -1, (char *)path, HADDR_UNDEF) ? 0 : -1;
    while (result == 0 && stack.depth) {
        walk_frame *frame = &stack.frames[stack.depth - 1];
        if (frame->next == frame->list.count) { /* the group is done: its entry, then its parent's sums */
            int sub = frame->changes;
            unsigned long long sub_bytes = frame->bytes, sub_chunks = frame->chunks;
            haddr_t address = frame->address;
            size_t height = frame->height + 1;
            walk_pop(&stack);
            if (!stack.depth) {
                *changes |= sub;
                *bytes += sub_bytes;
                *chunks += sub_chunks;
                break;
            }
            object_entry *entry = map_find(&job->objects, address);
            /* H5Ocopy recurses over the depth of what it copies (6 C frames per level in HDF5 2.0: groups
             * nested 2,000 deep crashed it under a 1 MiB stack): a deeper subtree is walked instead. */
            entry->change = sub || height > MAX_H5OCOPY_DEPTH;
            entry->bytes = sub_bytes;
            entry->chunks = sub_chunks;
            walk_frame *parent = &stack.frames[stack.depth - 1];
            if (height > parent->height) parent->height = height;
            parent->changes |= entry->change;
            if (!entry->change) {
                parent->bytes += entry->bytes;
                parent->chunks += entry->chunks;
            }
            parent->next++;
            continue;
        }
        member *item = &frame->list.items[frame->next];
        char *child = join(frame->path, item->name);
        H5O_info2_t info;
        hid_t object = -1;
        if (!child) result = FAIL("out of memory");
        else if (item->link_type != H5L_TYPE_HARD) result = DECLINE("%s is a soft, external or user-defined link", child);
        else if (map_find(&job->objects, item->address)) result = DECLINE("%s: a second link to one object", child);
        else if (!map_add(&job->objects, item->address, child)) result = FAIL("out of memory");
        else if ((object = h5.Oopen(frame->group, item->name, H5P_DEFAULT)) < 0 ||
                 h5.Oget_info3(object, &info, H5O_INFO_BASIC) < 0)
            result = FAIL("cannot open %s", child);
        else if (info.rc > 1) result = DECLINE("%s: an object with more than one link", child);
        else if (info.type == H5O_TYPE_GROUP) {
            job->groups++;
            if (walk_push(job, &stack, object, -1, child, item->address)) continue; /* (the frame owns both now) */
            result = -1; /* (nothing was pushed: closed and freed below) */
        } else if (info.type == H5O_TYPE_DATASET) {
            job->datasets++;
            object_entry *entry = map_find(&job->objects, item->address);
            int change = dataset_must_change(job, object, child, entry);
            if (change < 0) result = -1;
            else entry->change = change;
        } else {
            result = DECLINE("%s is a committed datatype", child);
        }
        if (result == 0) {
            object_entry *entry = map_find(&job->objects, item->address);
            frame->changes |= entry->change;
            if (!entry->change) {
                frame->bytes += entry->bytes;
                frame->chunks += entry->chunks;
            }
            frame->next++;
        }
        if (object >= 0) h5.Oclose(object);
        free(child);
    }
    walk_free(&stack);
    return result;
}

/* --- groups and their members ---------------------------------------------------------------- */

/* The attributes holding references of `src` and of everything under it (copied by one H5Ocopy,
 * which leaves them pointing at the source's objects): deferred, to be pointed at the copies. */
typedef struct {
    job_t *job;
    const char *path;
    hid_t dst;
} reference_pass;

static herr_t defer_one_attribute(hid_t location, const char *name, const void *info, void *op_data) {
    (void)info;
    reference_pass *pass = op_data;
    job_t *job = pass->job;
    hid_t attr = h5.Aopen(location, name, H5P_DEFAULT);
    hid_t type = attr < 0 ? -1 : h5.Aget_type(attr);
    int result = 0;
    if (type < 0) result = FAIL("cannot read attribute %s of %s", name, pass->path);
    else if (h5.Tdetect_class(type, H5T_REFERENCE) > 0) {
        if (pass->dst < 0) pass->dst = h5.Oopen(job->dst_file, pass->path, H5P_DEFAULT);
        hid_t copy = pass->dst < 0 ? -1 : h5.Aopen(pass->dst, name, H5P_DEFAULT);
        if (copy < 0) result = FAIL("cannot open attribute %s of %s in the copy", name, pass->path);
        else result = defer_references(job, attr, copy, name);
    }
    if (type >= 0) h5.Tclose(type);
    if (attr >= 0) h5.Aclose(attr);
    return result;
}

/* The reference-holding attributes of one object (deferred: see defer_references). */
static int defer_object_references(job_t *job, hid_t object, const char *path) {
    int count = h5.Aget_num_attrs(object);
    if (count < 0) return FAIL("cannot count the attributes of %s", path);
    int result = 0;
    if (count) { /* one pass (H5Aiterate2): by index costs the square of their number in dense storage */
        reference_pass pass = {.job = job, .path = path, .dst = -1};
        hsize_t idx = 0;
        if (h5.Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &idx, defer_one_attribute, &pass) < 0)
            result = job->status == OK ? FAIL("cannot list the attributes of %s", path) : -1;
        if (pass.dst >= 0) h5.Oclose(pass.dst);
    }
    return result;
}

/* `src` (copied by H5Ocopy with everything under it) and every object under it, depth first: their
 * reference-holding attributes deferred. */
static int defer_copied_references(job_t *job, hid_t src, const char *path) {
    int result = defer_object_references(job, src, path);
    if (result < 0 || h5.Iget_type(src) != H5I_GROUP) return result;
    walk_stack stack = {0};
    if (!walk_push(job, &stack, src, -1, (char *)path, HADDR_UNDEF)) return -1;
    walk_frame *frame;
    while (result == 0 && (frame = walk_next(&stack))) {
        const char *name = frame->list.items[frame->next].name;
        char *child = join(frame->path, name);
        hid_t object = child ? h5.Oopen(frame->group, name, H5P_DEFAULT) : -1;
        if (object < 0) result = FAIL("cannot open %s", child ? child : "a member");
        else result = defer_object_references(job, object, child);
        if (result == 0 && h5.Iget_type(object) == H5I_GROUP) {
            if (walk_push(job, &stack, object, -1, child, HADDR_UNDEF)) continue; /* (the frame owns both now) */
            result = -1;
        }
        if (result == 0) frame->next++;
        if (object >= 0) h5.Oclose(object);
        free(child);
    }
    walk_free(&stack);
    return result;
}

/* A link creation property list keeping the link name's character set (H5P_DEFAULT for ASCII). */
static hid_t link_create_plist(int cset) {
    if (!cset) return H5P_DEFAULT;
    hid_t lcpl = h5.Pcreate(*h5.P_CLS_LINK_CREATE);
    if (lcpl >= 0 && h5.Pset_char_encoding(lcpl, cset) < 0) {
        h5.Pclose(lcpl);
        return -1;
    }
    return lcpl;
}

/* The members of `src_group` in its link order: what does not change copied by one H5Ocopy each
 * (a whole subtree at once), groups holding something that changes made with their creation
 * properties and attributes and walked (their members next, depth first), datasets that change made
 * anew (copy_dataset). */
static int copy_members(job_t *job, hid_t src_group, hid_t dst_group, const char *dst_name) {
    walk_stack stack = {0};
    int result = walk_push(job, &stack, src_group, dst_group, (char *)dst_name, HADDR_UNDEF) ? 0 : -1;
    walk_frame *frame;
    while (result == 0 && (frame = walk_next(&stack))) {
        member *item = &frame->list.items[frame->next];
        char *path = join(frame->path, item->name);
        object_entry *entry = map_find(&job->objects, item->address);
        hid_t lcpl = link_create_plist(item->cset), object = -1;
        int entered = 0;
        if (!path || !entry || lcpl < 0) {
            result = FAIL("cannot copy %s", path ? path : "a member");
        } else if (!entry->change) {
            if (h5.Ocopy(frame->group, item->name, frame->copy, item->name, job->copy_plist, lcpl) < 0) {
                result = FAIL("cannot copy %s", path);
            } else {
                job->chunks_raw += entry->chunks;
                if ((object = h5.Oopen(frame->group, item->name, H5P_DEFAULT)) < 0) result = FAIL("cannot open %s", path);
                else result = defer_copied_references(job, object, path);
                if (result == 0 && entry->bytes && job->progress != Py_None) {
                    PyObject *r = PyObject_CallFunction(job->progress, "K", entry->bytes);
                    if (!r) result = stop(job, PYTHON_ERROR, "progress");
                    Py_XDECREF(r);
                }
            }
        } else if ((object = h5.Oopen(frame->group, item->name, H5P_DEFAULT)) < 0) {
            result = FAIL("cannot open %s", path);
        } else if (h5.Iget_type(object) == H5I_GROUP) {
            hid_t gcpl = h5.Gget_create_plist(object), new_gcpl = gcpl < 0 ? -1 : group_create_plist(gcpl);
            hid_t copy = new_gcpl < 0 ? -1 : h5.Gcreate2(frame->copy, item->name, lcpl, new_gcpl, H5P_DEFAULT);
            if (new_gcpl >= 0) h5.Pclose(new_gcpl);
            if (copy < 0) result = FAIL("cannot create group %s in the copy", path);
            else {
                result = copy_attributes(job, object, copy, gcpl);
                /* its members next (the frame owns the group, its copy and the path) */
                if (result == 0 && walk_push(job, &stack, object, copy, path, HADDR_UNDEF)) entered = 1;
                else {
                    result = -1;
                    h5.Gclose(copy);
                }
            }
            if (gcpl >= 0) h5.Pclose(gcpl);
        } else {
            result = copy_dataset(job, object, item->address, frame->copy, item->name, path, lcpl);
        }
        if (lcpl > 0) h5.Pclose(lcpl);
        if (entered) continue;
        if (result == 0) frame->next++;
        if (object >= 0) h5.Oclose(object);
        free(path);
    }
    walk_free(&stack);
    return result;
}

/* The NAME netCDF-4 gives a dimension scale that is not also a variable ("This is a netCDF dimension
 * but not a netCDF variable" and its length): netCDF-4.0 files carry no other marker (sniff.py's
 * NETCDF_DIMENSION_NAME). */
static int netcdf_dimension_name(hid_t object) {
    static const char prefix[] = "This is a netCDF dimension but not a netCDF variable";
    if (h5.Aexists(object, "NAME") <= 0) return 0;
    hid_t attr = h5.Aopen(object, "NAME", H5P_DEFAULT);
    hid_t type = attr < 0 ? -1 : h5.Aget_type(attr), space = type < 0 ? -1 : h5.Aget_space(attr);
    int yes = 0;
    if (space >= 0 && h5.Tget_class(type) == H5T_STRING && h5.Tis_variable_str(type) == 0 &&
        h5.Sget_simple_extent_type(space) == H5S_SCALAR) {
        size_t size = h5.Tget_size(type);
        char *text = calloc(size + 1, 1);
        if (text && h5.Aread(attr, type, text) >= 0) yes = strncmp(text, prefix, sizeof prefix - 1) == 0;
        free(text);
    }
    if (space >= 0) h5.Sclose(space);
    if (type >= 0) h5.Tclose(type);
    if (attr >= 0) h5.Aclose(attr);
    return yes;
}

/* NetCDF-4's markers: _NCProperties on the root group, or the netCDF attributes on a root dataset
 * (the test of is_netcdf4 in formats/sniff.py). */
static int netcdf4_markers(job_t *job, hid_t root) {
    if (h5.Aexists(root, "_NCProperties") > 0) return 1;
    member_list list = {0};
    int found = 0;
    if (list_members(job, root, &list) == 0) {
        for (size_t i = 0; i < list.count && !found; i++) {
            if (list.items[i].link_type != H5L_TYPE_HARD) continue;
            hid_t object = h5.Oopen(root, list.items[i].name, H5P_DEFAULT);
            if (object < 0) continue;
            if (h5.Iget_type(object) == H5I_DATASET)
                found = h5.Aexists(object, "_Netcdf4Dimid") > 0 || h5.Aexists(object, "_Netcdf4Coordinates") > 0 ||
                        netcdf_dimension_name(object);
            h5.Oclose(object);
        }
    }
    free_members(&list);
    return found;
}

/* --- the file -------------------------------------------------------------------------------- */

static hid_t create_destination(job_t *job, const char *path, hid_t root, hsize_t page_size, size_t cache_bytes) {
    hid_t fcpl = h5.Pcreate(*h5.P_CLS_FILE_CREATE), fapl = h5.Pcreate(*h5.P_CLS_FILE_ACCESS);
    hid_t root_gcpl = h5.Gget_create_plist(root), file = -1;
    unsigned links = 0, attrs = 0;
    if (fcpl < 0 || fapl < 0 || root_gcpl < 0 || h5.Pget_link_creation_order(root_gcpl, &links) < 0 ||
        h5.Pget_attr_creation_order(root_gcpl, &attrs) < 0 || h5.Pset_link_creation_order(fcpl, links) < 0 ||
        h5.Pset_attr_creation_order(fcpl, attrs) < 0 ||
        h5.Pset_file_space_strategy(fcpl, H5F_FSPACE_STRATEGY_PAGE, true, 1) < 0 ||
        h5.Pset_file_space_page_size(fcpl, page_size) < 0 ||
        h5.Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0 ||
        h5.Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        FAIL("cannot set up the copy's creation properties");
        goto done;
    }
    if (cache_bytes) { /* the metadata cache size the Python engine sets (METADATA_CACHE_BYTES) */
        mdc_config_t config;
        memset(&config, 0, sizeof config);
        config.head.version = H5AC_CURR_CACHE_CONFIG_VERSION;
        if (h5.Pget_mdc_config(fapl, &config) < 0) {
            FAIL("cannot read the metadata cache configuration");
            goto done;
        }
        config.head.set_initial_size = true;
        config.head.initial_size = cache_bytes;
        config.head.min_size = cache_bytes / 2;
        config.head.max_size = 2 * cache_bytes;
        if (h5.Pset_mdc_config(fapl, &config) < 0) {
            FAIL("cannot set the metadata cache configuration");
            goto done;
        }
    }
    file = h5.Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    if (file < 0) FAIL("cannot create %s", path);
done:
    if (root_gcpl >= 0) h5.Pclose(root_gcpl);
    if (fcpl >= 0) h5.Pclose(fcpl);
    if (fapl >= 0) h5.Pclose(fapl);
    return file;
}

static hid_t open_source(job_t *job, const char *path, size_t chunk_cache_bytes, size_t chunk_cache_slots) {
    hid_t fapl = h5.Pcreate(*h5.P_CLS_FILE_ACCESS), file = -1;
    if (fapl < 0 || h5.Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        h5.Pset_cache(fapl, 0, chunk_cache_slots, chunk_cache_bytes, 0.75) < 0)
        FAIL("cannot set up access to %s", path);
    else if ((file = h5.Fopen(path, H5F_ACC_RDONLY, fapl)) < 0)
        FAIL("cannot open %s as HDF5", path);
    if (fapl >= 0) h5.Pclose(fapl);
    return file;
}

static PyObject *summary(job_t *job) {
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:O,s:O,s:O,s:O}", "groups", job->groups, "datasets", job->datasets,
                         "attributes", job->attributes, "chunks_copied_raw", job->chunks_raw,
                         "references_rewritten", job->references, "compact_to_contiguous", job->compact,
                         "unlimited_fixed", job->fixed, "unlimited_kept", job->kept, "rechunked", job->rechunked);
}

static PyObject *native_repack_file(PyObject *self, PyObject *args) {
    const char *src_path, *dst_path;
    unsigned long long page_size;
    Py_ssize_t span_bytes, max_gap, block_bytes, cache_bytes, chunk_cache_bytes, chunk_cache_slots;
    PyObject *created, *progress;
    if (!PyArg_ParseTuple(args, "yyK(nnnnnnO)O", &src_path, &dst_path, &page_size, &span_bytes, &max_gap,
                          &block_bytes, &cache_bytes, &chunk_cache_bytes, &chunk_cache_slots, &created, &progress))
        return NULL;
    job_t job_storage = {.src_file = -1, .dst_file = -1, .copy_plist = -1, .src_fd = -1, .progress = progress,
                         .span_bytes = (size_t)span_bytes, .max_gap = (size_t)max_gap,
                         .block_bytes = (size_t)block_bytes};
    job_t *job = &job_storage;
    job->compact = PyList_New(0);
    job->fixed = PyList_New(0);
    job->kept = PyList_New(0);
    job->rechunked = PyDict_New();
    PyObject *result = NULL;
    hid_t root = -1, dst_root = -1;
    if (!job->compact || !job->fixed || !job->kept || !job->rechunked) goto finish;

    h5.open();
    h5.Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures are reported here, not printed by the library */
    job->src_file = open_source(job, src_path, (size_t)chunk_cache_bytes, (size_t)chunk_cache_slots);
    if (job->src_file < 0) goto finish;
    job->src_fd = open(src_path, O_RDONLY | O_CLOEXEC);
    if (job->src_fd < 0) {
        FAIL("cannot open %s", src_path);
        goto finish;
    }
    hid_t fcpl = h5.Fget_create_plist(job->src_file);
    hsize_t userblock = 0;
    if (fcpl < 0 || h5.Pget_userblock(fcpl, &userblock) < 0) FAIL("cannot read the file's creation properties");
    if (fcpl >= 0) h5.Pclose(fcpl);
    if (job->status != OK) goto finish;
    if (userblock) {
        DECLINE("has a %llu-byte user block", (unsigned long long)userblock);
        goto finish;
    }
    root = h5.Gopen2(job->src_file, "/", H5P_DEFAULT);
    H5O_info2_t info;
    haddr_t root_address;
    if (root < 0 || h5.Oget_info3(root, &info, H5O_INFO_BASIC) < 0 ||
        h5.VLnative_token_to_addr(job->src_file, info.token, &root_address) < 0) {
        FAIL("cannot open the root group");
        goto finish;
    }
    job->netcdf4 = netcdf4_markers(job, root);
    if (job->status != OK) goto finish;
    int changes = 0;
    unsigned long long bytes = 0, chunks = 0;
    if (!map_add(&job->objects, root_address, "/")) FAIL("out of memory");
    else scan_members(job, root, "/", &changes, &bytes, &chunks);
    if (job->status != OK) goto finish;
    job->copy_plist = h5.Pcreate(*h5.P_CLS_OBJECT_COPY);
    /* soft and external links stay links; references are pointed at the copies afterwards */
    if (job->copy_plist < 0 || h5.Pset_copy_object(job->copy_plist, 0) < 0) {
        FAIL("cannot set up H5Ocopy");
        goto finish;
    }
    job->dst_file = create_destination(job, dst_path, root, page_size, (size_t)cache_bytes);
    if (job->dst_file < 0) goto finish;
    PyObject *r = PyObject_CallNoArgs(created);
    if (!r) {
        job->status = PYTHON_ERROR;
        goto finish;
    }
    Py_DECREF(r);
    dst_root = h5.Gopen2(job->dst_file, "/", H5P_DEFAULT);
    hid_t root_gcpl = h5.Gget_create_plist(root);
    if (dst_root < 0 || root_gcpl < 0) FAIL("cannot open the copy's root");
    else if (copy_attributes(job, root, dst_root, root_gcpl) == 0 && copy_members(job, root, dst_root, "/") == 0)
        write_deferred(job);
    if (root_gcpl >= 0) h5.Pclose(root_gcpl);

finish:
    free_deferred(job);
    if (dst_root >= 0) h5.Gclose(dst_root);
    if (root >= 0) h5.Gclose(root);
    if (job->dst_file >= 0 && h5.Fclose(job->dst_file) < 0) FAIL("cannot finish writing %s", dst_path);
    if (job->src_file >= 0) h5.Fclose(job->src_file);
    if (job->copy_plist >= 0) h5.Pclose(job->copy_plist);
    if (job->src_fd >= 0) close(job->src_fd);
    map_free(&job->objects);
    if (job->status == OK) {
        PyObject *fields = summary(job);
        if (fields) result = Py_BuildValue("(sN)", "done", fields);
    } else if (job->status != PYTHON_ERROR || !PyErr_Occurred()) {
        PyErr_Clear();
        result = Py_BuildValue("(ss)", job->status == DECLINED ? "declined" : "failed",
                               job->status == PYTHON_ERROR ? "out of memory" : job->reason);
    }
    Py_XDECREF(job->compact);
    Py_XDECREF(job->fixed);
    Py_XDECREF(job->kept);
    Py_XDECREF(job->rechunked);
    return result;
}

static PyObject *repack_file(PyObject *self, PyObject *args) {
    if (!check_bound()) return NULL;
    return native_repack_file(self, args);
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
    {"repack_file", repack_file, METH_VARARGS,
     "repack_file(src, dst, page_size, options, progress) -> (status, summary or reason); see the native engine above"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcopy", "layoutlab repack's C code.", -1, methods};

PyMODINIT_FUNC PyInit__fastcopy(void) { return PyModule_Create(&module); }
