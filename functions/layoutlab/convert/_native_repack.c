/* The native repack engine: `layoutlab repack` of a whole file in C, with neither
 * h5py nor numpy in the process.
 *
 * Why: the Python engine (repack_hdf5.py) writes the same file, but importing
 * numpy and h5py alone costs ~0.1 s and walking an ATL03 granule's ~1,200
 * objects and ~6,000 attributes through h5py ~0.2 s more; h5repack, the
 * reference, is a C program. The work itself is libhdf5's in both engines.
 *
 * It does what the Python engine does, in the same order (so both write
 * byte-for-byte the same objects): groups in their link order with their
 * creation properties, attributes in their order, datasets recreated with their
 * creation property list (COMPACT -> CONTIGUOUS; unlimited axes fixed at their
 * current size, NetCDF-4's dimension-length rule included), stored chunks copied
 * as they are, other data copied decoded block by block, and the object
 * references of DIMENSION_LIST / REFERENCE_LIST attributes rewritten once every
 * object exists. Anything else it declines, before or while writing, and the
 * caller runs the Python engine instead: soft, external and repeated hard links,
 * committed datatypes, virtual datasets, datasets of variable-length or
 * reference type, references other than plain object references, a user block.
 *
 * repack_file(src, dst, page_size, options, progress) returns
 *   ("done", {counters and lists for RepackSummary}),
 *   ("declined", reason) or ("failed", reason: the HDF5 call that failed);
 * after "declined" or "failed" the destination is closed and may be removed.
 * options = (span_bytes, max_gap, block_bytes, metadata_cache_bytes,
 *            source_chunk_cache_bytes, source_chunk_cache_slots, created):
 * `created` is called once the destination exists, before any data is written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "_hdf5_api.h"

enum { OK = 0, DECLINED = 1, FAILED = 2, PYTHON_ERROR = 3 };

/* --- source address -> destination object ------------------------------------------------- */

typedef struct {
    haddr_t src;
    char *dst_path;
    haddr_t dst; /* HADDR_UNDEF until first needed */
    long long length; /* NetCDF dimension length when the object is a scale, -1 until computed */
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
    hid_t src_file, dst_file;
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

static char *attribute_name(hid_t attr) {
    ssize_t length = h5.Aget_name(attr, 0, NULL);
    char *name = length < 0 ? NULL : malloc((size_t)length + 1);
    if (name && h5.Aget_name(attr, (size_t)length + 1, name) < 0) {
        free(name);
        name = NULL;
    }
    return name;
}

/* The attribute at `position` that copy_plain_attributes stopped at: variable-length values
 * (converted through the library's memory form), or object references (created now, written
 * by write_deferred). */
static int copy_other_attribute(job_t *job, hid_t src, hid_t dst, unsigned long long position, int index) {
    hid_t attr = h5.Aopen_by_idx(src, ".", index, H5_ITER_INC, position, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0) return FAIL("cannot open attribute %llu", position);
    hid_t type = h5.Aget_type(attr), space = type < 0 ? -1 : h5.Aget_space(attr), copy = -1;
    char *name = space < 0 ? NULL : attribute_name(attr);
    void *data = NULL;
    int result = -1, keep = 0;
    if (!name) {
        FAIL("cannot read attribute %llu", position);
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
    hssize_t points = h5.Sget_simple_extent_npoints(space);
    size_t size = h5.Tget_size(type);
    if (points < 0 || !size || !(data = calloc((size_t)points ? (size_t)points : 1, size))) {
        FAIL("cannot size attribute %s", name);
        goto done;
    }
    if (h5.Aread(attr, type, data) < 0) {
        FAIL("cannot read attribute %s", name);
        free(data);
        data = NULL;
        goto done;
    }
    if (h5.Tdetect_class(type, H5T_REFERENCE) > 0) {
        deferred_attribute d = {.dst_attr = copy, .type = type, .space = space, .data = data,
                                .points = (size_t)points, .value_size = size};
        if (h5.Tget_class(type) == H5T_VLEN) {
            hid_t base = h5.Tget_super(type);
            int plain = base >= 0 && h5.Tequal(base, *h5.T_STD_REF_OBJ) > 0;
            if (base >= 0) h5.Tclose(base);
            d.vlen = 1;
            if (!plain) {
                h5.Treclaim(type, space, H5P_DEFAULT, data);
                DECLINE("attribute %s holds references other than object references", name);
                goto done;
            }
        } else if (reference_offsets(type, 0, d.offsets, &d.noffsets, sizeof d.offsets / sizeof *d.offsets) < 0) {
            DECLINE("attribute %s holds references other than object references", name);
            goto done;
        }
        if (job->ndeferred == job->deferred_capacity) {
            size_t capacity = job->deferred_capacity ? 2 * job->deferred_capacity : 256;
            deferred_attribute *grown = realloc(job->deferred, capacity * sizeof *grown);
            if (!grown) {
                if (d.vlen) h5.Treclaim(type, space, H5P_DEFAULT, data);
                FAIL("out of memory");
                goto done;
            }
            job->deferred = grown;
            job->deferred_capacity = capacity;
        }
        job->deferred[job->ndeferred++] = d;
        keep = 1; /* the deferred entry owns copy, type, space and data now */
        result = 0;
        goto done;
    }
    if (h5.Awrite(copy, type, data) < 0) FAIL("cannot write attribute %s", name);
    else result = 0;
    h5.Treclaim(type, space, H5P_DEFAULT, data);
done:
    if (!keep) {
        free(data);
        if (copy >= 0) h5.Aclose(copy);
        if (space >= 0) h5.Sclose(space);
        if (type >= 0) h5.Tclose(type);
    }
    free(name);
    h5.Aclose(attr);
    return result;
}

static int copy_attributes(job_t *job, hid_t src, hid_t dst, hid_t create_plist) {
    int count = h5.Aget_num_attrs(src);
    if (count < 0) return FAIL("cannot count attributes");
    if (!count) return 0;
    int index = tracks_creation_order(h5.Pget_attr_creation_order, create_plist) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    unsigned long long position = 0;
    while (position < (unsigned long long)count) {
        if (fastcopy_plain_attributes(src, dst, index, H5_ITER_INC, &position, &job->attributes) < 0)
            return fail_with_python_error(job, "attributes");
        if (position >= (unsigned long long)count) break;
        if (copy_other_attribute(job, src, dst, position, index) < 0) return -1;
        position++;
    }
    return 0;
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

static int copy_dataset(job_t *job, hid_t src, haddr_t self, hid_t dst_group, const char *name, const char *path) {
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
    new_space = kind == H5S_SIMPLE ? h5.Screate_simple(rank, shape, newmax) : h5.Scopy(space);
    if (new_space < 0 || (dst = h5.Dcreate2(dst_group, name, type, new_space, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) {
        FAIL("cannot create %s in the copy", path);
        goto done;
    }
    if (copy_attributes(job, src, dst, dcpl) < 0) goto done;
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
        if (fastcopy_stored_chunks(src, dst, job->src_fd, rank, job->span_bytes, job->max_gap, job->progress,
                                   &job->chunks_raw, &(unsigned long long){0}) < 0) {
            fail_with_python_error(job, path);
            goto done;
        }
        result = 0;
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
    int link_type;
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
    item->address = HADDR_UNDEF;
    if (!item->name) return -1;
    list->count++;
    if (info->type == H5L_TYPE_HARD && h5.VLnative_token_to_addr(list->file, info->u.token, &item->address) < 0)
        return -1;
    return 0;
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

static int copy_members(job_t *job, hid_t src_group, hid_t dst_group, const char *dst_name) {
    member_list list = {0};
    int result = list_members(job, src_group, &list);
    for (size_t i = 0; result == 0 && i < list.count; i++) {
        member *item = &list.items[i];
        char *path = join(dst_name, item->name);
        if (!path) {
            result = FAIL("out of memory");
            break;
        }
        if (item->link_type != H5L_TYPE_HARD) result = DECLINE("%s is a soft or external link", path);
        else if (map_find(&job->objects, item->address)) result = DECLINE("%s: a second link to one object", path);
        else if (!map_add(&job->objects, item->address, path)) result = FAIL("out of memory");
        hid_t object = result < 0 ? -1 : h5.Oopen(src_group, item->name, H5P_DEFAULT);
        if (result == 0 && object < 0) result = FAIL("cannot open %s", path);
        if (result == 0) {
            int kind = h5.Iget_type(object);
            if (kind == H5I_GROUP) {
                hid_t gcpl = h5.Gget_create_plist(object);
                hid_t copy = gcpl < 0 ? -1 : h5.Gcreate2(dst_group, item->name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
                if (copy < 0) result = FAIL("cannot create group %s in the copy", path);
                else {
                    job->groups++;
                    result = copy_attributes(job, object, copy, gcpl);
                    if (result == 0) result = copy_members(job, object, copy, path);
                    h5.Gclose(copy);
                }
                if (gcpl >= 0) h5.Pclose(gcpl);
            } else if (kind == H5I_DATASET) {
                job->datasets++;
                result = copy_dataset(job, object, item->address, dst_group, item->name, path);
            } else {
                result = DECLINE("%s is a committed datatype", path);
            }
        }
        if (object >= 0) h5.Oclose(object);
        free(path);
    }
    free_members(&list);
    return result;
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
                found = h5.Aexists(object, "_Netcdf4Dimid") > 0 || h5.Aexists(object, "_Netcdf4Coordinates") > 0;
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

PyObject *native_repack_file(PyObject *self, PyObject *args) {
    const char *src_path, *dst_path;
    unsigned long long page_size;
    Py_ssize_t span_bytes, max_gap, block_bytes, cache_bytes, chunk_cache_bytes, chunk_cache_slots;
    PyObject *created, *progress;
    if (!PyArg_ParseTuple(args, "yyK(nnnnnnO)O", &src_path, &dst_path, &page_size, &span_bytes, &max_gap,
                          &block_bytes, &cache_bytes, &chunk_cache_bytes, &chunk_cache_slots, &created, &progress))
        return NULL;
    job_t job_storage = {.src_file = -1, .dst_file = -1, .src_fd = -1, .progress = progress,
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
    if (dst_root < 0 || root_gcpl < 0 || !map_add(&job->objects, root_address, "/")) FAIL("cannot open the copy's root");
    else if (copy_attributes(job, root, dst_root, root_gcpl) == 0 && copy_members(job, root, dst_root, "/") == 0)
        write_deferred(job);
    if (root_gcpl >= 0) h5.Pclose(root_gcpl);

finish:
    free_deferred(job);
    if (dst_root >= 0) h5.Gclose(dst_root);
    if (root >= 0) h5.Gclose(root);
    if (job->dst_file >= 0 && h5.Fclose(job->dst_file) < 0) FAIL("cannot finish writing %s", dst_path);
    if (job->src_file >= 0) h5.Fclose(job->src_file);
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
