/* The aotinfer C API: open a kernel package, query it, run kernels. Every call returns a
 * status; on failure aotinfer_last_error() holds the message (per thread). Streams are CUstream
 * or cudaStream_t values passed as void*. */
#ifndef AOTINFER_H
#define AOTINFER_H

#include <stddef.h>
#include <stdint.h>

#include "aotinfer/params/merge_state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aotinfer_status {
  AOTINFER_OK = 0,
  AOTINFER_INVALID_ARGUMENT = 1,
  AOTINFER_NOT_FOUND = 2,
  AOTINFER_CORRUPT_PACKAGE = 3,
  AOTINFER_NO_DRIVER = 4,
  AOTINFER_NO_DEVICE = 5,
  AOTINFER_UNSUPPORTED_ARCH = 6,
  AOTINFER_CUDA_ERROR = 7,
  AOTINFER_IO_ERROR = 8,
  AOTINFER_INTERNAL_ERROR = 99
} aotinfer_status;

typedef struct aotinfer_package aotinfer_package;

/* The message of the calling thread's last failed call ("" if none). */
const char* aotinfer_last_error(void);

aotinfer_status aotinfer_package_open(const char* dir, aotinfer_package** out);
void aotinfer_package_close(aotinfer_package* package);

size_t aotinfer_package_variant_count(const aotinfer_package* package);
/* The URI of variant i (0 <= i < count), valid while the package is open; NULL if out of range. */
const char* aotinfer_package_variant_uri(const aotinfer_package* package, size_t i);
/* AOTINFER_OK when the package holds the variant, AOTINFER_NOT_FOUND (with a message naming
 * the nearest variants) otherwise. */
aotinfer_status aotinfer_package_find(const aotinfer_package* package, const char* uri);

/* Launches entry `entry` of variant `uri` with the given grid and params struct. */
aotinfer_status aotinfer_launch(const aotinfer_package* package, const char* uri, const char* entry,
                                const uint32_t grid[3], const void* params, size_t params_size,
                                void* stream);

/* merge_state for dtype "f16" or "bf16" and the given head_dim (see params/merge_state.h). */
aotinfer_status aotinfer_merge_state(const aotinfer_package* package, const char* dtype, int head_dim,
                                     const aotinfer_merge_state_params* params, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* AOTINFER_H */
