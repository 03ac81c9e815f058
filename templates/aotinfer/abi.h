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

/* 2: sliding windows and soft caps are run-time values (no variant axes; decode params lost
 * window_left); 3: prefill params carry v_scale (fp8 K/V in prefill); 4: the prefill mask is a run-time value
 * (mask_mode, custom masks; no variant axis); 5: decode params carry q_len and q_causal (several
 * query tokens per request); 6: prefill params carry alibi_scale (ALiBi at run time); 7: prefill
 * params carry V's strides (head_dim_vo != head_dim); 8: MLA decode params carry ckv_scale and
 * kpe_scale (fp8 latent caches); 9: decode params carry custom_mask and mask_indptr (speculative
 * trees on the decode kernel); 10: MLA decode params carry the cache's TMA maps */
#define AOTINFER_ABI_VERSION 10u

typedef struct aotinfer_launch_info {
  uint32_t abi_version;        /* AOTINFER_ABI_VERSION of the kernel's build */
  uint32_t params_size;        /* sizeof the params struct the entry takes */
  uint32_t block[3];           /* threads per CTA */
  uint32_t dynamic_smem_bytes; /* dynamic shared memory per CTA */
  uint32_t tile[4];            /* family-specific sizes the host needs (see the family's header) */
} aotinfer_launch_info;

/* A TMA tensor map (the driver's CUtensorMap): 128 bytes the host encodes with
 * cuTensorMapEncodeTiled and a kernel reads from its params, 128-byte aligned as cuda.h
 * declares it. */
#ifdef __cplusplus
#define AOTINFER_ALIGNAS(n) alignas(n)
#else
#define AOTINFER_ALIGNAS(n) _Alignas(n)
#endif
typedef struct aotinfer_tensor_map {
  AOTINFER_ALIGNAS(128) uint64_t opaque[16];
} aotinfer_tensor_map;

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

/* Threads of a CTA that splits into whole warps and into whole rows of `per_row` threads each:
 * the largest common multiple of 32 and per_row up to `target` (or the least one, if it is
 * larger). head_dim 96 has 12 16-byte chunks per 16-bit row: 96 threads where 8-, 16- and
 * 32-chunk rows take 128. */
constexpr uint32_t whole_rows_threads(uint32_t per_row, uint32_t target) {
  uint32_t unit = 32;
  while (unit % per_row != 0) unit += 32;
  return target > unit ? target / unit * unit : unit;
}
}  // namespace aotinfer
#endif

#endif /* AOTINFER_ABI_H */
