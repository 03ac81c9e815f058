// Element types by the names specs and URIs use.
#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

namespace aotinfer {

enum class DType { f16, bf16, e4m3, e5m2, f32, i32, u8 };

std::string_view dtype_name(DType t);               // "bf16"
std::optional<DType> parse_dtype(std::string_view name);
std::size_t dtype_size(DType t);                    // bytes per element

}  // namespace aotinfer
