/* The kernel ABI shared by kernels (compiled by nvcc) and the runtime (plain C or C++ on the
 * host). Every entry point of a variant is
 *
 *     extern "C" __global__ void <symbol>(const __grid_constant__ <Params> params);
 *
 * and exports its launch geometry as a global the runtime reads at load time:
 *
 *     extern "C" __device__ const aotinfer_launch_info <symbol>__launch;
 *
 * so the geometry has one source, the template's traits. */
#ifndef AOTINFER_ABI_H
#define AOTINFER_ABI_H

#include <stdint.h>

#define AOTINFER_ABI_VERSION 1u

typedef struct aotinfer_launch_info {
  uint32_t abi_version;        /* AOTINFER_ABI_VERSION of the kernel's build */
  uint32_t params_size;        /* sizeof the params struct the entry takes */
  uint32_t block[3];           /* threads per CTA */
  uint32_t dynamic_smem_bytes; /* dynamic shared memory per CTA */
  uint32_t tile[4];            /* family-specific sizes the host needs (see the family's header) */
} aotinfer_launch_info;

#ifdef __cplusplus
namespace aotinfer {
/* Launch geometry for an entry taking `Params`; used inside templates' constexpr traits. */
template <typename Params>
constexpr aotinfer_launch_info make_launch_info(uint32_t threads, uint32_t dynamic_smem_bytes,
                                                uint32_t tile0 = 0, uint32_t tile1 = 0,
                                                uint32_t tile2 = 0, uint32_t tile3 = 0) {
  return aotinfer_launch_info{AOTINFER_ABI_VERSION, uint32_t(sizeof(Params)), {threads, 1, 1},
                              dynamic_smem_bytes, {tile0, tile1, tile2, tile3}};
}
}  // namespace aotinfer
#endif

#endif /* AOTINFER_ABI_H */
