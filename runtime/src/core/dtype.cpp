#include "aotinfer/dtype.hpp"

#include <array>

namespace aotinfer {
namespace {

struct Row {
  DType type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<Row, 7> kTable = {{{DType::f16, "f16", 2},
                                        {DType::bf16, "bf16", 2},
                                        {DType::e4m3, "e4m3", 1},
                                        {DType::e5m2, "e5m2", 1},
                                        {DType::f32, "f32", 4},
                                        {DType::i32, "i32", 4},
                                        {DType::u8, "u8", 1}}};

}  // namespace

std::string_view dtype_name(DType t) { return kTable[std::size_t(t)].name; }
std::size_t dtype_size(DType t) { return kTable[std::size_t(t)].size; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& row : kTable)
    if (row.name == name) return row.type;
  return std::nullopt;
}

}  // namespace aotinfer
