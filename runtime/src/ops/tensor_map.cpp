#include "ops/tensor_map.hpp"

#include <algorithm>
#include <string>

#include "loading/driver.hpp"

namespace aotinfer::detail {

static_assert(sizeof(aotinfer_tensor_map) == sizeof(CUtensorMap) && alignof(aotinfer_tensor_map) == alignof(CUtensorMap),
              "aotinfer_tensor_map mirrors CUtensorMap");

namespace {

aotinfer_tensor_map encode(DType dtype, const void* data, const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                           const cuuint32_t (&box)[3], const std::string& what) {
  const cuuint32_t steps[3] = {1, 1, 1};
  const CUtensorMapDataType type = dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  aotinfer_tensor_map map;
  const CUresult result = driver().cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap*>(&map), type, 3, const_cast<void*>(data), dims, strides, box, steps,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) fail(result, "encoding a TMA map of " + what);
  return map;
}

}  // namespace

aotinfer_tensor_map rows_tensor_map(DType dtype, const void* data, std::int64_t rows, std::int64_t heads, int head_dim,
                                    std::int64_t row_stride, int box_heads, int box_rows) {
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(rows)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim) * 2, cuuint64_t(row_stride) * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(box_heads), cuuint32_t(box_rows)};
  return encode(dtype, data, dims, strides, box,
                "a " + std::to_string(rows) + " x " + std::to_string(heads) + " x " + std::to_string(head_dim) +
                    " tensor (row stride " + std::to_string(row_stride) + ", box " + std::to_string(box_heads) + " x " +
                    std::to_string(box_rows) + ")");
}

aotinfer_tensor_map paged_tensor_map(DType dtype, const void* data, int width, int page_size, std::int64_t page_stride) {
  constexpr cuuint64_t kPages = (cuuint64_t(1) << 31) - 1;
  const cuuint64_t dims[3] = {cuuint64_t(width), cuuint64_t(page_size), kPages};
  const cuuint64_t strides[2] = {cuuint64_t(width) * 2, cuuint64_t(page_stride) * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(std::min(page_size, 64)), 1};
  return encode(dtype, data, dims, strides, box,
                "a paged cache of width " + std::to_string(width) + " (page_size " + std::to_string(page_size) +
                    ", page stride " + std::to_string(page_stride) + ")");
}

}  // namespace aotinfer::detail
