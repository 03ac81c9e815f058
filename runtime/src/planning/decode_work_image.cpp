#include "planning/decode_work_image.hpp"

#include <cstring>

#include "planning/plan_inputs.hpp"

namespace aotinfer::detail {

DecodeWorkLayout::DecodeWorkLayout(std::int32_t work_capacity, std::int32_t batch_capacity) {
  const std::size_t work = align_up(std::size_t(work_capacity) * 4);
  request = align_up(2 * 4);
  kv_begin = request + work;
  kv_end = kv_begin + work;
  page_begin = kv_end + work;
  kv_len = page_begin + work;
  merge_indptr = kv_len + work;
  end = merge_indptr + align_up(std::size_t(batch_capacity + 1) * 4);
}

void write_decode_work(char* image, const DecodeWorkLayout& layout, const DecodeWorkPlan& work, std::int32_t batch,
                       std::span<const std::int32_t> kv_indptr, std::span<const std::int32_t> kv_lengths) {
  const std::int32_t counts[2] = {work.num_work, batch};
  std::memcpy(image + layout.counts, counts, sizeof counts);
  const std::size_t work_bytes = work.request.size() * 4;
  std::memcpy(image + layout.request, work.request.data(), work_bytes);
  std::memcpy(image + layout.kv_begin, work.kv_begin.data(), work_bytes);
  std::memcpy(image + layout.kv_end, work.kv_end.data(), work_bytes);
  auto* page_begin = reinterpret_cast<std::int32_t*>(image + layout.page_begin);
  auto* kv_len = reinterpret_cast<std::int32_t*>(image + layout.kv_len);
  for (std::int32_t x = 0; x < work.padded_work; ++x) {  // CUDA-graph padding past num_work: zeros
    const bool item = x < work.num_work;
    page_begin[x] = item ? kv_indptr[work.request[x]] : 0;
    kv_len[x] = item ? kv_lengths[work.request[x]] : 0;
  }
  std::memcpy(image + layout.merge_indptr, work.merge_indptr.data(), work.merge_indptr.size() * 4);
}

}  // namespace aotinfer::detail
