// Hand-built family schemas for spec reading, independent of the scanner: "toy", with every axis
// kind (a dtype, a dtype that follows it, an enum, a bool, an integer), and "narrow", whose
// follower allows fewer values than its leader. The spec tests and the spec fuzz target use them.
#pragma once
#include <string>
#include <vector>

#include "schema.hpp"

namespace aotinfer::test {

inline std::vector<gen::FamilySchema> toy_families(std::vector<std::string> head_dims = {"64", "128", "256"}) {
  using gen::AxisKind;
  gen::FamilySchema toy;
  toy.name = "toy";
  toy.cpp_name = "aotinfer::toy";
  toy.header = "toy.cuh";
  toy.where = {"toy.cuh", 10};
  toy.axes = {
      {"dtype", AxisKind::dtype, {"f16", "bf16"}, {}, {}, "", {"toy.cuh", 11}},
      {"dtype_o", AxisKind::dtype, {"f16", "bf16", "f32"}, {}, "dtype", "", {"toy.cuh", 12}},
      {"mask", AxisKind::enumeration, {"none", "causal"}, "none", {}, "aotinfer::Mask", {"toy.cuh", 13}},
      {"soft_cap", AxisKind::boolean, {"false", "true"}, "false", {}, "", {"toy.cuh", 14}},
      {"head_dim", AxisKind::integer, std::move(head_dims), {}, {}, "int", {"toy.cuh", 15}},
  };
  toy.entries = {{"run", "toy_params", {"toy.cuh", 20}}};
  gen::FamilySchema narrow = toy;
  narrow.name = "narrow";
  narrow.axes[1].allowed = {"f16"};  // dtype_o follows dtype but allows only f16
  return {narrow, toy};
}

}  // namespace aotinfer::test
