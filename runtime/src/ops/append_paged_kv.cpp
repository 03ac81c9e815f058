#include "aotinfer/append_paged_kv.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace aotinfer {

VariantKey AppendPagedKv::variant_key(DType dtype, int head_dim) {
  return VariantKey{"append_paged_kv", {{"dtype", std::string(dtype_name(dtype))}, {"head_dim", std::to_string(head_dim)}}};
}

AppendPagedKv::AppendPagedKv(const Package& package, DType dtype, int head_dim)
    : dtype_(dtype), kernel_(package.kernel(variant_key(dtype, head_dim), "append")) {}

void AppendPagedKv::run(const aotinfer_append_paged_kv_params& p, Stream stream) const {
  auto invalid = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "append_paged_kv: " + what); };
  if (p.nnz < 0) invalid("nnz must be >= 0, got " + std::to_string(p.nnz));
  if (p.nnz == 0) return;
  if (p.kv.num_kv_heads < 1 || p.kv.page_size < 1) invalid("num_kv_heads and page_size must be >= 1");
  if (!p.k || !p.v || !p.batch_indices || !p.positions || !p.kv.k_pages || !p.kv.v_pages || !p.kv.indptr || !p.kv.indices)
    invalid("k, v, batch_indices, positions, k_pages, v_pages, indptr and indices must not be null");
  // The kernel moves 16-byte vectors: every row it touches must start on a 16-byte boundary.
  const std::int64_t elem = std::int64_t(dtype_size(dtype_));
  for (auto [name, ptr] : {std::pair{"k", p.k}, {"v", p.v}, {"k_pages", static_cast<const void*>(p.kv.k_pages)},
                           {"v_pages", static_cast<const void*>(p.kv.v_pages)}})
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) invalid(std::string(name) + " must be 16-byte aligned");
  for (auto [name, stride] : {std::pair{"k_stride_token", p.k_stride_token}, {"v_stride_token", p.v_stride_token},
                              {"kv.stride_page", p.kv.stride_page}, {"kv.stride_token", p.kv.stride_token},
                              {"kv.stride_head", p.kv.stride_head}})
    if (stride * elem % 16 != 0) invalid(std::string(name) + " must be a multiple of 16 bytes, got " + std::to_string(stride) + " elements");
  const std::int64_t rows = p.nnz * p.kv.num_kv_heads;
  const std::int64_t per_cta = kernel_.launch_info().tile[0];
  const std::int64_t ctas = (rows + per_cta - 1) / per_cta;
  if (ctas > 0x7fffffff) invalid(std::to_string(p.nnz) + " tokens exceed one launch's grid");
  kernel_.launch(Grid{unsigned(ctas)}, p, stream);
}

}  // namespace aotinfer
