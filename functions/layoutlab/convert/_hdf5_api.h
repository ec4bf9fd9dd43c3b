/* The part of HDF5's public C API that layoutlab's C code calls, declared by hand.
 *
 * Why no #include <hdf5.h>: the extension calls the libhdf5 that h5py links (a
 * wheel bundles its own, often newer than any system copy, and identifiers must
 * be shared with h5py), found at run time with dlopen/dlsym (load() in
 * _fastcopy.c). A build against system headers could disagree with that library.
 * The types, constants and prototypes below follow HDF5's public headers
 * (H5public.h, H5Ipublic.h, H5Dpublic.h, H5Apublic.h, H5Lpublic.h, H5Opublic.h,
 * H5Ppublic.h, H5Spublic.h, H5Tpublic.h, H5ACpublic.h, H5VLnative.h) of 1.14 and
 * 2.0; load() refuses a library older than 1.14 (no H5Dchunk_iter before it).
 */
#ifndef LAYOUTLAB_HDF5_API_H
#define LAYOUTLAB_HDF5_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

typedef int64_t hid_t;
typedef int herr_t;
typedef int htri_t;
typedef uint64_t hsize_t;
typedef int64_t hssize_t;
typedef uint64_t haddr_t;
typedef bool hbool_t;

#define H5P_DEFAULT ((hid_t)0)
#define H5E_DEFAULT ((hid_t)0)
#define H5S_ALL ((hid_t)0)
#define H5S_UNLIMITED ((hsize_t)(-1))
#define HADDR_UNDEF ((haddr_t)(-1))

enum { H5_ITER_INC = 0, H5_ITER_NATIVE = 2 };
enum { H5_INDEX_NAME = 0, H5_INDEX_CRT_ORDER = 1 };
enum { H5P_CRT_ORDER_TRACKED = 0x0001 };
enum { H5I_GROUP = 2, H5I_DATATYPE = 3, H5I_DATASET = 5 };
enum { H5L_TYPE_HARD = 0 };
enum { H5S_SCALAR = 0, H5S_SIMPLE = 1, H5S_NULL = 2 };
enum { H5S_SELECT_SET = 0 };
enum { H5D_COMPACT = 0, H5D_CONTIGUOUS = 1, H5D_CHUNKED = 2, H5D_VIRTUAL = 3 };
enum { H5T_INTEGER = 0, H5T_STRING = 3, H5T_COMPOUND = 6, H5T_REFERENCE = 7, H5T_VLEN = 9, H5T_ARRAY = 10 };
enum { H5F_ACC_RDONLY = 0, H5F_ACC_TRUNC = 2 };
enum { H5F_CLOSE_STRONG = 3 };
enum { H5F_LIBVER_V110 = 2 };
enum { H5F_FSPACE_STRATEGY_PAGE = 1 };
enum { H5O_INFO_BASIC = 0x0001 };
enum { H5O_TYPE_GROUP = 0, H5O_TYPE_DATASET = 1, H5O_TYPE_NAMED_DATATYPE = 2 };
enum { H5D_FILL_VALUE_USER_DEFINED = 2 };

typedef struct {
    uint8_t data[16];
} H5O_token_t;

typedef struct {
    unsigned long fileno;
    H5O_token_t token;
    int type;
    unsigned rc;
    time_t atime, mtime, ctime, btime;
    hsize_t num_attrs;
} H5O_info2_t;

typedef struct {
    int type; /* H5L_type_t */
    hbool_t corder_valid;
    int64_t corder;
    int cset;
    union {
        H5O_token_t token;
        size_t val_size;
    } u;
} H5L_info2_t;

typedef struct {
    size_t len;
    void *p;
} hvl_t;

/* H5AC_cache_config_t up to the fields repack sets; H5Pget_mdc_config fills the
 * whole structure, so it is read into `whole`, larger than any version of it. */
typedef union {
    struct {
        int version;
        hbool_t rpt_fcn_enabled, open_trace_file, close_trace_file;
        char trace_file_name[1025];
        hbool_t evictions_enabled, set_initial_size;
        size_t initial_size;
        double min_clean_fraction;
        size_t max_size, min_size;
    } head;
    char whole[8192];
} mdc_config_t;
#define H5AC_CURR_CACHE_CONFIG_VERSION 1

typedef int (*chunk_iter_op)(const hsize_t *offset, unsigned filter_mask, haddr_t addr, hsize_t size, void *op_data);
typedef herr_t (*link_iter_op)(hid_t group, const char *name, const H5L_info2_t *info, void *op_data);
/* H5A_operator2_t; its H5A_info_t argument is not read */
typedef herr_t (*attr_iter_op)(hid_t location, const char *name, const void *info, void *op_data);

/* X(return type, name without "H5", parameters): one list gives both the function
 * table and the names load() looks up. */
#define HDF5_FUNCTIONS(X)                                                                                        \
    X(herr_t, open, (void))                                                                                      \
    X(herr_t, get_libversion, (unsigned *major, unsigned *minor, unsigned *release))                             \
    X(herr_t, Eset_auto2, (hid_t stack, void *func, void *data))                                                 \
    X(herr_t, Dchunk_iter, (hid_t dset, hid_t dxpl, chunk_iter_op op, void *op_data))                            \
    X(herr_t, Dwrite_chunk,                                                                                      \
      (hid_t dset, hid_t dxpl, uint32_t filters, const hsize_t *offset, size_t size, const void *buf))           \
    X(hid_t, Dcreate2, (hid_t loc, const char *name, hid_t type, hid_t space, hid_t lcpl, hid_t dcpl, hid_t dapl)) \
    X(hid_t, Dget_create_plist, (hid_t dset))                                                                    \
    X(hid_t, Dget_space, (hid_t dset))                                                                           \
    X(hid_t, Dget_type, (hid_t dset))                                                                            \
    X(hsize_t, Dget_storage_size, (hid_t dset))                                                                  \
    X(herr_t, Dread, (hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl, void *buf))    \
    X(herr_t, Dwrite, (hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl, const void *buf)) \
    X(herr_t, Dclose, (hid_t dset))                                                                              \
    X(int, Aget_num_attrs, (hid_t loc))                                                                          \
    X(herr_t, Aiterate2, (hid_t loc, int idx_type, int order, hsize_t *idx, attr_iter_op op, void *op_data))    \
    X(htri_t, Aexists, (hid_t obj, const char *name))                                                            \
    X(hid_t, Aopen, (hid_t obj, const char *name, hid_t aapl))                                                   \
    X(hid_t, Aopen_by_idx,                                                                                       \
      (hid_t loc, const char *obj_name, int idx_type, int order, hsize_t n, hid_t aapl, hid_t lapl))             \
    X(ssize_t, Aget_name, (hid_t attr, size_t size, char *name))                                                 \
    X(hid_t, Aget_type, (hid_t attr))                                                                            \
    X(hid_t, Aget_space, (hid_t attr))                                                                           \
    X(hid_t, Acreate2, (hid_t loc, const char *name, hid_t type, hid_t space, hid_t acpl, hid_t aapl))          \
    X(herr_t, Aread, (hid_t attr, hid_t mem_type, void *buf))                                                    \
    X(herr_t, Awrite, (hid_t attr, hid_t mem_type, const void *buf))                                             \
    X(herr_t, Aclose, (hid_t attr))                                                                              \
    X(int, Tget_class, (hid_t type))                                                                             \
    X(htri_t, Tdetect_class, (hid_t type, int cls))                                                              \
    X(htri_t, Tis_variable_str, (hid_t type))                                                                    \
    X(htri_t, Tcommitted, (hid_t type))                                                                          \
    X(size_t, Tget_size, (hid_t type))                                                                           \
    X(htri_t, Tequal, (hid_t a, hid_t b))                                                                        \
    X(hid_t, Tget_super, (hid_t type))                                                                           \
    X(int, Tget_nmembers, (hid_t type))                                                                          \
    X(hid_t, Tget_member_type, (hid_t type, unsigned index))                                                     \
    X(size_t, Tget_member_offset, (hid_t type, unsigned index))                                                  \
    X(herr_t, Treclaim, (hid_t type, hid_t space, hid_t plist, void *buf))                                       \
    X(herr_t, Tclose, (hid_t type))                                                                              \
    X(int, Sget_simple_extent_type, (hid_t space))                                                               \
    X(hssize_t, Sget_simple_extent_npoints, (hid_t space))                                                       \
    X(int, Sget_simple_extent_ndims, (hid_t space))                                                              \
    X(int, Sget_simple_extent_dims, (hid_t space, hsize_t *dims, hsize_t *maxdims))                              \
    X(hid_t, Screate_simple, (int rank, const hsize_t *dims, const hsize_t *maxdims))                            \
    X(hid_t, Scopy, (hid_t space))                                                                               \
    X(herr_t, Sselect_hyperslab,                                                                                 \
      (hid_t space, int op, const hsize_t *start, const hsize_t *stride, const hsize_t *count, const hsize_t *block)) \
    X(herr_t, Sclose, (hid_t space))                                                                             \
    X(hid_t, Fopen, (const char *name, unsigned flags, hid_t fapl))                                              \
    X(hid_t, Fcreate, (const char *name, unsigned flags, hid_t fcpl, hid_t fapl))                                \
    X(hid_t, Fget_create_plist, (hid_t file))                                                                    \
    X(herr_t, Fclose, (hid_t file))                                                                              \
    X(hid_t, Gopen2, (hid_t loc, const char *name, hid_t gapl))                                                  \
    X(hid_t, Gcreate2, (hid_t loc, const char *name, hid_t lcpl, hid_t gcpl, hid_t gapl))                        \
    X(hid_t, Gget_create_plist, (hid_t group))                                                                   \
    X(herr_t, Gclose, (hid_t group))                                                                             \
    X(herr_t, Literate2, (hid_t group, int idx_type, int order, hsize_t *idx, link_iter_op op, void *op_data))  \
    X(hid_t, Oopen, (hid_t loc, const char *name, hid_t lapl))                                                   \
    X(hid_t, Oopen_by_token, (hid_t loc, H5O_token_t token))                                                     \
    X(herr_t, Oget_info3, (hid_t obj, H5O_info2_t *info, unsigned fields))                                       \
    X(herr_t, Oclose, (hid_t obj))                                                                               \
    X(int, Iget_type, (hid_t id))                                                                                \
    X(herr_t, VLnative_token_to_addr, (hid_t loc, H5O_token_t token, haddr_t *addr))                             \
    X(herr_t, VLnative_addr_to_token, (hid_t loc, haddr_t addr, H5O_token_t *token))                             \
    X(hid_t, Pcreate, (hid_t cls))                                                                               \
    X(herr_t, Pclose, (hid_t plist))                                                                             \
    X(herr_t, Pget_userblock, (hid_t fcpl, hsize_t *size))                                                       \
    X(herr_t, Pget_link_creation_order, (hid_t plist, unsigned *flags))                                          \
    X(herr_t, Pset_link_creation_order, (hid_t plist, unsigned flags))                                           \
    X(herr_t, Pget_attr_creation_order, (hid_t plist, unsigned *flags))                                          \
    X(herr_t, Pset_attr_creation_order, (hid_t plist, unsigned flags))                                           \
    X(herr_t, Pget_attr_phase_change, (hid_t plist, unsigned *max_compact, unsigned *min_dense))                 \
    X(herr_t, Pset_attr_phase_change, (hid_t plist, unsigned max_compact, unsigned min_dense))                   \
    X(herr_t, Pset_file_space_strategy, (hid_t fcpl, int strategy, hbool_t persist, hsize_t threshold))          \
    X(herr_t, Pset_file_space_page_size, (hid_t fcpl, hsize_t size))                                             \
    X(herr_t, Pset_libver_bounds, (hid_t fapl, int low, int high))                                               \
    X(herr_t, Pset_fclose_degree, (hid_t fapl, int degree))                                                      \
    X(herr_t, Pset_cache, (hid_t fapl, int mdc_nelmts, size_t rdcc_nslots, size_t rdcc_nbytes, double w0))       \
    X(herr_t, Pget_mdc_config, (hid_t fapl, mdc_config_t *config))                                               \
    X(herr_t, Pset_mdc_config, (hid_t fapl, const mdc_config_t *config))                                         \
    X(int, Pget_layout, (hid_t dcpl))                                                                            \
    X(herr_t, Pset_layout, (hid_t dcpl, int layout))                                                             \
    X(int, Pget_chunk, (hid_t dcpl, int max_rank, hsize_t *dims))                                                \
    X(herr_t, Pset_chunk, (hid_t dcpl, int rank, const hsize_t *dims))                                          \
    X(herr_t, Pfill_value_defined, (hid_t dcpl, int *status))                                                    \
    X(int, Pget_external_count, (hid_t dcpl))                                                                    \
    X(herr_t, Pset_char_encoding, (hid_t plist, int encoding))                                                   \
    X(herr_t, Pset_copy_object, (hid_t plist, unsigned flags))                                                   \
    X(herr_t, Ocopy, (hid_t src_loc, const char *src_name, hid_t dst_loc, const char *dst_name, hid_t ocpypl,   \
                      hid_t lcpl))                                                                               \
    X(herr_t, Dget_num_chunks, (hid_t dset, hid_t fspace, hsize_t *nchunks))                                   \
    X(int, Pget_nfilters, (hid_t plist))                                                                         \
    X(int, Pget_filter2, (hid_t plist, unsigned idx, unsigned *flags, size_t *cd_nelmts, unsigned *cd_values,    \
                          size_t namelen, char *name, unsigned *filter_config))                                  \
    X(htri_t, Zfilter_avail, (int id))

#define HDF5_DECLARE_SLOT(ret, name, params) ret(*name) params;
struct hdf5_api {
    HDF5_FUNCTIONS(HDF5_DECLARE_SLOT)
    /* library globals (identifiers valid once H5open has run) */
    hid_t *P_CLS_FILE_CREATE, *P_CLS_FILE_ACCESS, *T_STD_REF_OBJ, *T_NATIVE_INT, *T_NATIVE_UINT, *P_CLS_OBJECT_COPY,
        *P_CLS_LINK_CREATE, *P_CLS_GROUP_CREATE;
};
extern struct hdf5_api h5;

/* (include after Python.h) */

/* _fastcopy.c: the loops the native engine shares with the Python engine */
int fastcopy_stored_chunks(hid_t src, hid_t dst, int fd, int rank, size_t span_bytes, size_t max_gap,
                           PyObject *progress, unsigned long long *copied, unsigned long long *bytes);
int fastcopy_plain_attributes(hid_t src, hid_t dst, int index_type, int order, unsigned long long *position,
                              unsigned long long *copied);
int fastcopy_plain_type(hid_t type);

#endif
