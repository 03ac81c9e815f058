#include "aotinfer/aotinfer.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "aotinfer/append_paged_kv.hpp"
#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_mla_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/cascade.hpp"
#include "aotinfer/log.hpp"
#include "aotinfer/merge_state.hpp"
#include "aotinfer/package.hpp"
#include "loading/driver.hpp"
#include "checks/tensor_checks.hpp"

// The merge_state / append_paged_kv front-ends of one (context, dtype, head_dim), made on first
// use: a call then costs a map lookup instead of a variant search.
template <typename FrontEnd>
class FrontEnds {
 public:
  const FrontEnd& get(const aotinfer::Package& package, aotinfer::DType dtype, int head_dim) {
    const Key key{aotinfer::detail::current_context(), dtype, head_dim};
    std::lock_guard lock(mutex_);
    auto it = made_.find(key);
    if (it == made_.end()) it = made_.emplace(key, FrontEnd(package, dtype, head_dim)).first;
    return it->second;  // map nodes stay put
  }

 private:
  using Key = std::tuple<CUcontext, aotinfer::DType, int>;
  std::mutex mutex_;
  std::map<Key, FrontEnd> made_;
};

// Every handle starts with a tag naming its type: a pointer to anything else (another handle
// type, freed memory, a stray pointer) is refused before any member is used. Best effort: it
// catches the common slips, not every use after free.
enum HandleTag : std::uint64_t {
  kPackageTag = 0x4b43'4150'4e49'544fULL,  // "OTINPACK"
  kDecodeTag = 0x4345'4444'4e49'544fULL,   // "OTINDDEC"
  kPrefillTag = 0x4552'5046'4e49'544fULL,  // "OTINFPRE"
  kMlaDecodeTag = 0x4344'414c'4d4e'544fULL,  // "OTNMLADC"
  kDeadTag = 0x4441'4544'4e49'544fULL,     // "OTINDEAD": destroyed
};

struct aotinfer_package {
  std::uint64_t tag = kPackageTag;
  aotinfer::Package package;
  std::vector<std::string> uris;
  mutable FrontEnds<aotinfer::MergeState> merges{};  // a cache: the package stays logically const
  mutable FrontEnds<aotinfer::AppendPagedKv> appends{};
};

struct aotinfer_batch_decode {
  std::uint64_t tag = kDecodeTag;
  aotinfer::BatchDecode decode;
};

struct aotinfer_batch_mla_decode {
  std::uint64_t tag = kMlaDecodeTag;
  aotinfer::BatchMlaDecode mla;
};

struct aotinfer_batch_prefill {
  std::uint64_t tag = kPrefillTag;
  aotinfer::BatchPrefill prefill;
};

namespace {

using aotinfer::Error;
using aotinfer::ErrorCode;

// The C statuses are the C++ error codes.
static_assert(int(ErrorCode::invalid_argument) == AOTINFER_INVALID_ARGUMENT);
static_assert(int(ErrorCode::not_found) == AOTINFER_NOT_FOUND);
static_assert(int(ErrorCode::corrupt_package) == AOTINFER_CORRUPT_PACKAGE);
static_assert(int(ErrorCode::no_driver) == AOTINFER_NO_DRIVER);
static_assert(int(ErrorCode::no_device) == AOTINFER_NO_DEVICE);
static_assert(int(ErrorCode::unsupported_arch) == AOTINFER_UNSUPPORTED_ARCH);
static_assert(int(ErrorCode::cuda_error) == AOTINFER_CUDA_ERROR);
static_assert(int(ErrorCode::io_error) == AOTINFER_IO_ERROR);

thread_local std::string last_error;
thread_local bool last_error_lost = false;  // the message could not be stored (out of memory)

void set_error(const char* message) noexcept {
  try {
    last_error = message;
    last_error_lost = false;
  } catch (...) {
    last_error.clear();
    last_error_lost = true;
  }
}

void clear_error() noexcept {
  last_error.clear();
  last_error_lost = false;
}

// Runs `body`, turning every exception into a status and the thread's last error: nothing
// thrown ever crosses the C boundary.
// Calls without a status (count, uri, close, destroy) keep the last error on success.
template <bool kClearOnSuccess = true, typename Body>
aotinfer_status guarded(Body&& body) noexcept {
  try {
    body();
    if (kClearOnSuccess) clear_error();
    return AOTINFER_OK;
  } catch (const Error& e) {
    set_error(e.what());
    const int code = int(e.code());
    return code >= AOTINFER_INVALID_ARGUMENT && code <= AOTINFER_IO_ERROR ? aotinfer_status(code) : AOTINFER_INTERNAL_ERROR;
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return AOTINFER_INTERNAL_ERROR;
  } catch (const std::exception& e) {
    set_error(e.what());
    return AOTINFER_INTERNAL_ERROR;
  } catch (...) {
    set_error("an unknown exception (a bug in aotinfer)");
    return AOTINFER_INTERNAL_ERROR;
  }
}

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Argument checks of one C entry point, each message "<function>: <argument> ...". They run
// before any handle is used and before the driver is touched.
struct Args {
  const char* function;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::invalid_argument, std::string(function) + ": " + what);
  }

  template <typename T>
  void aligned(const T* p, const char* name) const {
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0)
      fail(std::string(name) + ": expected a pointer aligned to " + std::to_string(alignof(T)) + " bytes, got " + address(p));
  }

  // A struct or value the call reads or writes.
  template <typename T>
  void pointer(const T* p, const char* name, const char* expected) const {
    if (!p) fail(std::string(name) + " must not be NULL: expected " + expected);
    aligned(p, name);
  }

  void text(const char* s, const char* name, const char* expected) const {
    if (!s) fail(std::string(name) + " must not be NULL: expected " + expected);
    if (!*s) fail(std::string(name) + ": expected " + expected + ", got an empty string");
  }

  // A host array of `count` elements: NULL only when empty.
  template <typename T>
  void array(const T* p, std::int64_t count, const char* name, const std::string& expected) const {
    if (!p && count > 0) fail(std::string(name) + " must not be NULL: expected " + expected);
    if (p) aligned(p, name);
  }

  // Device memory the kernels move in 16-byte vectors.
  void device(const void* p, const char* name, std::size_t alignment, bool required, const std::string& expected) const {
    if (!p) {
      if (required) fail(std::string(name) + " must not be NULL: expected " + expected);
      return;
    }
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
      fail(std::string(name) + ": expected device memory aligned to " + std::to_string(alignment) + " bytes, got " + address(p));
  }

  void at_least(std::int64_t value, std::int64_t minimum, const char* name) const {
    if (value < minimum) fail(std::string(name) + ": expected >= " + std::to_string(minimum) + ", got " + std::to_string(value));
  }

  // A handle made by `maker`: not NULL, aligned, and carrying its type's tag.
  template <typename Handle>
  void handle(const Handle* h, const char* name, std::uint64_t tag, const char* maker) const {
    if (!h) fail(std::string(name) + " must not be NULL: expected a handle from " + maker);
    if (reinterpret_cast<std::uintptr_t>(h) % alignof(Handle) != 0)
      fail(std::string(name) + ": expected a handle from " + maker + ", got a misaligned pointer " + address(h));
    std::uint64_t found = 0;
    std::memcpy(&found, static_cast<const void*>(h), sizeof found);
    if (found == kDeadTag) fail(std::string(name) + ": expected a handle from " + maker + ", got one that was already destroyed");
    if (found != tag)
      fail(std::string(name) + ": expected a handle from " + maker + ", got a pointer to something else (" + address(h) + ")");
  }
};

constexpr const char* kPackageMaker = "aotinfer_package_open";
constexpr const char* kDecodeMaker = "aotinfer_batch_decode_create";
constexpr const char* kPrefillMaker = "aotinfer_batch_prefill_create";
constexpr const char* kMlaDecodeMaker = "aotinfer_batch_mla_decode_create";

aotinfer::DType dtype_arg(const char* name, const char* what) {
  auto type = name ? aotinfer::parse_dtype(name) : std::nullopt;
  if (!type)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": unknown dtype '" + (name ? name : "(null)") + "' (f16, bf16, e4m3, e5m2, f32, i32)");
  return *type;
}

aotinfer::KvLayout layout_arg(const char* name) {
  const std::string layout = name ? name : "nhd";
  if (layout != "nhd" && layout != "hnd")
    throw Error(ErrorCode::invalid_argument, "layout must be \"nhd\" or \"hnd\", got \"" + layout + "\"");
  return layout == "nhd" ? aotinfer::KvLayout::nhd : aotinfer::KvLayout::hnd;
}

aotinfer::PosEncoding pos_encoding_arg(const char* name) {
  const std::string pos = name ? name : "none";
  if (pos == "none") return aotinfer::PosEncoding::none;
  if (pos == "rope_llama") return aotinfer::PosEncoding::rope_llama;
  if (pos == "alibi") return aotinfer::PosEncoding::alibi;
  throw Error(ErrorCode::invalid_argument, "pos_encoding must be none, rope_llama or alibi, got \"" + pos + "\"");
}

aotinfer::KvSplit kv_split_arg(const char* name, std::int32_t tokens) {
  const std::string mode = name ? name : "adaptive";
  aotinfer::KvSplit split;
  split.tokens = tokens;
  if (mode == "adaptive") split.mode = aotinfer::KvSplit::Mode::adaptive;
  else if (mode == "fixed") split.mode = aotinfer::KvSplit::Mode::fixed;
  else if (mode == "none") split.mode = aotinfer::KvSplit::Mode::none;
  else throw Error(ErrorCode::invalid_argument, "kv_split must be \"adaptive\", \"fixed\" or \"none\", got \"" + mode + "\"");
  return split;
}

// The C configs' window: a flag beside the count, so that a zeroed config has none.
std::int32_t window_arg(const Args& a, std::int32_t sliding_window, std::int32_t window_left, const std::string& field) {
  if (!sliding_window) return -1;
  a.at_least(window_left, 0, (field + "window_left (sliding_window set)").c_str());
  return window_left;
}

// A prefill config from its C form; `field` prefixes the fields' names in refusals ("config->",
// or "config->level." for a cascade's levels).
aotinfer::BatchPrefillConfig prefill_config_arg(const Args& a, const aotinfer_batch_prefill_config& c, const std::string& field) {
  a.at_least(c.head_dim, 1, (field + "head_dim").c_str());
  a.at_least(c.head_dim_vo, 0, (field + "head_dim_vo (0: head_dim)").c_str());
  a.at_least(c.num_qo_heads, 1, (field + "num_qo_heads").c_str());
  a.at_least(c.num_kv_heads, 1, (field + "num_kv_heads").c_str());
  if (c.cuda_graph) {
    a.at_least(c.max_batch, 1, (field + "max_batch (CUDA-graph mode)").c_str());
    a.at_least(c.max_total_q, 1, (field + "max_total_q (CUDA-graph mode)").c_str());
  }
  auto invalid = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, what); };
  aotinfer::BatchPrefillConfig config;
  config.dtype_q = dtype_arg(c.dtype_q, "dtype_q");
  config.dtype_kv = c.dtype_kv ? dtype_arg(c.dtype_kv, "dtype_kv") : config.dtype_q;
  config.dtype_o = c.dtype_o ? dtype_arg(c.dtype_o, "dtype_o") : config.dtype_q;
  config.head_dim = c.head_dim;
  config.head_dim_vo = c.head_dim_vo;
  config.num_qo_heads = c.num_qo_heads;
  config.num_kv_heads = c.num_kv_heads;
  const std::string storage = c.kv_storage ? c.kv_storage : "paged";
  if (storage != "paged" && storage != "ragged")
    invalid("kv_storage must be \"paged\" or \"ragged\", got \"" + storage + "\"");
  config.kv_storage = storage == "paged" ? aotinfer::KvStorage::paged : aotinfer::KvStorage::ragged;
  if (config.kv_storage == aotinfer::KvStorage::paged) a.at_least(c.page_size, 1, (field + "page_size (paged KV)").c_str());
  config.page_size = c.page_size;
  config.layout = layout_arg(c.layout);
  const std::string mask = c.mask ? c.mask : "causal";
  if (mask != "none" && mask != "causal" && mask != "custom")
    invalid("mask must be \"none\", \"causal\" or \"custom\", got \"" + mask + "\"");
  config.mask = mask == "causal" ? aotinfer::MaskMode::causal
                : mask == "custom" ? aotinfer::MaskMode::custom
                                   : aotinfer::MaskMode::none;
  config.pos_encoding = pos_encoding_arg(c.pos_encoding);
  config.window_left = window_arg(a, c.sliding_window, c.window_left, field);
  config.cuda_graph = c.cuda_graph != 0;
  config.max_batch = c.max_batch;
  config.max_total_q = c.max_total_q;
  config.kv_split = kv_split_arg(c.kv_split, c.kv_split_tokens);
  config.max_kv_len = c.max_kv_len;
  return config;
}

// Workspaces of a plan: device memory, 16-byte aligned (the plan lays out float4 rows in them).
void workspace_args(const Args& a, const void* float_workspace, std::size_t float_bytes, const void* int_workspace,
                    std::size_t int_bytes) {
  a.device(int_workspace, "int_workspace", 16, true, "device memory of the int_bytes that workspace_sizes gives");
  if (int_bytes == 0) a.fail("int_bytes: expected the int workspace's size in bytes (workspace_sizes gives it), got 0");
  if (!float_workspace && float_bytes > 0)
    a.fail("float_workspace must not be NULL when float_bytes is " + std::to_string(float_bytes));
  a.device(float_workspace, "float_workspace", 16, false, "");
}

// Marks a handle destroyed and frees it; anything that is not a live handle is left alone.
template <typename Handle>
void destroy(Handle* h, const char* function, const char* name, std::uint64_t tag, const char* maker) noexcept {
  if (!h) return;
  const aotinfer_status status = guarded<false>([&] { Args{function}.handle(h, name, tag, maker); });
  if (status != AOTINFER_OK) return;  // not ours to free: leaking beats freeing garbage
  h->tag = kDeadTag;
  delete h;
}

}  // namespace

extern "C" {

const char* aotinfer_last_error(void) {
  return last_error_lost ? "out of memory (the error message could not be stored)" : last_error.c_str();
}

void aotinfer_set_log_handler(aotinfer_log_handler handler, void* user) { aotinfer::set_log_handler(handler, user); }

aotinfer_status aotinfer_package_open(const char* dir, aotinfer_package** out) {
  return guarded([&] {
    const Args a{"aotinfer_package_open"};
    a.pointer(out, "out", "where to store the package handle");
    *out = nullptr;
    a.text(dir, "dir", "the path of a package folder (the one holding manifest.json)");
    auto package = aotinfer::Package::open(dir);
    std::vector<std::string> uris;
    for (const auto& v : package.manifest().variants) uris.push_back(v.key.uri());
    *out = new aotinfer_package{kPackageTag, std::move(package), std::move(uris)};
  });
}

void aotinfer_package_close(aotinfer_package* package) {
  destroy(package, "aotinfer_package_close", "package", kPackageTag, kPackageMaker);
}

size_t aotinfer_package_variant_count(const aotinfer_package* package) {
  size_t count = 0;
  guarded<false>([&] {
    Args{"aotinfer_package_variant_count"}.handle(package, "package", kPackageTag, kPackageMaker);
    count = package->uris.size();
  });
  return count;
}

const char* aotinfer_package_variant_uri(const aotinfer_package* package, size_t i) {
  const char* uri = nullptr;
  guarded<false>([&] {
    const Args a{"aotinfer_package_variant_uri"};
    a.handle(package, "package", kPackageTag, kPackageMaker);
    if (i >= package->uris.size())
      a.fail("i: expected an index below the variant count " + std::to_string(package->uris.size()) + ", got " + std::to_string(i));
    uri = package->uris[i].c_str();
  });
  return uri;
}

aotinfer_status aotinfer_package_find(const aotinfer_package* package, const char* uri) {
  return guarded([&] {
    const Args a{"aotinfer_package_find"};
    a.text(uri, "uri", "a variant URI such as merge_state.dtype-bf16.head_dim-128");
    a.handle(package, "package", kPackageTag, kPackageMaker);
    package->package.find(uri);
  });
}

aotinfer_status aotinfer_launch(const aotinfer_package* package, const char* uri, const char* entry,
                                const uint32_t grid[3], const void* params, size_t params_size, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_launch"};
    a.text(uri, "uri", "a variant URI");
    a.text(entry, "entry", "an entry point name of the variant");
    a.pointer(grid, "grid", "3 grid dimensions");
    if (grid[0] < 1 || grid[0] > 0x7fffffffu || grid[1] < 1 || grid[1] > 65535 || grid[2] < 1 || grid[2] > 65535)
      a.fail("grid: expected x in 1..2147483647 and y, z in 1..65535, got {" + std::to_string(grid[0]) + ", " +
             std::to_string(grid[1]) + ", " + std::to_string(grid[2]) + "}");
    if (!params) a.fail("params must not be NULL: expected the entry's params struct");
    if (params_size == 0) a.fail("params_size: expected the size of the entry's params struct, got 0");
    a.handle(package, "package", kPackageTag, kPackageMaker);
    package->package.kernel(uri, entry).launch(aotinfer::Grid{grid[0], grid[1], grid[2]}, params, params_size,
                                               static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_merge_state(const aotinfer_package* package, const char* dtype, int head_dim,
                                     const aotinfer_merge_state_params* params, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_merge_state"};
    a.text(dtype, "dtype", "\"f16\" or \"bf16\"");
    a.at_least(head_dim, 1, "head_dim");
    a.pointer(params, "params", "an aotinfer_merge_state_params");
    const aotinfer_merge_state_params& p = *params;
    a.at_least(p.rows, 0, "params->rows");
    const bool rows = p.rows > 0;
    a.device(p.v_a, "params->v_a", 16, rows, "device memory of rows x head_dim values");
    a.device(p.v_b, "params->v_b", 16, rows, "device memory of rows x head_dim values");
    a.device(p.v_out, "params->v_out", 16, rows, "device memory of rows x head_dim values");
    a.device(p.s_a, "params->s_a", 4, rows, "device memory of rows floats");
    a.device(p.s_b, "params->s_b", 4, rows, "device memory of rows floats");
    a.device(p.s_out, "params->s_out", 4, false, "");
    const aotinfer::DType type = dtype_arg(dtype, "merge_state");
    a.handle(package, "package", kPackageTag, kPackageMaker);
    aotinfer::MergeState(package->package, type, head_dim).run(p, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_append_paged_kv(const aotinfer_package* package, const char* dtype, int head_dim,
                                         const aotinfer_append_paged_kv_params* params, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_append_paged_kv"};
    a.text(dtype, "dtype", "\"f16\", \"bf16\", \"e4m3\" or \"e5m2\"");
    a.at_least(head_dim, 1, "head_dim");
    a.pointer(params, "params", "an aotinfer_append_paged_kv_params");
    const aotinfer_append_paged_kv_params& p = *params;
    a.at_least(p.nnz, 0, "params->nnz");
    if (p.nnz > 0) {
      a.at_least(p.kv.num_kv_heads, 1, "params->kv.num_kv_heads");
      a.at_least(p.kv.page_size, 1, "params->kv.page_size");
      for (auto [name, ptr] : {std::pair{"params->k", p.k}, {"params->v", p.v},
                               {"params->kv.k_pages", static_cast<const void*>(p.kv.k_pages)},
                               {"params->kv.v_pages", static_cast<const void*>(p.kv.v_pages)}})
        a.device(ptr, name, 16, true, "device memory");
      for (auto [name, ptr] : {std::pair{"params->batch_indices", static_cast<const void*>(p.batch_indices)},
                               {"params->positions", static_cast<const void*>(p.positions)},
                               {"params->kv.indptr", static_cast<const void*>(p.kv.indptr)},
                               {"params->kv.indices", static_cast<const void*>(p.kv.indices)}})
        a.device(ptr, name, 4, true, "device memory of int32 values");
    }
    const aotinfer::DType type = dtype_arg(dtype, "append_paged_kv");
    a.handle(package, "package", kPackageTag, kPackageMaker);
    aotinfer::AppendPagedKv(package->package, type, head_dim).run(p, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_merge_state_tensors_run(const aotinfer_package* package, const aotinfer_merge_state_tensors* t,
                                                 void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_merge_state_tensors_run"};
    a.pointer(t, "tensors", "an aotinfer_merge_state_tensors");
    a.handle(package, "package", kPackageTag, kPackageMaker);
    const auto call = aotinfer::detail::merge_state_call(*t, aotinfer::detail::current_device_ordinal);
    package->merges.get(package->package, call.dtype, call.head_dim).run(call.params, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_append_paged_kv_tensors_run(const aotinfer_package* package,
                                                     const aotinfer_append_paged_kv_tensors* t, const char* layout,
                                                     void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_append_paged_kv_tensors_run"};
    a.pointer(t, "tensors", "an aotinfer_append_paged_kv_tensors");
    const aotinfer::KvLayout kv_layout = layout_arg(layout);
    a.handle(package, "package", kPackageTag, kPackageMaker);
    const auto call = aotinfer::detail::append_paged_kv_call(*t, kv_layout, aotinfer::detail::current_device_ordinal);
    package->appends.get(package->package, call.dtype, call.head_dim).run(call.params, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_decode_create(const aotinfer_package* package, const aotinfer_batch_decode_config* c,
                                             aotinfer_batch_decode** out) {
  return guarded([&] {
    const Args a{"aotinfer_batch_decode_create"};
    a.pointer(out, "out", "where to store the decode handle");
    *out = nullptr;
    a.pointer(c, "config", "an aotinfer_batch_decode_config");
    a.at_least(c->head_dim, 1, "config->head_dim");
    a.at_least(c->num_qo_heads, 1, "config->num_qo_heads");
    a.at_least(c->num_kv_heads, 1, "config->num_kv_heads");
    a.at_least(c->page_size, 1, "config->page_size");
    if (c->cuda_graph) a.at_least(c->max_batch, 1, "config->max_batch (CUDA-graph mode)");
    aotinfer::BatchDecodeConfig config;
    config.dtype_q = dtype_arg(c->dtype_q, "dtype_q");
    config.dtype_kv = dtype_arg(c->dtype_kv, "dtype_kv");
    config.dtype_o = c->dtype_o ? dtype_arg(c->dtype_o, "dtype_o") : config.dtype_q;
    config.head_dim = c->head_dim;
    config.num_qo_heads = c->num_qo_heads;
    config.num_kv_heads = c->num_kv_heads;
    config.page_size = c->page_size;
    config.layout = layout_arg(c->layout);
    config.pos_encoding = pos_encoding_arg(c->pos_encoding);
    config.window_left = window_arg(a, c->sliding_window, c->window_left, "config->");
    config.cuda_graph = c->cuda_graph != 0;
    config.max_batch = c->max_batch;
    config.kv_split = kv_split_arg(c->kv_split, c->kv_split_tokens);
    config.max_kv_len = c->max_kv_len;
    a.at_least(c->q_len, 0, "config->q_len");
    config.q_len = c->q_len == 0 ? 1 : c->q_len;
    config.causal = c->non_causal == 0;
    config.custom_mask = c->custom_mask != 0;
    a.handle(package, "package", kPackageTag, kPackageMaker);
    *out = new aotinfer_batch_decode{kDecodeTag, aotinfer::BatchDecode(package->package, config)};
  });
}

void aotinfer_batch_decode_destroy(aotinfer_batch_decode* decode) {
  destroy(decode, "aotinfer_batch_decode_destroy", "decode", kDecodeTag, kDecodeMaker);
}

aotinfer_status aotinfer_batch_decode_workspace_sizes(const aotinfer_batch_decode* decode, int32_t max_batch,
                                                      int64_t max_kv_len, size_t* float_bytes, size_t* int_bytes) {
  return guarded([&] {
    const Args a{"aotinfer_batch_decode_workspace_sizes"};
    a.at_least(max_batch, 0, "max_batch");
    a.at_least(max_kv_len, 0, "max_kv_len");
    a.pointer(float_bytes, "float_bytes", "where to store the float workspace's size");
    a.pointer(int_bytes, "int_bytes", "where to store the int workspace's size");
    a.handle(decode, "decode", kDecodeTag, kDecodeMaker);
    auto sizes = decode->decode.workspace_sizes(max_batch, max_kv_len);
    *float_bytes = sizes.float_bytes;
    *int_bytes = sizes.int_bytes;
  });
}

aotinfer_status aotinfer_batch_decode_plan(aotinfer_batch_decode* decode, const int32_t* kv_indptr, int32_t batch,
                                           const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                           int32_t num_indices, int32_t num_pages, void* float_workspace,
                                           size_t float_bytes, void* int_workspace, size_t int_bytes, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_decode_plan"};
    a.at_least(batch, 0, "batch");
    a.array(kv_indptr, std::int64_t(batch) + 1, "kv_indptr", "batch + 1 page offsets");
    a.array(kv_last_page_len, batch, "kv_last_page_len", "batch lengths");
    a.at_least(num_indices, 0, "num_indices");
    a.array(kv_indices, num_indices, "kv_indices", "num_indices page ids (or NULL with num_indices 0)");
    a.at_least(num_pages, 0, "num_pages");
    workspace_args(a, float_workspace, float_bytes, int_workspace, int_bytes);
    a.handle(decode, "decode", kDecodeTag, kDecodeMaker);
    decode->decode.plan({kv_indptr, std::size_t(batch) + 1}, {kv_last_page_len, std::size_t(batch)},
                        {kv_indices, kv_indices ? std::size_t(num_indices) : 0}, num_pages,
                        {float_workspace, float_bytes, int_workspace, int_bytes}, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_decode_run(const aotinfer_batch_decode* decode, const aotinfer_batch_decode_run_args* in,
                                          void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_decode_run"};
    a.pointer(in, "args", "an aotinfer_batch_decode_run_args");
    a.handle(decode, "decode", kDecodeTag, kDecodeMaker);
    aotinfer::DecodeRunArgs args;
    args.batch = in->batch;
    args.q = in->q;
    args.k_pages = in->k_pages;
    args.v_pages = in->v_pages;
    args.kv_indptr = in->kv_indptr;
    args.kv_indices = in->kv_indices;
    args.kv_last_page_len = in->kv_last_page_len;
    args.o = in->o;
    args.lse = in->lse;
    args.q_positions = in->q_positions;
    args.sinks = in->sinks;
    args.sm_scale = in->sm_scale;
    args.logits_soft_cap = in->logits_soft_cap;
    args.rope_scale = in->rope_scale != 0 ? in->rope_scale : 1.f;
    args.rope_theta = in->rope_theta != 0 ? in->rope_theta : 1e4f;
    args.k_scale = in->k_scale != 0 ? in->k_scale : 1.f;
    args.v_scale = in->v_scale != 0 ? in->v_scale : 1.f;
    args.q_stride = in->q_stride_token;
    args.custom_mask = in->custom_mask;
    args.mask_indptr = in->mask_indptr;
    decode->decode.run(args, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_decode_tensors_run(const aotinfer_batch_decode* decode,
                                                  const aotinfer_batch_decode_tensors* tensors,
                                                  const aotinfer_attention_scalars* scalars, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_decode_tensors_run"};
    a.pointer(tensors, "tensors", "an aotinfer_batch_decode_tensors");
    a.pointer(scalars, "scalars", "an aotinfer_attention_scalars");
    a.handle(decode, "decode", kDecodeTag, kDecodeMaker);
    decode->decode.run(*tensors, *scalars, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_mla_decode_create(const aotinfer_package* package,
                                                 const aotinfer_batch_mla_decode_config* c, aotinfer_batch_mla_decode** out) {
  return guarded([&] {
    const Args a{"aotinfer_batch_mla_decode_create"};
    a.pointer(out, "out", "where to store the MLA decode handle");
    *out = nullptr;
    a.pointer(c, "config", "an aotinfer_batch_mla_decode_config");
    a.at_least(c->num_heads, 1, "config->num_heads");
    a.at_least(c->page_size, 1, "config->page_size");
    if (c->cuda_graph) {
      a.at_least(c->max_batch, 1, "config->max_batch (CUDA-graph mode)");
      a.at_least(c->q_len, 1, "config->q_len (CUDA-graph mode)");
    }
    aotinfer::BatchMlaDecodeConfig config;
    config.dtype = dtype_arg(c->dtype, "dtype");
    if (c->dtype_kv) config.dtype_kv = dtype_arg(c->dtype_kv, "dtype_kv");
    config.num_heads = c->num_heads;
    config.page_size = c->page_size;
    config.cuda_graph = c->cuda_graph != 0;
    config.max_batch = c->max_batch;
    config.q_len = c->q_len;
    a.handle(package, "package", kPackageTag, kPackageMaker);
    *out = new aotinfer_batch_mla_decode{kMlaDecodeTag, aotinfer::BatchMlaDecode(package->package, config)};
  });
}

void aotinfer_batch_mla_decode_destroy(aotinfer_batch_mla_decode* mla) {
  destroy(mla, "aotinfer_batch_mla_decode_destroy", "mla", kMlaDecodeTag, kMlaDecodeMaker);
}

aotinfer_status aotinfer_batch_mla_decode_workspace_sizes(const aotinfer_batch_mla_decode* mla, int32_t max_batch,
                                                          int32_t max_q_len, size_t* float_bytes, size_t* int_bytes) {
  return guarded([&] {
    const Args a{"aotinfer_batch_mla_decode_workspace_sizes"};
    a.pointer(float_bytes, "float_bytes", "where to store the float workspace's size");
    a.pointer(int_bytes, "int_bytes", "where to store the int workspace's size");
    a.handle(mla, "mla", kMlaDecodeTag, kMlaDecodeMaker);
    auto sizes = mla->mla.workspace_sizes(max_batch, max_q_len);
    *float_bytes = sizes.float_bytes;
    *int_bytes = sizes.int_bytes;
  });
}

aotinfer_status aotinfer_batch_mla_decode_plan(aotinfer_batch_mla_decode* mla, const int32_t* kv_indptr, int32_t batch,
                                               const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                               int32_t num_indices, int32_t num_pages, int32_t q_len,
                                               void* float_workspace, size_t float_bytes, void* int_workspace,
                                               size_t int_bytes, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_mla_decode_plan"};
    a.at_least(batch, 0, "batch");
    a.array(kv_indptr, std::int64_t(batch) + 1, "kv_indptr", "batch + 1 page offsets");
    a.array(kv_last_page_len, batch, "kv_last_page_len", "batch lengths");
    a.at_least(num_indices, 0, "num_indices");
    a.array(kv_indices, num_indices, "kv_indices", "num_indices page ids (or NULL with num_indices 0)");
    a.at_least(num_pages, 0, "num_pages");
    workspace_args(a, float_workspace, float_bytes, int_workspace, int_bytes);
    a.handle(mla, "mla", kMlaDecodeTag, kMlaDecodeMaker);
    mla->mla.plan({kv_indptr, std::size_t(batch) + 1}, {kv_last_page_len, std::size_t(batch)},
                  {kv_indices, kv_indices ? std::size_t(num_indices) : 0}, num_pages, q_len,
                  {float_workspace, float_bytes, int_workspace, int_bytes}, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_mla_decode_run(const aotinfer_batch_mla_decode* mla,
                                              const aotinfer_batch_mla_decode_run_args* in, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_mla_decode_run"};
    a.pointer(in, "args", "an aotinfer_batch_mla_decode_run_args");
    a.handle(mla, "mla", kMlaDecodeTag, kMlaDecodeMaker);
    aotinfer::MlaDecodeRunArgs args;
    args.batch = in->batch;
    args.q_nope = in->q_nope;
    args.q_pe = in->q_pe;
    args.q_nope_stride = in->q_nope_stride;
    args.q_pe_stride = in->q_pe_stride;
    args.ckv = in->ckv;
    args.kpe = in->kpe;
    args.ckv_stride_page = in->ckv_stride_page;
    args.kpe_stride_page = in->kpe_stride_page;
    args.kv_indices = in->kv_indices;
    args.o = in->o;
    args.lse = in->lse;
    args.sm_scale = in->sm_scale;
    args.ckv_scale = in->ckv_scale != 0 ? in->ckv_scale : 1.f;
    args.kpe_scale = in->kpe_scale != 0 ? in->kpe_scale : 1.f;
    mla->mla.run(args, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_mla_decode_tensors_run(const aotinfer_batch_mla_decode* mla,
                                                      const aotinfer_batch_mla_decode_tensors* tensors,
                                                      const aotinfer_mla_scalars* scalars, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_mla_decode_tensors_run"};
    a.pointer(tensors, "tensors", "an aotinfer_batch_mla_decode_tensors");
    a.pointer(scalars, "scalars", "an aotinfer_mla_scalars");
    a.handle(mla, "mla", kMlaDecodeTag, kMlaDecodeMaker);
    mla->mla.run(*tensors, *scalars, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_create(const aotinfer_package* package, const aotinfer_batch_prefill_config* c,
                                              aotinfer_batch_prefill** out) {
  return guarded([&] {
    const Args a{"aotinfer_batch_prefill_create"};
    a.pointer(out, "out", "where to store the prefill handle");
    *out = nullptr;
    a.pointer(c, "config", "an aotinfer_batch_prefill_config");
    const aotinfer::BatchPrefillConfig config = prefill_config_arg(a, *c, "config->");
    a.handle(package, "package", kPackageTag, kPackageMaker);
    *out = new aotinfer_batch_prefill{kPrefillTag, aotinfer::BatchPrefill(package->package, config)};
  });
}

void aotinfer_batch_prefill_destroy(aotinfer_batch_prefill* prefill) {
  destroy(prefill, "aotinfer_batch_prefill_destroy", "prefill", kPrefillTag, kPrefillMaker);
}

aotinfer_status aotinfer_batch_prefill_workspace_sizes(const aotinfer_batch_prefill* prefill, int64_t max_total_q,
                                                       int32_t max_batch, int64_t max_kv_len, size_t* float_bytes,
                                                       size_t* int_bytes) {
  return guarded([&] {
    const Args a{"aotinfer_batch_prefill_workspace_sizes"};
    a.at_least(max_total_q, 0, "max_total_q");
    a.at_least(max_batch, 0, "max_batch");
    a.at_least(max_kv_len, 0, "max_kv_len");
    a.pointer(float_bytes, "float_bytes", "where to store the float workspace's size");
    a.pointer(int_bytes, "int_bytes", "where to store the int workspace's size");
    a.handle(prefill, "prefill", kPrefillTag, kPrefillMaker);
    auto sizes = prefill->prefill.workspace_sizes(max_total_q, max_batch, max_kv_len);
    *float_bytes = sizes.float_bytes;
    *int_bytes = sizes.int_bytes;
  });
}

aotinfer_status aotinfer_batch_prefill_plan_paged(aotinfer_batch_prefill* prefill, const int32_t* qo_indptr,
                                                  const int32_t* kv_indptr, int32_t batch,
                                                  const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                                  int32_t num_indices, int32_t num_pages, void* float_workspace,
                                                  size_t float_bytes, void* int_workspace, size_t int_bytes,
                                                  void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_prefill_plan_paged"};
    a.at_least(batch, 0, "batch");
    a.array(qo_indptr, std::int64_t(batch) + 1, "qo_indptr", "batch + 1 token offsets");
    a.array(kv_indptr, std::int64_t(batch) + 1, "kv_indptr", "batch + 1 page offsets");
    a.array(kv_last_page_len, batch, "kv_last_page_len", "batch lengths");
    a.at_least(num_indices, 0, "num_indices");
    a.array(kv_indices, num_indices, "kv_indices", "num_indices page ids (or NULL with num_indices 0)");
    a.at_least(num_pages, 0, "num_pages");
    workspace_args(a, float_workspace, float_bytes, int_workspace, int_bytes);
    a.handle(prefill, "prefill", kPrefillTag, kPrefillMaker);
    prefill->prefill.plan_paged({qo_indptr, std::size_t(batch) + 1}, {kv_indptr, std::size_t(batch) + 1},
                                {kv_last_page_len, std::size_t(batch)},
                                {kv_indices, kv_indices ? std::size_t(num_indices) : 0}, num_pages,
                                {float_workspace, float_bytes, int_workspace, int_bytes},
                                static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_plan_ragged(aotinfer_batch_prefill* prefill, const int32_t* qo_indptr,
                                                   const int32_t* kv_indptr, int32_t batch, void* float_workspace,
                                                   size_t float_bytes, void* int_workspace, size_t int_bytes,
                                                   void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_prefill_plan_ragged"};
    a.at_least(batch, 0, "batch");
    a.array(qo_indptr, std::int64_t(batch) + 1, "qo_indptr", "batch + 1 token offsets");
    a.array(kv_indptr, std::int64_t(batch) + 1, "kv_indptr", "batch + 1 token offsets");
    workspace_args(a, float_workspace, float_bytes, int_workspace, int_bytes);
    a.handle(prefill, "prefill", kPrefillTag, kPrefillMaker);
    prefill->prefill.plan_ragged({qo_indptr, std::size_t(batch) + 1}, {kv_indptr, std::size_t(batch) + 1},
                                 {float_workspace, float_bytes, int_workspace, int_bytes},
                                 static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_run(const aotinfer_batch_prefill* prefill,
                                           const aotinfer_batch_prefill_run_args* in, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_prefill_run"};
    a.pointer(in, "args", "an aotinfer_batch_prefill_run_args");
    a.handle(prefill, "prefill", kPrefillTag, kPrefillMaker);
    aotinfer::PrefillRunArgs args;
    args.batch = in->batch;
    args.total_q = in->total_q;
    args.q = in->q;
    args.qo_indptr = in->qo_indptr;
    args.k = in->k;
    args.v = in->v;
    args.kv_indptr = in->kv_indptr;
    args.kv_indices = in->kv_indices;
    args.kv_last_page_len = in->kv_last_page_len;
    args.o = in->o;
    args.lse = in->lse;
    args.sinks = in->sinks;
    args.sm_scale = in->sm_scale;
    args.logits_soft_cap = in->logits_soft_cap;
    args.rope_scale = in->rope_scale != 0 ? in->rope_scale : 1.f;
    args.rope_theta = in->rope_theta != 0 ? in->rope_theta : 1e4f;
    args.q_stride = in->q_stride_token;
    args.k_scale = in->k_scale != 0 ? in->k_scale : 1.f;
    args.v_scale = in->v_scale != 0 ? in->v_scale : 1.f;
    args.custom_mask = in->custom_mask;
    args.mask_indptr = in->mask_indptr;
    args.v_stride = in->v_stride;
    prefill->prefill.run(args, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_tensors_run(const aotinfer_batch_prefill* prefill,
                                                   const aotinfer_batch_prefill_tensors* tensors,
                                                   const aotinfer_attention_scalars* scalars, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_batch_prefill_tensors_run"};
    a.pointer(tensors, "tensors", "an aotinfer_batch_prefill_tensors");
    a.pointer(scalars, "scalars", "an aotinfer_attention_scalars");
    a.handle(prefill, "prefill", kPrefillTag, kPrefillMaker);
    prefill->prefill.run(*tensors, *scalars, static_cast<aotinfer::Stream>(stream));
  });
}

}  // extern "C"

// ---- Cascade (aotinfer/cascade.hpp) -------------------------------------------------------

namespace {
constexpr std::uint64_t kCascadeTag = 0x4341'4353'4e49'544fULL;  // "OTINSCAC"
constexpr const char* kCascadeMaker = "aotinfer_cascade_create";
}  // namespace

struct aotinfer_cascade {
  std::uint64_t tag = kCascadeTag;
  aotinfer::Cascade cascade;
};

namespace {

// The levels' prefill config from its C form, refusing what a cascade cannot take (ragged KV,
// RoPE, a window: they need one KV or positions that run on across levels) by field name.
aotinfer::BatchPrefillConfig cascade_level_arg(const Args& a, const aotinfer_batch_prefill_config& c) {
  auto named = [](const char* s, const char* fallback) { return std::string(s ? s : fallback); };
  if (named(c.kv_storage, "paged") != "paged")
    a.fail("config->level.kv_storage: expected \"paged\" or NULL (the levels share one page pool), got \"" + named(c.kv_storage, "") + "\"");
  if (named(c.pos_encoding, "none") != "none")
    a.fail("config->level.pos_encoding: expected \"none\" or NULL (positions restart in each level: rotate q and K before), got \"" +
           named(c.pos_encoding, "") + "\"");
  if (c.sliding_window) a.fail("config->level.sliding_window: expected 0 (a window counts positions, which restart in each level)");
  const std::string mask = named(c.mask, "causal");
  if (mask != "none" && mask != "causal") a.fail("config->level.mask: expected \"none\" or \"causal\", got \"" + mask + "\"");
  return prefill_config_arg(a, c, "config->level.");
}

std::string level_name(const char* array, std::int32_t l) { return std::string(array) + "[" + std::to_string(l) + "]"; }

}  // namespace

extern "C" {

aotinfer_status aotinfer_cascade_create(const aotinfer_package* package, const aotinfer_cascade_config* c,
                                        aotinfer_cascade** out) {
  return guarded([&] {
    const Args a{"aotinfer_cascade_create"};
    a.pointer(out, "out", "where to store the cascade handle");
    *out = nullptr;
    a.pointer(c, "config", "an aotinfer_cascade_config");
    a.at_least(c->num_levels, 1, "config->num_levels");
    aotinfer::CascadeConfig config{cascade_level_arg(a, c->level), c->num_levels};
    a.handle(package, "package", kPackageTag, kPackageMaker);
    *out = new aotinfer_cascade{kCascadeTag, aotinfer::Cascade(package->package, config)};
  });
}

void aotinfer_cascade_destroy(aotinfer_cascade* cascade) {
  destroy(cascade, "aotinfer_cascade_destroy", "cascade", kCascadeTag, kCascadeMaker);
}

aotinfer_status aotinfer_cascade_workspace_sizes(const aotinfer_cascade* cascade, int64_t max_total_q, int32_t max_groups,
                                                 int64_t max_kv_len, size_t* float_bytes, size_t* int_bytes) {
  return guarded([&] {
    const Args a{"aotinfer_cascade_workspace_sizes"};
    a.at_least(max_total_q, 0, "max_total_q");
    a.at_least(max_groups, 0, "max_groups");
    a.at_least(max_kv_len, 0, "max_kv_len");
    a.pointer(float_bytes, "float_bytes", "where to store the float workspace's size");
    a.pointer(int_bytes, "int_bytes", "where to store the int workspace's size");
    a.handle(cascade, "cascade", kCascadeTag, kCascadeMaker);
    auto sizes = cascade->cascade.workspace_sizes(max_total_q, max_groups, max_kv_len);
    *float_bytes = sizes.float_bytes;
    *int_bytes = sizes.int_bytes;
  });
}

aotinfer_status aotinfer_cascade_plan(aotinfer_cascade* cascade, int32_t num_levels, const int32_t* num_groups,
                                      const int32_t* const* qo_indptr, const int32_t* const* kv_indptr,
                                      const int32_t* const* kv_last_page_len, const int32_t* const* kv_indices,
                                      const int32_t* num_indices, int32_t num_pages, void* float_workspace,
                                      size_t float_bytes, void* int_workspace, size_t int_bytes, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_cascade_plan"};
    a.at_least(num_levels, 1, "num_levels");
    a.pointer(num_groups, "num_groups", "num_levels group counts");
    a.pointer(qo_indptr, "qo_indptr", "num_levels host arrays");
    a.pointer(kv_indptr, "kv_indptr", "num_levels host arrays");
    a.pointer(kv_last_page_len, "kv_last_page_len", "num_levels host arrays");
    if (kv_indices) a.pointer(num_indices, "num_indices", "num_levels counts (kv_indices is given)");
    std::vector<aotinfer::CascadeLevel> levels(static_cast<std::size_t>(num_levels));
    for (std::int32_t l = 0; l < num_levels; ++l) {
      const std::int32_t groups = num_groups[l];
      a.at_least(groups, 0, level_name("num_groups", l).c_str());
      a.array(qo_indptr[l], std::int64_t(groups) + 1, level_name("qo_indptr", l).c_str(), "num_groups + 1 token offsets");
      a.array(kv_indptr[l], std::int64_t(groups) + 1, level_name("kv_indptr", l).c_str(), "num_groups + 1 page offsets");
      a.array(kv_last_page_len[l], groups, level_name("kv_last_page_len", l).c_str(), "num_groups lengths");
      aotinfer::CascadeLevel& level = levels[std::size_t(l)];
      level.qo_indptr = {qo_indptr[l], std::size_t(groups) + 1};
      level.kv_indptr = {kv_indptr[l], std::size_t(groups) + 1};
      level.kv_last_page_len = {kv_last_page_len[l], std::size_t(groups)};
      if (!kv_indices) continue;
      a.at_least(num_indices[l], 0, level_name("num_indices", l).c_str());
      a.array(kv_indices[l], num_indices[l], level_name("kv_indices", l).c_str(), "num_indices page ids (or NULL with 0)");
      level.kv_indices = {kv_indices[l], kv_indices[l] ? std::size_t(num_indices[l]) : 0};
    }
    a.at_least(num_pages, 0, "num_pages");
    workspace_args(a, float_workspace, float_bytes, int_workspace, int_bytes);
    a.handle(cascade, "cascade", kCascadeTag, kCascadeMaker);
    cascade->cascade.plan(levels, num_pages, {float_workspace, float_bytes, int_workspace, int_bytes},
                          static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_cascade_run(const aotinfer_cascade* cascade, const aotinfer_cascade_run_args* in, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_cascade_run"};
    a.pointer(in, "args", "an aotinfer_cascade_run_args");
    for (auto [name, arrays] : {std::pair{"args->qo_indptr", in->qo_indptr}, {"args->kv_indptr", in->kv_indptr},
                                {"args->kv_indices", in->kv_indices}, {"args->kv_last_page_len", in->kv_last_page_len}})
      a.pointer(arrays, name, "a host array of num_levels device pointers");
    a.handle(cascade, "cascade", kCascadeTag, kCascadeMaker);
    std::vector<aotinfer::CascadeLevelArrays> levels(std::size_t(cascade->cascade.config().num_levels));
    for (std::size_t l = 0; l < levels.size(); ++l)
      levels[l] = {in->qo_indptr[l], in->kv_indptr[l], in->kv_indices[l], in->kv_last_page_len[l]};
    aotinfer::CascadeRunArgs args;
    args.total_q = in->total_q;
    args.q = in->q;
    args.k_pages = in->k_pages;
    args.v_pages = in->v_pages;
    args.levels = levels;
    args.o = in->o;
    args.lse = in->lse;
    args.sinks = in->sinks;
    args.sm_scale = in->sm_scale;
    args.logits_soft_cap = in->logits_soft_cap;
    cascade->cascade.run(args, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_cascade_tensors_run(const aotinfer_cascade* cascade, const aotinfer_cascade_tensors* tensors,
                                             const aotinfer_attention_scalars* scalars, void* stream) {
  return guarded([&] {
    const Args a{"aotinfer_cascade_tensors_run"};
    a.pointer(tensors, "tensors", "an aotinfer_cascade_tensors");
    a.pointer(scalars, "scalars", "an aotinfer_attention_scalars");
    for (auto [name, arrays] : {std::pair{"tensors->qo_indptr", tensors->qo_indptr}, {"tensors->kv_indptr", tensors->kv_indptr},
                                {"tensors->kv_indices", tensors->kv_indices},
                                {"tensors->kv_last_page_len", tensors->kv_last_page_len}})
      a.pointer(arrays, name, "num_levels tensors");
    a.handle(cascade, "cascade", kCascadeTag, kCascadeMaker);
    cascade->cascade.run(*tensors, *scalars, static_cast<aotinfer::Stream>(stream));
  });
}

}  // extern "C"
