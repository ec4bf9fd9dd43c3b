/* The part of HDF5's public C API that layoutlab's C code calls, declared by hand.
 *
 * Why no #include <hdf5.h>: the extension calls the libhdf5 that h5py links (a
 * wheel bundles its own, often newer than any system copy, and identifiers must
 * be shared with h5py), found at run time with dlopen/dlsym (load() in
 * _fastcopy.c). A build against system headers could disagree with that library.
 * The types, constants and prototypes below follow HDF5's public headers
 * (H5public.h, H5Dpublic.h, H5Apublic.h, H5Spublic.h, H5Tpublic.h) of 1.14 and
 * 2.0; load() refuses a library older than 1.14 (no H5Dchunk_iter before it).
 */
#ifndef LAYOUTLAB_HDF5_API_H
#define LAYOUTLAB_HDF5_API_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int64_t hid_t;
typedef int herr_t;
typedef int htri_t;
typedef uint64_t hsize_t;
typedef int64_t hssize_t;
typedef uint64_t haddr_t;

#define H5P_DEFAULT ((hid_t)0)

enum { H5_ITER_INC = 0 };
enum { H5_INDEX_NAME = 0 };
enum { H5S_SIMPLE = 1, H5S_NULL = 2 };
enum { H5T_STRING = 3, H5T_COMPOUND = 6, H5T_REFERENCE = 7, H5T_VLEN = 9, H5T_ARRAY = 10 };

typedef int (*chunk_iter_op)(const hsize_t *offset, unsigned filter_mask, haddr_t addr, hsize_t size, void *op_data);
/* H5A_operator2_t; its H5A_info_t argument is not read */
typedef herr_t (*attr_iter_op)(hid_t location, const char *name, const void *info, void *op_data);

/* X(return type, name without "H5", parameters): one list gives both the function
 * table and the names load() looks up. */
#define HDF5_FUNCTIONS(X)                                                                                                    \
    X(herr_t, get_libversion, (unsigned *major, unsigned *minor, unsigned *release))                                         \
    X(herr_t, Dchunk_iter, (hid_t dset, hid_t dxpl, chunk_iter_op op, void *op_data))                                        \
    X(herr_t, Dwrite_chunk, (hid_t dset, hid_t dxpl, uint32_t filters, const hsize_t *offset, size_t size, const void *buf)) \
    X(hid_t, Dget_space, (hid_t dset))                                                                                       \
    X(int, Aget_num_attrs, (hid_t loc))                                                                                      \
    X(herr_t, Aiterate2, (hid_t loc, int idx_type, int order, hsize_t *idx, attr_iter_op op, void *op_data))                 \
    X(htri_t, Aexists, (hid_t obj, const char *name))                                                                        \
    X(hid_t, Aopen, (hid_t obj, const char *name, hid_t aapl))                                                               \
    X(hid_t, Aget_type, (hid_t attr))                                                                                        \
    X(hid_t, Aget_space, (hid_t attr))                                                                                       \
    X(hid_t, Acreate2, (hid_t loc, const char *name, hid_t type, hid_t space, hid_t acpl, hid_t aapl))                       \
    X(herr_t, Aread, (hid_t attr, hid_t mem_type, void *buf))                                                                \
    X(herr_t, Awrite, (hid_t attr, hid_t mem_type, const void *buf))                                                         \
    X(herr_t, Aclose, (hid_t attr))                                                                                          \
    X(int, Tget_class, (hid_t type))                                                                                         \
    X(htri_t, Tdetect_class, (hid_t type, int cls))                                                                          \
    X(htri_t, Tis_variable_str, (hid_t type))                                                                                \
    X(htri_t, Tcommitted, (hid_t type))                                                                                      \
    X(size_t, Tget_size, (hid_t type))                                                                                       \
    X(htri_t, Tequal, (hid_t a, hid_t b))                                                                                    \
    X(herr_t, Tclose, (hid_t type))                                                                                          \
    X(int, Sget_simple_extent_type, (hid_t space))                                                                           \
    X(hssize_t, Sget_simple_extent_npoints, (hid_t space))                                                                   \
    X(int, Sget_simple_extent_ndims, (hid_t space))                                                                          \
    X(int, Sget_simple_extent_dims, (hid_t space, hsize_t *dims, hsize_t *maxdims))                                          \
    X(herr_t, Sclose, (hid_t space))

#define HDF5_DECLARE_SLOT(ret, name, params) ret(*name) params;
struct hdf5_api {
    HDF5_FUNCTIONS(HDF5_DECLARE_SLOT)
};
extern struct hdf5_api h5;

/* (include after Python.h) */

/* _fastcopy.c: the loops */
int fastcopy_stored_chunks(hid_t src, hid_t dst, int fd, int rank, size_t span_bytes, size_t max_gap,
                           PyObject *progress, unsigned long long *copied, unsigned long long *bytes);
int fastcopy_plain_attributes(hid_t src, hid_t dst, int index_type, int order, unsigned long long *position,
                              unsigned long long *copied);
int fastcopy_plain_type(hid_t type);

#endif
