/* The two per-object loops of `layoutlab repack` in C: stored chunks and plain attributes.
 *
 * Why by hand: h5py offers one Python call per chunk (read_direct_chunk /
 * write_direct_chunk) and several per attribute, and on an ATL03 granule
 * (55,000 chunks, 6,000 attributes) that per-call cost was most of the gap to
 * h5repack, which copies with H5Ocopy in C. H5Ocopy cannot be used (it keeps the
 * dataspace and layout: unlimited dimensions and COMPACT datasets would stay),
 * and no library offers "copy the stored chunks of one dataset into another".
 *
 * The module calls the HDF5 library h5py already loaded (no second copy of
 * libhdf5, identifiers shared with h5py): Python resolves the functions there
 * with ctypes and hands their addresses to bind(). So it needs no HDF5 headers;
 * the few types and prototypes below follow HDF5's public API (H5Dpublic.h,
 * H5Apublic.h), unchanged from 1.12.3 / 1.14 to 2.0.
 *
 * Callers hold h5py's lock (h5py._objects.phil) around every call, as h5py does
 * around its own calls into the library.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int64_t hid_t;
typedef int herr_t;
typedef int htri_t;
typedef uint64_t hsize_t;
typedef int64_t hssize_t;
typedef uint64_t haddr_t;

enum { H5P_DEFAULT = 0 };
enum { H5_ITER_INC = 0 };
enum { H5S_NULL = 2 };
enum { H5T_STRING = 3, H5T_COMPOUND = 6, H5T_REFERENCE = 7, H5T_VLEN = 9, H5T_ARRAY = 10 };

typedef int (*chunk_iter_op)(const hsize_t *offset, unsigned filter_mask, haddr_t addr, hsize_t size, void *op_data);

/* The library's functions, in the order bind() receives their addresses (FUNCTION_NAMES in fastcopy.py). */
static struct {
    herr_t (*Dchunk_iter)(hid_t dset, hid_t dxpl, chunk_iter_op op, void *op_data);
    herr_t (*Dwrite_chunk)(hid_t dset, hid_t dxpl, uint32_t filters, const hsize_t *offset, size_t size, const void *buf);
    int (*Aget_num_attrs)(hid_t loc);
    hid_t (*Aopen_by_idx)(hid_t loc, const char *obj_name, int idx_type, int order, hsize_t n, hid_t aapl, hid_t lapl);
    ssize_t (*Aget_name)(hid_t attr, size_t size, char *name);
    hid_t (*Aget_type)(hid_t attr);
    hid_t (*Aget_space)(hid_t attr);
    hid_t (*Acreate2)(hid_t loc, const char *name, hid_t type, hid_t space, hid_t acpl, hid_t aapl);
    herr_t (*Aread)(hid_t attr, hid_t mem_type, void *buf);
    herr_t (*Awrite)(hid_t attr, hid_t mem_type, const void *buf);
    herr_t (*Aclose)(hid_t attr);
    int (*Tget_class)(hid_t type);
    htri_t (*Tdetect_class)(hid_t type, int cls);
    htri_t (*Tis_variable_str)(hid_t type);
    htri_t (*Tcommitted)(hid_t type);
    size_t (*Tget_size)(hid_t type);
    herr_t (*Tclose)(hid_t type);
    int (*Sget_simple_extent_type)(hid_t space);
    hssize_t (*Sget_simple_extent_npoints)(hid_t space);
    herr_t (*Sclose)(hid_t space);
} h5;

#define FUNCTION_COUNT (sizeof(h5) / sizeof(void *))
static int bound = 0;

static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *addresses;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &addresses)) return NULL;
    if ((size_t)PyTuple_GET_SIZE(addresses) != FUNCTION_COUNT) {
        PyErr_Format(PyExc_ValueError, "bind() takes %zu function addresses, got %zd", FUNCTION_COUNT,
                     PyTuple_GET_SIZE(addresses));
        return NULL;
    }
    void **slots = (void **)&h5;
    for (size_t i = 0; i < FUNCTION_COUNT; i++) {
        void *address = PyLong_AsVoidPtr(PyTuple_GET_ITEM(addresses, i));
        if (address == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "function %zu has no address", i);
            return NULL;
        }
        slots[i] = address;
    }
    bound = 1;
    Py_RETURN_NONE;
}

static int check_bound(void) {
    if (!bound) PyErr_SetString(PyExc_RuntimeError, "layoutlab.convert._fastcopy: bind() was not called");
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

/* copy_chunks(src_dset, dst_dset, fd, rank, span_bytes, max_gap, progress) -> (chunks, bytes)
 *
 * Every stored chunk of src_dset written unchanged (same offset, same filter
 * mask) into dst_dset, which has the same chunk shape. Chunks are located with
 * one H5Dchunk_iter pass and read front to back from `fd` (the source file),
 * neighbours closer than max_gap in one pread of up to span_bytes. progress, if
 * not None, is called with the bytes read every 16 MiB and at the end. */
static PyObject *copy_chunks(PyObject *self, PyObject *args) {
    long long src, dst;
    int fd, rank;
    Py_ssize_t span_bytes, max_gap;
    PyObject *progress;
    if (!PyArg_ParseTuple(args, "LLiinnO", &src, &dst, &fd, &rank, &span_bytes, &max_gap, &progress)) return NULL;
    if (!check_bound()) return NULL;
    if (rank < 1 || rank > 32) return PyErr_Format(PyExc_ValueError, "rank %d out of range", rank);

    chunk_list list = {.rank = rank};
    char *buffer = NULL;
    size_t buffer_size = 0;
    unsigned long long copied = 0, bytes = 0, unreported = 0;
    PyObject *result = NULL;

    if (h5.Dchunk_iter((hid_t)src, H5P_DEFAULT, collect_chunk, &list) < 0) {
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
            if (h5.Dwrite_chunk((hid_t)dst, H5P_DEFAULT, chunk->mask, &list.offsets[chunk->index * rank],
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
    result = Py_BuildValue("KK", copied, bytes);
done:
    free(list.chunks);
    free(list.offsets);
    free(buffer);
    return result;
}

/* --- attributes -------------------------------------------------------------------------- */

/* Stored bytes can be copied as they are (the rule of _type_kind in repack_hdf5.py), and the type is
 * not a committed one (the destination has its own copy of those: Python maps them). */
static int plain_type(hid_t type) {
    if (h5.Tcommitted(type) != 0) return 0;
    if (h5.Tdetect_class(type, H5T_VLEN) != 0 || h5.Tdetect_class(type, H5T_REFERENCE) != 0) return 0;
    int cls = h5.Tget_class(type);
    if (cls < 0) return 0;
    if (cls == H5T_STRING && h5.Tis_variable_str(type) != 0) return 0;
    if ((cls == H5T_COMPOUND || cls == H5T_ARRAY) && h5.Tdetect_class(type, H5T_STRING) != 0) return 0;
    return 1;
}

/* copy_plain_attributes(src_obj, dst_obj, index_type, start) -> (next, copied)
 *
 * Attributes of src_obj from position `start` (in index_type order: 0 name, 1
 * creation order) created on dst_obj with the same name, type, dataspace and
 * stored bytes, in order, until one that is not plain (variable-length, holds
 * references, or of a committed type): `next` is its position (or the count
 * when all were copied) and Python copies that one, then calls again. */
static PyObject *copy_plain_attributes(PyObject *self, PyObject *args) {
    long long src, dst;
    int index_type;
    unsigned long long position;
    if (!PyArg_ParseTuple(args, "LLiK", &src, &dst, &index_type, &position)) return NULL;
    if (!check_bound()) return NULL;
    int count = h5.Aget_num_attrs((hid_t)src);
    if (count < 0) return PyErr_Format(PyExc_OSError, "cannot count the attributes");
    unsigned long long copied = 0;
    char name_small[256];
    char *name = name_small;
    size_t name_capacity = sizeof name_small;
    void *data = NULL;
    size_t data_capacity = 0;
    PyObject *result = NULL;
    for (; position < (unsigned long long)count; position++) {
        hid_t attr = h5.Aopen_by_idx((hid_t)src, ".", index_type, H5_ITER_INC, position, H5P_DEFAULT, H5P_DEFAULT);
        if (attr < 0) {
            PyErr_Format(PyExc_OSError, "cannot open attribute %llu", position);
            goto done;
        }
        hid_t type = h5.Aget_type(attr);
        hid_t space = type < 0 ? -1 : h5.Aget_space(attr);
        int plain = space >= 0 && plain_type(type);
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
            hid_t copy = h5.Acreate2((hid_t)dst, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
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
    result = Py_BuildValue("KK", position, copied);
done:
    if (name != name_small) free(name);
    free(data);
    return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(addresses): the HDF5 functions to call, in FUNCTION_NAMES order."},
    {"copy_chunks", copy_chunks, METH_VARARGS,
     "copy_chunks(src_dset, dst_dset, fd, rank, span_bytes, max_gap, progress) -> (chunks, bytes read)"},
    {"copy_plain_attributes", copy_plain_attributes, METH_VARARGS,
     "copy_plain_attributes(src_obj, dst_obj, index_type, start) -> (next position, attributes copied)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcopy",
                                    "Chunk and attribute copy loops of layoutlab repack, in C.", -1, methods};

PyMODINIT_FUNC PyInit__fastcopy(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "FUNCTION_COUNT", (long)FUNCTION_COUNT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
