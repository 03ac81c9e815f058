// The C API under bad arguments, without a GPU or driver: every entry point of aotinfer.h is
// called with each kind of bad argument (NULL, misaligned or foreign handles, NULL and misaligned
// pointers, empty strings, zero and negative sizes) and must return AOTINFER_INVALID_ARGUMENT
// with a message naming the function and the argument, never throw or crash. Argument checks
// come before the handle is used (a zeroed fake handle proves it: a bad argument is named
// first, the fake is named when every argument is good) and before the driver: calls whose
// arguments pass stop at the driver (AOTINFER_NO_DRIVER on a machine without libcuda).
#include "catch.hpp"

#include "fake_package.hpp"
#include "test_util.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "aotinfer/aotinfer.h"
#include "aotinfer/json.hpp"
#include "loading/driver.hpp"

using aotinfer::test::FakePackage;
using aotinfer_test::Contains;

namespace {

// The message of a refused call contains every part.
void refused(aotinfer_status status, std::initializer_list<std::string> parts) {
  const std::string message = aotinfer_last_error();
  INFO(message);
  CHECK(status == AOTINFER_INVALID_ARGUMENT);
  for (const auto& part : parts) CHECK_THAT(message, Contains(part));
}

bool have_libcuda() {
  try {
    aotinfer::detail::Driver::open("libcuda.so.1");
    return true;
  } catch (const aotinfer::Error&) {
    return false;
  }
}

// Every argument passed its checks: the call went on to the driver. Without libcuda that is
// exactly AOTINFER_NO_DRIVER; with one, the device or the fake fatbin stops it.
void stopped_at_driver(aotinfer_status status) {
  const std::string message = aotinfer_last_error();
  INFO(message);
  if (!have_libcuda()) {
    CHECK(status == AOTINFER_NO_DRIVER);
  } else {
    CHECK((status == AOTINFER_NO_DEVICE || status == AOTINFER_UNSUPPORTED_ARCH || status == AOTINFER_CUDA_ERROR));
  }
}

// A package with one variant of each family the C API's calls load.
struct CApiPackage : FakePackage {
  aotinfer_package* pkg = nullptr;
  CApiPackage() {
    add({"append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "64"}}}, "append");
    add({"batch_decode",
         {{"dtype_q", "bf16"}, {"dtype_kv", "bf16"}, {"head_dim", "64"}, {"dtype_o", "bf16"}, {"pos_encoding", "none"}}},
        "decode");
    add({"batch_prefill_paged",
         {{"dtype_q", "bf16"}, {"head_dim", "64"}, {"dtype_kv", "bf16"}, {"dtype_o", "bf16"},
          {"pos_encoding", "none"}, {"head_dim_vo", "64"}}},
        "prefill");
    write();
    REQUIRE(aotinfer_package_open(dir.c_str(), &pkg) == AOTINFER_OK);
  }
  ~CApiPackage() { aotinfer_package_close(pkg); }
};

// Memory that is not a handle: zeroed, aligned for any of them.
alignas(64) unsigned char junk[1024] = {};

template <typename T>
T* misaligned() {
  return reinterpret_cast<T*>(junk + 1);
}
template <typename T>
T* foreign() {
  return reinterpret_cast<T*>(junk);
}

// Device addresses that are never dereferenced on the host.
void* const dev16 = reinterpret_cast<void*>(0x7f0000010000);
void* const dev_odd = reinterpret_cast<void*>(0x7f0000010002);

aotinfer_tensor gpu_tensor(aotinfer_dtype dtype, std::initializer_list<std::int64_t> shape) {
  aotinfer_tensor t{};
  t.data = dev16;
  t.ndim = std::int32_t(shape.size());
  int i = 0;
  for (std::int64_t s : shape) t.shape[i++] = s;
  std::int64_t step = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.strides[k] = step;
    step *= t.shape[k];
  }
  t.dtype = dtype;
  t.device_type = AOTINFER_DEVICE_CUDA;
  return t;
}

aotinfer_batch_decode_config good_decode_config() {
  aotinfer_batch_decode_config c{};
  c.dtype_q = "bf16";
  c.dtype_kv = "bf16";
  c.head_dim = 64;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.page_size = 16;
  return c;
}

aotinfer_batch_prefill_config good_prefill_config() {
  aotinfer_batch_prefill_config c{};
  c.dtype_q = "bf16";
  c.head_dim = 64;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.page_size = 16;
  return c;
}

}  // namespace

TEST_CASE("C API: last_error and abi_layout never fail", "[c_api]") {
  CHECK(aotinfer_last_error() != nullptr);
  const char* layout = aotinfer_abi_layout();
  REQUIRE(layout != nullptr);
  CHECK_THAT(layout, Contains("\"aotinfer_batch_decode_config\""));
  CHECK(aotinfer_abi_layout() == layout);  // one string for the process
}

TEST_CASE("C API: the prefill structs end with head_dim_vo and v_stride, which abi_layout reports", "[c_api]") {
  // Added last, so that the fields before them keep their offsets.
  CHECK(offsetof(aotinfer_batch_prefill_config, head_dim_vo) > offsetof(aotinfer_batch_prefill_config, max_kv_len));
  CHECK(offsetof(aotinfer_batch_prefill_config, head_dim_vo) + sizeof(int32_t) <= sizeof(aotinfer_batch_prefill_config));
  CHECK(offsetof(aotinfer_batch_prefill_run_args, v_stride) > offsetof(aotinfer_batch_prefill_run_args, mask_indptr));
  CHECK(offsetof(aotinfer_batch_prefill_run_args, v_stride) + sizeof(int64_t) == sizeof(aotinfer_batch_prefill_run_args));
  const auto layout = nlohmann::json::parse(aotinfer_abi_layout());
  const auto& config = layout.at("aotinfer_batch_prefill_config");
  CHECK(config.at("size") == sizeof(aotinfer_batch_prefill_config));
  CHECK(config.at("fields").at("head_dim_vo") == offsetof(aotinfer_batch_prefill_config, head_dim_vo));
  const auto& args = layout.at("aotinfer_batch_prefill_run_args");
  CHECK(args.at("size") == sizeof(aotinfer_batch_prefill_run_args));
  CHECK(args.at("fields").at("v_stride") == offsetof(aotinfer_batch_prefill_run_args, v_stride));
  // The cascade's levels embed the prefill config.
  CHECK(layout.at("aotinfer_cascade_config").at("fields").at("num_levels") == offsetof(aotinfer_cascade_config, num_levels));
}

TEST_CASE("C API: package calls refuse NULL, misaligned and foreign handles", "[c_api]") {
  CApiPackage fake;
  const uint32_t grid[3] = {1, 1, 1};
  aotinfer_merge_state_params merge{};
  aotinfer_append_paged_kv_params append{};
  aotinfer_merge_state_tensors merge_tensors{};
  aotinfer_append_paged_kv_tensors append_tensors{};
  aotinfer_batch_decode_config decode_config = good_decode_config();
  aotinfer_batch_prefill_config prefill_config = good_prefill_config();
  aotinfer_batch_decode* decode = nullptr;
  aotinfer_batch_prefill* prefill = nullptr;

  for (const aotinfer_package* bad : {static_cast<const aotinfer_package*>(nullptr), misaligned<const aotinfer_package>(),
                                      foreign<const aotinfer_package>()}) {
    const std::string why = !bad ? "package must not be NULL: expected a handle from aotinfer_package_open"
                            : bad == misaligned<const aotinfer_package>() ? "got a misaligned pointer"
                                                                          : "got a pointer to something else";
    INFO(why);
    refused(aotinfer_package_find(bad, "merge_state"), {"aotinfer_package_find: ", why});
    refused(aotinfer_launch(bad, "merge_state.dtype-bf16.head_dim-64", "merge", grid, &merge, sizeof merge, nullptr),
            {"aotinfer_launch: ", why});
    refused(aotinfer_merge_state(bad, "bf16", 64, &merge, nullptr), {"aotinfer_merge_state: ", why});
    refused(aotinfer_append_paged_kv(bad, "bf16", 64, &append, nullptr), {"aotinfer_append_paged_kv: ", why});
    refused(aotinfer_merge_state_tensors_run(bad, &merge_tensors, nullptr), {"aotinfer_merge_state_tensors_run: ", why});
    refused(aotinfer_append_paged_kv_tensors_run(bad, &append_tensors, "nhd", nullptr),
            {"aotinfer_append_paged_kv_tensors_run: ", why});
    refused(aotinfer_batch_decode_create(bad, &decode_config, &decode), {"aotinfer_batch_decode_create: ", why});
    CHECK(decode == nullptr);
    refused(aotinfer_batch_prefill_create(bad, &prefill_config, &prefill), {"aotinfer_batch_prefill_create: ", why});
    CHECK(prefill == nullptr);

    // Calls without a status answer 0 / NULL / nothing and say why.
    CHECK(aotinfer_package_variant_count(bad) == 0);
    CHECK_THAT(aotinfer_last_error(), Contains("aotinfer_package_variant_count: ") && Contains(why));
    CHECK(aotinfer_package_variant_uri(bad, 0) == nullptr);
    CHECK_THAT(aotinfer_last_error(), Contains("aotinfer_package_variant_uri: ") && Contains(why));
    if (bad) {
      aotinfer_package_close(const_cast<aotinfer_package*>(bad));  // not freed: it is not a handle
      CHECK_THAT(aotinfer_last_error(), Contains("aotinfer_package_close: ") && Contains(why));
    }
  }
  aotinfer_package_close(nullptr);  // allowed

  // A handle of another type is foreign too.
  const auto* other = reinterpret_cast<const aotinfer_batch_decode*>(fake.pkg);
  size_t f = 0, i = 0;
  refused(aotinfer_batch_decode_workspace_sizes(other, 1, 0, &f, &i),
          {"aotinfer_batch_decode_workspace_sizes: decode: expected a handle from aotinfer_batch_decode_create, got a pointer to something else"});

  // Out of range is refused, in range answers and leaves the last error alone.
  CHECK(aotinfer_package_variant_uri(fake.pkg, 8) == nullptr);
  CHECK_THAT(aotinfer_last_error(), Contains("i: expected an index below the variant count 8, got 8"));
  CHECK(aotinfer_package_variant_count(fake.pkg) == 8);
  CHECK(aotinfer_package_variant_uri(fake.pkg, 7) != nullptr);
  CHECK_THAT(aotinfer_last_error(), Contains("got 8"));
}

TEST_CASE("C API: open, find and launch refuse bad pointers, strings, grids and sizes", "[c_api]") {
  CApiPackage fake;
  aotinfer_package* out = nullptr;
  refused(aotinfer_package_open(nullptr, &out), {"aotinfer_package_open: dir must not be NULL: expected the path of a package folder"});
  refused(aotinfer_package_open("", &out), {"aotinfer_package_open: dir: expected the path of a package folder", "got an empty string"});
  CHECK(out == nullptr);
  refused(aotinfer_package_open(fake.dir.c_str(), nullptr), {"aotinfer_package_open: out must not be NULL"});
  refused(aotinfer_package_open(fake.dir.c_str(), misaligned<aotinfer_package*>()),
          {"aotinfer_package_open: out: expected a pointer aligned to 8 bytes, got"});

  refused(aotinfer_package_find(fake.pkg, nullptr), {"aotinfer_package_find: uri must not be NULL"});
  refused(aotinfer_package_find(fake.pkg, ""), {"aotinfer_package_find: uri: expected a variant URI", "got an empty string"});

  const std::string uri = "merge_state.dtype-bf16.head_dim-64";
  const uint32_t grid[3] = {1, 1, 1};
  const char params[56] = {};
  auto launch = [&](const char* u, const char* e, const uint32_t* g, const void* p, size_t size) {
    return aotinfer_launch(fake.pkg, u, e, g, p, size, nullptr);
  };
  refused(launch(nullptr, "merge", grid, params, sizeof params), {"aotinfer_launch: uri must not be NULL"});
  refused(launch("", "merge", grid, params, sizeof params), {"aotinfer_launch: uri: expected a variant URI, got an empty string"});
  refused(launch(uri.c_str(), nullptr, grid, params, sizeof params), {"aotinfer_launch: entry must not be NULL"});
  refused(launch(uri.c_str(), "", grid, params, sizeof params), {"aotinfer_launch: entry: expected an entry point name"});
  refused(launch(uri.c_str(), "merge", nullptr, params, sizeof params), {"aotinfer_launch: grid must not be NULL"});
  refused(launch(uri.c_str(), "merge", misaligned<const uint32_t>(), params, sizeof params),
          {"aotinfer_launch: grid: expected a pointer aligned to 4 bytes"});
  for (auto bad : {std::array<uint32_t, 3>{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0x80000000u, 1, 1}, {1, 65536, 1}, {1, 1, 70000}}) {
    refused(launch(uri.c_str(), "merge", bad.data(), params, sizeof params),
            {"aotinfer_launch: grid: expected x in 1..2147483647 and y, z in 1..65535, got {" + std::to_string(bad[0]) + ", " +
             std::to_string(bad[1]) + ", " + std::to_string(bad[2]) + "}"});
  }
  refused(launch(uri.c_str(), "merge", grid, nullptr, sizeof params), {"aotinfer_launch: params must not be NULL"});
  refused(launch(uri.c_str(), "merge", grid, params, 0), {"aotinfer_launch: params_size: expected the size of the entry's params struct, got 0"});

  stopped_at_driver(launch(uri.c_str(), "merge", grid, params, sizeof params));
}

TEST_CASE("C API: merge_state and append_paged_kv check their params before the driver", "[c_api]") {
  CApiPackage fake;
  aotinfer_merge_state_params good{dev16, static_cast<const float*>(dev16), dev16, static_cast<const float*>(dev16), dev16,
                                   nullptr, 4};
  auto merge = [&](const char* dtype, int head_dim, const aotinfer_merge_state_params* p) {
    return aotinfer_merge_state(fake.pkg, dtype, head_dim, p, nullptr);
  };
  refused(merge(nullptr, 64, &good), {"aotinfer_merge_state: dtype must not be NULL"});
  refused(merge("", 64, &good), {"aotinfer_merge_state: dtype: expected \"f16\" or \"bf16\", got an empty string"});
  refused(merge("bf16", 0, &good), {"aotinfer_merge_state: head_dim: expected >= 1, got 0"});
  refused(merge("bf16", -64, &good), {"aotinfer_merge_state: head_dim: expected >= 1, got -64"});
  refused(merge("bf16", 64, nullptr), {"aotinfer_merge_state: params must not be NULL"});
  refused(merge("bf16", 64, misaligned<const aotinfer_merge_state_params>()),
          {"aotinfer_merge_state: params: expected a pointer aligned to 8 bytes"});
  auto with = [&](auto change) {
    aotinfer_merge_state_params p = good;
    change(p);
    return p;
  };
  auto p = with([](auto& p) { p.rows = -1; });
  refused(merge("bf16", 64, &p), {"aotinfer_merge_state: params->rows: expected >= 0, got -1"});
  p = with([](auto& p) { p.v_a = nullptr; });
  refused(merge("bf16", 64, &p), {"aotinfer_merge_state: params->v_a must not be NULL"});
  p = with([](auto& p) { p.s_b = nullptr; });
  refused(merge("bf16", 64, &p), {"aotinfer_merge_state: params->s_b must not be NULL"});
  p = with([](auto& p) { p.v_out = dev_odd; });
  refused(merge("bf16", 64, &p), {"aotinfer_merge_state: params->v_out: expected device memory aligned to 16 bytes"});
  p = with([](auto& p) { p.s_out = reinterpret_cast<float*>(static_cast<char*>(dev16) + 1); });
  refused(merge("bf16", 64, &p), {"aotinfer_merge_state: params->s_out: expected device memory aligned to 4 bytes"});
  refused(merge("f64", 64, &good), {"merge_state: unknown dtype 'f64'"});
  CHECK(merge("f16", 96, &good) == AOTINFER_NOT_FOUND);  // a sound call for a variant the package lacks
  stopped_at_driver(merge("bf16", 64, &good));

  aotinfer_append_paged_kv_params a{};
  a.k = a.v = dev16;
  a.batch_indices = a.positions = static_cast<const int32_t*>(dev16);
  a.kv.k_pages = a.kv.v_pages = dev16;
  a.kv.indptr = a.kv.indices = a.kv.last_page_len = static_cast<const int32_t*>(dev16);
  a.kv.page_size = 16;
  a.kv.num_kv_heads = 2;
  a.k_stride_token = a.v_stride_token = 128;
  a.kv.stride_page = 2048;
  a.kv.stride_token = 128;
  a.kv.stride_head = 64;
  a.nnz = 3;
  auto append = [&](const char* dtype, int head_dim, const aotinfer_append_paged_kv_params* params) {
    return aotinfer_append_paged_kv(fake.pkg, dtype, head_dim, params, nullptr);
  };
  refused(append(nullptr, 64, &a), {"aotinfer_append_paged_kv: dtype must not be NULL"});
  refused(append("bf16", -1, &a), {"aotinfer_append_paged_kv: head_dim: expected >= 1, got -1"});
  refused(append("bf16", 64, nullptr), {"aotinfer_append_paged_kv: params must not be NULL"});
  refused(append("bf16", 64, misaligned<const aotinfer_append_paged_kv_params>()), {"params: expected a pointer aligned to 8 bytes"});
  auto b = a;
  b.nnz = -2;
  refused(append("bf16", 64, &b), {"aotinfer_append_paged_kv: params->nnz: expected >= 0, got -2"});
  b = a;
  b.kv.page_size = 0;
  refused(append("bf16", 64, &b), {"params->kv.page_size: expected >= 1, got 0"});
  b = a;
  b.kv.num_kv_heads = -1;
  refused(append("bf16", 64, &b), {"params->kv.num_kv_heads: expected >= 1, got -1"});
  b = a;
  b.kv.k_pages = nullptr;
  refused(append("bf16", 64, &b), {"params->kv.k_pages must not be NULL"});
  b = a;
  b.v = dev_odd;
  refused(append("bf16", 64, &b), {"params->v: expected device memory aligned to 16 bytes"});
  b = a;
  b.positions = reinterpret_cast<const int32_t*>(static_cast<char*>(dev16) + 2);
  refused(append("bf16", 64, &b), {"params->positions: expected device memory aligned to 4 bytes"});
  stopped_at_driver(append("bf16", 64, &a));
}

TEST_CASE("C API: the tensor entries check their structs before the driver", "[c_api]") {
  CApiPackage fake;
  refused(aotinfer_merge_state_tensors_run(fake.pkg, nullptr, nullptr), {"aotinfer_merge_state_tensors_run: tensors must not be NULL"});
  refused(aotinfer_merge_state_tensors_run(fake.pkg, misaligned<const aotinfer_merge_state_tensors>(), nullptr),
          {"tensors: expected a pointer aligned to 8 bytes"});
  aotinfer_merge_state_tensors m{};
  refused(aotinfer_merge_state_tensors_run(fake.pkg, &m, nullptr), {"merge_state: v_a: is required"});
  m.v_a = m.v_b = m.v_out = gpu_tensor(AOTINFER_BF16, {4, 64});
  m.s_a = m.s_b = gpu_tensor(AOTINFER_F32, {4});
  // CPU tensors are refused without asking the driver which GPU is current.
  m.v_a.device_type = m.v_b.device_type = m.v_out.device_type = AOTINFER_DEVICE_CPU;
  refused(aotinfer_merge_state_tensors_run(fake.pkg, &m, nullptr), {"merge_state: v_a: is in the CPU"});
  m.v_a.device_type = m.v_b.device_type = m.v_out.device_type = AOTINFER_DEVICE_CUDA;
  stopped_at_driver(aotinfer_merge_state_tensors_run(fake.pkg, &m, nullptr));

  aotinfer_append_paged_kv_tensors t{};
  refused(aotinfer_append_paged_kv_tensors_run(fake.pkg, nullptr, "nhd", nullptr), {"aotinfer_append_paged_kv_tensors_run: tensors must not be NULL"});
  refused(aotinfer_append_paged_kv_tensors_run(fake.pkg, &t, "nhd", nullptr), {"append_paged_kv: k_pages: is required"});
  refused(aotinfer_append_paged_kv_tensors_run(fake.pkg, &t, "xyz", nullptr), {"layout must be \"nhd\" or \"hnd\", got \"xyz\""});
  t.k_pages = t.v_pages = gpu_tensor(AOTINFER_BF16, {8, 16, 2, 64});
  stopped_at_driver(aotinfer_append_paged_kv_tensors_run(fake.pkg, &t, nullptr, nullptr));
}

TEST_CASE("C API: create calls check the config and out before the driver", "[c_api]") {
  CApiPackage fake;
  aotinfer_batch_decode* decode = reinterpret_cast<aotinfer_batch_decode*>(junk);
  auto create = [&](const aotinfer_batch_decode_config& c) { return aotinfer_batch_decode_create(fake.pkg, &c, &decode); };
  const aotinfer_batch_decode_config good = good_decode_config();
  refused(aotinfer_batch_decode_create(fake.pkg, &good, nullptr), {"aotinfer_batch_decode_create: out must not be NULL"});
  refused(aotinfer_batch_decode_create(fake.pkg, &good, misaligned<aotinfer_batch_decode*>()), {"out: expected a pointer aligned to 8 bytes"});
  refused(aotinfer_batch_decode_create(fake.pkg, nullptr, &decode), {"aotinfer_batch_decode_create: config must not be NULL"});
  CHECK(decode == nullptr);  // cleared before anything else can fail
  refused(aotinfer_batch_decode_create(fake.pkg, misaligned<const aotinfer_batch_decode_config>(), &decode),
          {"config: expected a pointer aligned to 8 bytes"});
  auto with = [&](auto change) {
    aotinfer_batch_decode_config c = good;
    change(c);
    return create(c);
  };
  refused(with([](auto& c) { c.head_dim = 0; }), {"aotinfer_batch_decode_create: config->head_dim: expected >= 1, got 0"});
  refused(with([](auto& c) { c.num_qo_heads = -8; }), {"config->num_qo_heads: expected >= 1, got -8"});
  refused(with([](auto& c) { c.num_kv_heads = 0; }), {"config->num_kv_heads: expected >= 1, got 0"});
  refused(with([](auto& c) { c.num_kv_heads = 3; }), {"batch_decode: "});  // 8 heads are no multiple of 3
  refused(with([](auto& c) { c.page_size = 0; }), {"config->page_size: expected >= 1, got 0"});
  refused(with([](auto& c) { c.sliding_window = 1, c.window_left = -1; }), {"config->window_left (sliding_window set): expected >= 0, got -1"});
  refused(with([](auto& c) { c.cuda_graph = 1; }), {"config->max_batch (CUDA-graph mode): expected >= 1, got 0"});
  refused(with([](auto& c) { c.dtype_q = nullptr; }), {"dtype_q: unknown dtype '(null)'"});
  refused(with([](auto& c) { c.dtype_kv = "int4"; }), {"dtype_kv: unknown dtype 'int4'"});
  refused(with([](auto& c) { c.layout = "xyz"; }), {"layout must be \"nhd\" or \"hnd\", got \"xyz\""});
  refused(with([](auto& c) { c.pos_encoding = "yarn"; }), {"pos_encoding must be none, rope_llama or alibi, got \"yarn\""});
  CHECK(with([](auto& c) { c.head_dim = 96; }) == AOTINFER_NOT_FOUND);
  stopped_at_driver(create(good));
  CHECK(decode == nullptr);

  aotinfer_batch_prefill* prefill = nullptr;
  auto create_prefill = [&](const aotinfer_batch_prefill_config& c) { return aotinfer_batch_prefill_create(fake.pkg, &c, &prefill); };
  const aotinfer_batch_prefill_config pgood = good_prefill_config();
  refused(aotinfer_batch_prefill_create(fake.pkg, &pgood, nullptr), {"aotinfer_batch_prefill_create: out must not be NULL"});
  refused(aotinfer_batch_prefill_create(fake.pkg, nullptr, &prefill), {"aotinfer_batch_prefill_create: config must not be NULL"});
  refused(aotinfer_batch_prefill_create(fake.pkg, misaligned<const aotinfer_batch_prefill_config>(), &prefill),
          {"config: expected a pointer aligned to 8 bytes"});
  auto pwith = [&](auto change) {
    aotinfer_batch_prefill_config c = pgood;
    change(c);
    return create_prefill(c);
  };
  refused(pwith([](auto& c) { c.head_dim = -1; }), {"aotinfer_batch_prefill_create: config->head_dim: expected >= 1, got -1"});
  refused(pwith([](auto& c) { c.num_qo_heads = 0; }), {"config->num_qo_heads: expected >= 1, got 0"});
  refused(pwith([](auto& c) { c.num_kv_heads = -2; }), {"config->num_kv_heads: expected >= 1, got -2"});
  refused(pwith([](auto& c) { c.page_size = 0; }), {"config->page_size (paged KV): expected >= 1, got 0"});
  refused(pwith([](auto& c) { c.sliding_window = 1, c.window_left = -5; }), {"config->window_left (sliding_window set): expected >= 0, got -5"});
  refused(pwith([](auto& c) { c.cuda_graph = 1; }), {"config->max_batch (CUDA-graph mode): expected >= 1, got 0"});
  refused(pwith([](auto& c) { c.cuda_graph = 1, c.max_batch = 4, c.max_total_q = -5; }),
          {"config->max_total_q (CUDA-graph mode): expected >= 1, got -5"});
  refused(pwith([](auto& c) { c.kv_storage = "cloud"; }), {"kv_storage must be \"paged\" or \"ragged\", got \"cloud\""});
  refused(pwith([](auto& c) { c.mask = "sliding"; }), {"mask must be \"none\", \"causal\" or \"custom\", got \"sliding\""});
  refused(pwith([](auto& c) { c.pos_encoding = "yarn"; }), {"pos_encoding must be none, rope_llama or alibi, got \"yarn\""});
  refused(pwith([](auto& c) { c.dtype_o = "f99"; }), {"dtype_o: unknown dtype 'f99'"});
  refused(pwith([](auto& c) { c.head_dim_vo = -1; }), {"config->head_dim_vo (0: head_dim): expected >= 0, got -1"});
  refused(pwith([](auto& c) { c.head_dim = 192, c.head_dim_vo = 128, c.pos_encoding = "rope_llama"; }),
          {"head_dim_vo != head_dim (MLA prefill, 192/128) is served with 16-bit K/V and pos_encoding none"});
  CHECK(pwith([](auto& c) { c.head_dim = 192, c.head_dim_vo = 128; }) == AOTINFER_NOT_FOUND);  // not in the fake package
  stopped_at_driver(pwith([](auto& c) { c.head_dim_vo = 64; }));  // head_dim's own width: the same variant
  stopped_at_driver(create_prefill(pgood));
  CHECK(prefill == nullptr);

  // MLA decode: the config's checks come before the package is asked for the variant (the fake
  // package holds none).
  aotinfer_batch_mla_decode* mla = nullptr;
  const aotinfer_batch_mla_decode_config mgood{"bf16", 16, 64, 0, 0, 0, nullptr};
  auto mwith = [&](auto change) {
    aotinfer_batch_mla_decode_config c = mgood;
    change(c);
    return aotinfer_batch_mla_decode_create(fake.pkg, &c, &mla);
  };
  refused(mwith([](auto& c) { c.num_heads = 0; }), {"aotinfer_batch_mla_decode_create: config->num_heads: expected >= 1, got 0"});
  refused(mwith([](auto& c) { c.dtype = "e4m3"; }), {"batch_mla_decode: dtype must be f16 or bf16, got e4m3"});
  refused(mwith([](auto& c) { c.dtype_kv = "e5m2"; }), {"dtype_kv (the cache) must be dtype (bf16) or e4m3, got e5m2"});
  refused(mwith([](auto& c) { c.dtype_kv = "f16"; }), {"dtype_kv (the cache) must be dtype (bf16) or e4m3, got f16"});
  refused(mwith([](auto& c) { c.dtype_kv = "fp8"; }), {"dtype_kv"});
  CHECK(mwith([](auto& c) { c.dtype_kv = "e4m3"; }) == AOTINFER_NOT_FOUND);  // valid: only the fake package lacks it
  refused(mwith([](auto& c) { c.cuda_graph = 1; }), {"config->max_batch (CUDA-graph mode): expected >= 1, got 0"});
  refused(mwith([](auto& c) { c.cuda_graph = 1, c.max_batch = 8; }), {"config->q_len (CUDA-graph mode): expected >= 1, got 0"});
  refused(mwith([](auto& c) { c.cuda_graph = 1, c.max_batch = 8, c.q_len = 5; }),
          {"CUDA-graph mode needs the q_len of every plan, 1..4, got 5"});
  CHECK(mwith([](auto& c) { c.cuda_graph = 1, c.max_batch = 8, c.q_len = 2; }) == AOTINFER_NOT_FOUND);
  CHECK(mla == nullptr);
}

TEST_CASE("C API: decode calls check every argument before using the handle", "[c_api]") {
  // A fake handle: each bad argument is named; with every argument good, the fake is.
  auto* fake = foreign<aotinfer_batch_decode>();
  const std::string not_handle = "decode: expected a handle from aotinfer_batch_decode_create, got a pointer to something else";
  size_t f = 0, i = 0;

  auto sizes = [&](const aotinfer_batch_decode* d, int32_t max_batch, size_t* fb, size_t* ib) {
    return aotinfer_batch_decode_workspace_sizes(d, max_batch, 0, fb, ib);
  };
  refused(sizes(fake, -1, &f, &i), {"aotinfer_batch_decode_workspace_sizes: max_batch: expected >= 0, got -1"});
  refused(sizes(fake, 4, nullptr, &i), {"float_bytes must not be NULL"});
  refused(sizes(fake, 4, &f, nullptr), {"int_bytes must not be NULL"});
  refused(sizes(fake, 4, misaligned<size_t>(), &i), {"float_bytes: expected a pointer aligned to 8 bytes"});
  refused(sizes(nullptr, 4, &f, &i), {"decode must not be NULL: expected a handle from aotinfer_batch_decode_create"});
  refused(sizes(misaligned<const aotinfer_batch_decode>(), 4, &f, &i), {"decode: expected a handle", "got a misaligned pointer"});
  refused(sizes(fake, 4, &f, &i), {not_handle});

  const int32_t indptr[3] = {0, 1, 3}, last[2] = {1, 1}, indices[3] = {0, 1, 2};
  auto plan = [&](aotinfer_batch_decode* d, const int32_t* ip, int32_t batch, const int32_t* lp, const int32_t* ids, int32_t n,
                  int32_t pages, void* fw, size_t fb, void* iw, size_t ib) {
    return aotinfer_batch_decode_plan(d, ip, batch, lp, ids, n, pages, fw, fb, iw, ib, nullptr);
  };
  const char* fn = "aotinfer_batch_decode_plan: ";
  refused(plan(fake, indptr, -1, last, indices, 3, 8, dev16, 1024, dev16, 1024), {fn, "batch: expected >= 0, got -1"});
  refused(plan(fake, nullptr, 2, last, indices, 3, 8, dev16, 1024, dev16, 1024), {fn, "kv_indptr must not be NULL"});
  refused(plan(fake, nullptr, 0, nullptr, nullptr, 0, 0, dev16, 1024, dev16, 1024), {fn, "kv_indptr must not be NULL"});
  refused(plan(fake, misaligned<const int32_t>(), 2, last, indices, 3, 8, dev16, 1024, dev16, 1024),
          {fn, "kv_indptr: expected a pointer aligned to 4 bytes"});
  refused(plan(fake, indptr, 2, nullptr, indices, 3, 8, dev16, 1024, dev16, 1024), {fn, "kv_last_page_len must not be NULL"});
  refused(plan(fake, indptr, 2, last, indices, -3, 8, dev16, 1024, dev16, 1024), {fn, "num_indices: expected >= 0, got -3"});
  refused(plan(fake, indptr, 2, last, nullptr, 3, 8, dev16, 1024, dev16, 1024), {fn, "kv_indices must not be NULL"});
  refused(plan(fake, indptr, 2, last, indices, 3, -8, dev16, 1024, dev16, 1024), {fn, "num_pages: expected >= 0, got -8"});
  refused(plan(fake, indptr, 2, last, indices, 3, 8, dev16, 1024, nullptr, 1024), {fn, "int_workspace must not be NULL"});
  refused(plan(fake, indptr, 2, last, indices, 3, 8, dev16, 1024, dev_odd, 1024),
          {fn, "int_workspace: expected device memory aligned to 16 bytes"});
  refused(plan(fake, indptr, 2, last, indices, 3, 8, dev16, 1024, dev16, 0), {fn, "int_bytes: expected the int workspace's size", "got 0"});
  refused(plan(fake, indptr, 2, last, indices, 3, 8, nullptr, 1024, dev16, 1024), {fn, "float_workspace must not be NULL when float_bytes is 1024"});
  refused(plan(fake, indptr, 2, last, indices, 3, 8, dev_odd, 1024, dev16, 1024),
          {fn, "float_workspace: expected device memory aligned to 16 bytes"});
  refused(plan(nullptr, indptr, 2, last, indices, 3, 8, dev16, 1024, dev16, 1024), {fn, "decode must not be NULL"});
  refused(plan(fake, indptr, 2, last, indices, 3, 8, dev16, 1024, dev16, 1024), {fn, not_handle});
  refused(plan(fake, indptr, 2, last, nullptr, 0, 0, nullptr, 0, dev16, 1024), {fn, not_handle});  // no page ids, no float workspace

  aotinfer_batch_decode_run_args args{};
  refused(aotinfer_batch_decode_run(fake, nullptr, nullptr), {"aotinfer_batch_decode_run: args must not be NULL"});
  refused(aotinfer_batch_decode_run(fake, misaligned<const aotinfer_batch_decode_run_args>(), nullptr),
          {"aotinfer_batch_decode_run: args: expected a pointer aligned to 8 bytes"});
  refused(aotinfer_batch_decode_run(nullptr, &args, nullptr), {"aotinfer_batch_decode_run: decode must not be NULL"});
  refused(aotinfer_batch_decode_run(fake, &args, nullptr), {"aotinfer_batch_decode_run: ", not_handle});

  aotinfer_batch_decode_tensors tensors{};
  aotinfer_attention_scalars scalars{};
  const char* tfn = "aotinfer_batch_decode_tensors_run: ";
  refused(aotinfer_batch_decode_tensors_run(fake, nullptr, &scalars, nullptr), {tfn, "tensors must not be NULL"});
  refused(aotinfer_batch_decode_tensors_run(fake, &tensors, nullptr, nullptr), {tfn, "scalars must not be NULL"});
  refused(aotinfer_batch_decode_tensors_run(fake, &tensors, misaligned<const aotinfer_attention_scalars>(), nullptr),
          {tfn, "scalars: expected a pointer aligned to 4 bytes"});
  refused(aotinfer_batch_decode_tensors_run(nullptr, &tensors, &scalars, nullptr), {tfn, "decode must not be NULL"});
  refused(aotinfer_batch_decode_tensors_run(fake, &tensors, &scalars, nullptr), {tfn, not_handle});

  aotinfer_batch_decode_destroy(nullptr);  // allowed
  aotinfer_batch_decode_destroy(fake);     // not a handle: left alone
  CHECK_THAT(aotinfer_last_error(), Contains("aotinfer_batch_decode_destroy: ") && Contains(not_handle));
  aotinfer_batch_decode_destroy(misaligned<aotinfer_batch_decode>());
  CHECK_THAT(aotinfer_last_error(), Contains("got a misaligned pointer"));
}

TEST_CASE("C API: prefill calls check every argument before using the handle", "[c_api]") {
  auto* fake = foreign<aotinfer_batch_prefill>();
  const std::string not_handle = "prefill: expected a handle from aotinfer_batch_prefill_create, got a pointer to something else";
  size_t f = 0, i = 0;
  const char* sfn = "aotinfer_batch_prefill_workspace_sizes: ";
  refused(aotinfer_batch_prefill_workspace_sizes(fake, -1, 4, 0, &f, &i), {sfn, "max_total_q: expected >= 0, got -1"});
  refused(aotinfer_batch_prefill_workspace_sizes(fake, 64, -4, 0, &f, &i), {sfn, "max_batch: expected >= 0, got -4"});
  refused(aotinfer_batch_prefill_workspace_sizes(fake, 64, 4, 0, nullptr, &i), {sfn, "float_bytes must not be NULL"});
  refused(aotinfer_batch_prefill_workspace_sizes(fake, 64, 4, 0, &f, misaligned<size_t>()), {sfn, "int_bytes: expected a pointer aligned to 8 bytes"});
  refused(aotinfer_batch_prefill_workspace_sizes(nullptr, 64, 4, 0, &f, &i), {sfn, "prefill must not be NULL"});
  refused(aotinfer_batch_prefill_workspace_sizes(fake, 64, 4, 0, &f, &i), {sfn, not_handle});

  const int32_t qo[3] = {0, 4, 9}, kv[3] = {0, 1, 3}, last[2] = {1, 1}, indices[3] = {0, 1, 2};
  auto paged = [&](aotinfer_batch_prefill* p, const int32_t* q, const int32_t* k, int32_t batch, const int32_t* lp,
                   const int32_t* ids, int32_t n, int32_t pages, void* fw, size_t fb, void* iw, size_t ib) {
    return aotinfer_batch_prefill_plan_paged(p, q, k, batch, lp, ids, n, pages, fw, fb, iw, ib, nullptr);
  };
  const char* fn = "aotinfer_batch_prefill_plan_paged: ";
  refused(paged(fake, qo, kv, -2, last, indices, 3, 8, dev16, 64, dev16, 64), {fn, "batch: expected >= 0, got -2"});
  refused(paged(fake, nullptr, kv, 2, last, indices, 3, 8, dev16, 64, dev16, 64), {fn, "qo_indptr must not be NULL"});
  refused(paged(fake, qo, nullptr, 2, last, indices, 3, 8, dev16, 64, dev16, 64), {fn, "kv_indptr must not be NULL"});
  refused(paged(fake, qo, misaligned<const int32_t>(), 2, last, indices, 3, 8, dev16, 64, dev16, 64),
          {fn, "kv_indptr: expected a pointer aligned to 4 bytes"});
  refused(paged(fake, qo, kv, 2, nullptr, indices, 3, 8, dev16, 64, dev16, 64), {fn, "kv_last_page_len must not be NULL"});
  refused(paged(fake, qo, kv, 2, last, nullptr, 3, 8, dev16, 64, dev16, 64), {fn, "kv_indices must not be NULL"});
  refused(paged(fake, qo, kv, 2, last, indices, -1, 8, dev16, 64, dev16, 64), {fn, "num_indices: expected >= 0, got -1"});
  refused(paged(fake, qo, kv, 2, last, indices, 3, -1, dev16, 64, dev16, 64), {fn, "num_pages: expected >= 0, got -1"});
  refused(paged(fake, qo, kv, 2, last, indices, 3, 8, dev16, 64, dev16, 0), {fn, "int_bytes: expected", "got 0"});
  refused(paged(fake, qo, kv, 2, last, indices, 3, 8, dev16, 64, nullptr, 64), {fn, "int_workspace must not be NULL"});
  refused(paged(fake, qo, kv, 2, last, indices, 3, 8, dev_odd, 64, dev16, 64), {fn, "float_workspace: expected device memory aligned to 16 bytes"});
  refused(paged(nullptr, qo, kv, 2, last, indices, 3, 8, dev16, 64, dev16, 64), {fn, "prefill must not be NULL"});
  refused(paged(fake, qo, kv, 2, last, indices, 3, 8, dev16, 64, dev16, 64), {fn, not_handle});

  const char* rfn = "aotinfer_batch_prefill_plan_ragged: ";
  auto ragged = [&](aotinfer_batch_prefill* p, const int32_t* q, const int32_t* k, int32_t batch, void* fw, size_t fb, void* iw,
                    size_t ib) { return aotinfer_batch_prefill_plan_ragged(p, q, k, batch, fw, fb, iw, ib, nullptr); };
  refused(ragged(fake, qo, kv, -1, dev16, 64, dev16, 64), {rfn, "batch: expected >= 0, got -1"});
  refused(ragged(fake, nullptr, kv, 2, dev16, 64, dev16, 64), {rfn, "qo_indptr must not be NULL"});
  refused(ragged(fake, qo, nullptr, 2, dev16, 64, dev16, 64), {rfn, "kv_indptr must not be NULL"});
  refused(ragged(fake, misaligned<const int32_t>(), kv, 2, dev16, 64, dev16, 64), {rfn, "qo_indptr: expected a pointer aligned to 4 bytes"});
  refused(ragged(fake, qo, kv, 2, dev16, 64, dev_odd, 64), {rfn, "int_workspace: expected device memory aligned to 16 bytes"});
  refused(ragged(fake, qo, kv, 2, nullptr, 64, dev16, 64), {rfn, "float_workspace must not be NULL when float_bytes is 64"});
  refused(ragged(fake, qo, kv, 2, dev16, 64, dev16, 0), {rfn, "int_bytes: expected", "got 0"});
  refused(ragged(nullptr, qo, kv, 2, dev16, 64, dev16, 64), {rfn, "prefill must not be NULL"});
  refused(ragged(fake, qo, kv, 2, dev16, 64, dev16, 64), {rfn, not_handle});

  aotinfer_batch_prefill_run_args args{};
  refused(aotinfer_batch_prefill_run(fake, nullptr, nullptr), {"aotinfer_batch_prefill_run: args must not be NULL"});
  refused(aotinfer_batch_prefill_run(fake, misaligned<const aotinfer_batch_prefill_run_args>(), nullptr),
          {"aotinfer_batch_prefill_run: args: expected a pointer aligned to 8 bytes"});
  refused(aotinfer_batch_prefill_run(nullptr, &args, nullptr), {"aotinfer_batch_prefill_run: prefill must not be NULL"});
  refused(aotinfer_batch_prefill_run(fake, &args, nullptr), {"aotinfer_batch_prefill_run: ", not_handle});

  aotinfer_batch_prefill_tensors tensors{};
  aotinfer_attention_scalars scalars{};
  const char* tfn = "aotinfer_batch_prefill_tensors_run: ";
  refused(aotinfer_batch_prefill_tensors_run(fake, nullptr, &scalars, nullptr), {tfn, "tensors must not be NULL"});
  refused(aotinfer_batch_prefill_tensors_run(fake, misaligned<const aotinfer_batch_prefill_tensors>(), &scalars, nullptr),
          {tfn, "tensors: expected a pointer aligned to 8 bytes"});
  refused(aotinfer_batch_prefill_tensors_run(fake, &tensors, nullptr, nullptr), {tfn, "scalars must not be NULL"});
  refused(aotinfer_batch_prefill_tensors_run(nullptr, &tensors, &scalars, nullptr), {tfn, "prefill must not be NULL"});
  refused(aotinfer_batch_prefill_tensors_run(fake, &tensors, &scalars, nullptr), {tfn, not_handle});

  aotinfer_batch_prefill_destroy(nullptr);
  aotinfer_batch_prefill_destroy(fake);
  CHECK_THAT(aotinfer_last_error(), Contains("aotinfer_batch_prefill_destroy: ") && Contains(not_handle));
}

TEST_CASE("C API: a failed call after a success reports and a later success clears", "[c_api]") {
  CApiPackage fake;
  CHECK(aotinfer_package_find(fake.pkg, "rms_norm") == AOTINFER_OK);
  CHECK(std::string(aotinfer_last_error()).empty());
  refused(aotinfer_package_find(fake.pkg, nullptr), {"uri must not be NULL"});
  CHECK(aotinfer_package_find(fake.pkg, "rms_norm") == AOTINFER_OK);
  CHECK(std::string(aotinfer_last_error()).empty());
}

TEST_CASE("a package built when windows and caps were variant axes is refused, naming the rebuild", "[c_api][package]") {
  // Its families still have the sliding_window and soft_cap axes (kernel ABI 1).
  FakePackage old;
  const std::vector<aotinfer::AxisValue> axes = {{"dtype_q", "bf16"}, {"dtype_kv", "bf16"}, {"head_dim", "64"},
                                                 {"dtype_o", "bf16"}, {"pos_encoding", "none"},
                                                 {"sliding_window", "false"}, {"soft_cap", "false"}};
  old.add({"batch_decode", axes}, "decode");
  aotinfer::ManifestFamily family{"batch_decode", {}};
  for (const auto& a : axes) {
    const std::string kind = a.name.starts_with("dtype") ? "dtype" : a.name == "head_dim" ? "int"
                             : a.name == "pos_encoding"   ? "enum" : "bool";
    family.axes.push_back({a.name, kind, kind == "bool" ? std::vector<std::string>{"false", "true"} : std::vector{a.value}, {}, {}});
  }
  old.record_families();  // merge_state's, beside the fake's merge_state variant
  old.manifest.families.push_back(family);
  old.write();
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(old.dir.c_str(), &pkg) == AOTINFER_OK);
  aotinfer_batch_decode_config c{};
  c.dtype_q = "bf16", c.dtype_kv = "bf16", c.head_dim = 64, c.num_qo_heads = 8, c.num_kv_heads = 8, c.page_size = 16;
  aotinfer_batch_decode* decode = nullptr;
  CHECK(aotinfer_batch_decode_create(pkg, &c, &decode) == AOTINFER_NOT_FOUND);
  CHECK(decode == nullptr);
  CHECK_THAT(std::string(aotinfer_last_error()), Contains("was built by another aotinfer version") &&
                                                     Contains("(sliding_window, soft_cap;") && Contains("rebuild the package"));
  aotinfer_package_close(pkg);
}
