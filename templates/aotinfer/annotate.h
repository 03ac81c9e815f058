// Annotations that make a class template a kernel family. The template scanner (aotinfer-gen,
// Clang LibTooling) reads them; nvcc never sees them.
//
//   template <typename dtype, int head_dim>
//   struct AOTINFER_FAMILY("merge_state")
//       AOTINFER_VALUES("dtype", "f16", "bf16")
//       AOTINFER_VALUES("head_dim", 64, 128, 256) merge_state {
//     static constexpr aotinfer_launch_info merge_launch = ...;
//     AOTINFER_ENTRY static __device__ void merge(const aotinfer_merge_state_params& p);
//   };
//
// The template parameters are the family's axes, in order, named as specs spell them:
//   typename  -> a dtype; AOTINFER_VALUES lists the allowed ones (f16 bf16 e4m3 e5m2 f32 i32)
//   enum      -> its enumerators (lowercase snake_case); AOTINFER_VALUES may restrict them
//   bool      -> false, true; AOTINFER_VALUES may restrict them
//   integer   -> AOTINFER_VALUES lists the allowed values
// A default argument makes an axis optional; a type default naming an earlier parameter
// (typename dtype_o = dtype_q) makes it follow that axis unless the spec sets it.
// Each AOTINFER_ENTRY static member function `f` becomes a kernel entry point; its launch
// geometry is the static constexpr member `f_launch`.
#pragma once

#if defined(AOTINFER_SCANNING)
#define AOTINFER_FAMILY(name) __attribute__((annotate("aotinfer.family", name)))
#define AOTINFER_VALUES(axis, ...) __attribute__((annotate("aotinfer.values", axis, __VA_ARGS__)))
#define AOTINFER_ENTRY __attribute__((annotate("aotinfer.entry")))
#else
#define AOTINFER_FAMILY(name)
#define AOTINFER_VALUES(axis, ...)
#define AOTINFER_ENTRY
#endif
