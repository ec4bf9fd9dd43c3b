/* layoutlab repack's C code: the stored-chunk and plain-attribute loops (used by the
 * Python engine, repack_hdf5.py) and the whole native engine (_native_repack.c).
 *
 * Why by hand: h5py offers one Python call per chunk (read_direct_chunk /
 * write_direct_chunk) and several per attribute, and on an ATL03 granule
 * (55,000 chunks, 6,000 attributes) that per-call cost was most of the gap to
 * h5repack, which copies with H5Ocopy in C. H5Ocopy cannot be used (it keeps the
 * dataspace and layout: unlimited dimensions and COMPACT datasets would stay),
 * and no library offers "copy the stored chunks of one dataset into another".
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
                                    "H5T_NATIVE_INT_g", "H5T_NATIVE_UINT_g"};
    hid_t **slots[] = {&found.P_CLS_FILE_CREATE, &found.P_CLS_FILE_ACCESS, &found.T_STD_REF_OBJ, &found.T_NATIVE_INT,
                      &found.T_NATIVE_UINT};
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
} chunk_list;

static int collect_chunk(const hsize_t *offset, unsigned mask, haddr_t address, hsize_t size, void *data) {
    chunk_list *list = data;
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

/* Every stored chunk of `src` written unchanged (same offset, same filter mask)
 * into `dst`, which has the same chunk shape. Chunks are located with one
 * H5Dchunk_iter pass and read front to back from `fd` (the source file),
 * neighbours closer than max_gap in one pread of up to span_bytes. progress, if
 * not None, is called with the bytes read every 16 MiB and at the end.
 * 0 on success; -1 with a Python exception set. */
int fastcopy_stored_chunks(hid_t src, hid_t dst, int fd, int rank, size_t span_bytes, size_t max_gap,
                           PyObject *progress, unsigned long long *copied_out, unsigned long long *bytes_out) {
    if (rank < 1 || rank > 32) {
        PyErr_Format(PyExc_ValueError, "rank %d out of range", rank);
        return -1;
    }
    chunk_list list = {.rank = rank};
    char *buffer = NULL;
    size_t buffer_size = 0;
    unsigned long long copied = 0, bytes = 0, unreported = 0;
    int status = -1;

    if (h5.Dchunk_iter(src, H5P_DEFAULT, collect_chunk, &list) < 0) {
        if (list.count == list.capacity && !list.chunks) PyErr_NoMemory();
        else PyErr_SetString(PyExc_OSError, "cannot list the stored chunks (damaged chunk index?)");
        goto done;
    }
    qsort(list.chunks, list.count, sizeof *list.chunks, by_address);
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
        size_t length = (size_t)(end - start);
        if (length > buffer_size) {
            char *grown = realloc(buffer, length);
            if (!grown) {
                PyErr_NoMemory();
                goto done;
            }
            buffer = grown;
            buffer_size = length;
        }
        int got = read_fully(fd, buffer, length, (off_t)start);
        if (got < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        if (got == 0) {
            PyErr_Format(PyExc_OSError, "chunks up to byte %llu lie beyond the end of the file",
                         (unsigned long long)end);
            goto done;
        }
        for (size_t i = first; i < last; i++) {
            located_chunk *chunk = &list.chunks[i];
            if (h5.Dwrite_chunk(dst, H5P_DEFAULT, chunk->mask, &list.offsets[chunk->index * rank],
                                (size_t)chunk->size, buffer + (chunk->address - start)) < 0) {
                PyErr_Format(PyExc_OSError, "cannot write the chunk stored at byte %llu (%llu bytes)",
                             (unsigned long long)chunk->address, (unsigned long long)chunk->size);
                goto done;
            }
            copied++;
        }
        bytes += length;
        unreported += length;
        first = last;
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
    free(list.chunks);
    free(list.offsets);
    free(buffer);
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
    if (fastcopy_stored_chunks((hid_t)src, (hid_t)dst, fd, rank, (size_t)span_bytes, (size_t)max_gap, progress,
                               &copied, &bytes) < 0)
        return NULL;
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
int fastcopy_plain_attributes(hid_t src, hid_t dst, int index_type, int order, unsigned long long *position_io,
                              unsigned long long *copied_out) {
    int count = h5.Aget_num_attrs(src);
    if (count < 0) {
        PyErr_Format(PyExc_OSError, "cannot count the attributes");
        return -1;
    }
    unsigned long long position = *position_io, copied = 0;
    char name_small[256];
    char *name = name_small;
    size_t name_capacity = sizeof name_small;
    void *data = NULL;
    size_t data_capacity = 0;
    int status = -1;
    for (; position < (unsigned long long)count; position++) {
        hid_t attr = h5.Aopen_by_idx(src, ".", index_type, order, position, H5P_DEFAULT, H5P_DEFAULT);
        if (attr < 0) {
            PyErr_Format(PyExc_OSError, "cannot open attribute %llu", position);
            goto done;
        }
        hid_t type = h5.Aget_type(attr);
        hid_t space = type < 0 ? -1 : h5.Aget_space(attr);
        int plain = space >= 0 && fastcopy_plain_type(type);
        const char *failed = NULL;
        if (space < 0) failed = "cannot read the type or dataspace of";
        if (plain && !failed) {
            ssize_t length = h5.Aget_name(attr, 0, NULL);
            if (length < 0) failed = "cannot read the name of";
            else if ((size_t)length + 1 > name_capacity) {
                char *bigger = malloc((size_t)length + 1);
                if (!bigger) failed = "out of memory for the name of";
                else {
                    if (name != name_small) free(name);
                    name = bigger;
                    name_capacity = (size_t)length + 1;
                }
            }
            if (!failed && h5.Aget_name(attr, name_capacity, name) < 0) failed = "cannot read the name of";
        }
        if (plain && !failed) {
            hid_t copy = h5.Acreate2(dst, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
            if (copy < 0) failed = "cannot create the copy of";
            else {
                if (h5.Sget_simple_extent_type(space) != H5S_NULL) {
                    hssize_t points = h5.Sget_simple_extent_npoints(space);
                    size_t size = points < 0 ? 0 : (size_t)points * h5.Tget_size(type);
                    if (points < 0) failed = "cannot size";
                    else if (size > data_capacity) {
                        void *bigger = realloc(data, size);
                        if (!bigger) failed = "out of memory for the value of";
                        else {
                            data = bigger;
                            data_capacity = size;
                        }
                    }
                    /* the file type as memory type: the stored bytes, unconverted */
                    if (!failed && size && h5.Aread(attr, type, data) < 0) failed = "cannot read";
                    if (!failed && size && h5.Awrite(copy, type, data) < 0) failed = "cannot write the copy of";
                }
                h5.Aclose(copy);
            }
        }
        if (space >= 0) h5.Sclose(space);
        if (type >= 0) h5.Tclose(type);
        h5.Aclose(attr);
        if (failed) {
            PyErr_Format(PyExc_OSError, "%s attribute %llu", failed, position);
            goto done;
        }
        if (!plain) break;
        copied++;
    }
    status = 0;
done:
    *position_io = position;
    *copied_out += copied;
    if (name != name_small) free(name);
    free(data);
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
    {"repack_file", repack_file, METH_VARARGS,
     "repack_file(src, dst, page_size, options, progress) -> (status, summary or reason); see _native_repack.c"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcopy", "layoutlab repack's C code.", -1, methods};

PyMODINIT_FUNC PyInit__fastcopy(void) { return PyModule_Create(&module); }
