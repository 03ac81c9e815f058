// The cascade front-end without a GPU: its config and level-shape checks (Cascade::check_config,
// Cascade::check_levels), and the aotinfer_cascade_* C calls under bad arguments, which must be
// refused with a message naming the function and argument before the handle is used and before
// the driver is touched (calls whose arguments pass stop at the driver).
#include "catch.hpp"

#include "fake_package.hpp"
#include "test_util.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "aotinfer/aotinfer.h"
#include "aotinfer/cascade.hpp"
#include "loading/driver.hpp"

using aotinfer::Cascade;
using aotinfer::CascadeConfig;
using aotinfer::CascadeLevel;
using aotinfer_test::Contains;

namespace {

// The Error(invalid_argument) message of f, which must throw one.
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const aotinfer::Error& e) {
    INFO(e.what());
    CHECK(e.code() == aotinfer::ErrorCode::invalid_argument);
    return e.what();
  }
  FAIL("no aotinfer::Error was thrown");
  return {};
}

void refused(aotinfer_status status, std::initializer_list<std::string> parts) {
  const std::string message = aotinfer_last_error();
  INFO(message);
  CHECK(status == AOTINFER_INVALID_ARGUMENT);
  for (const auto& part : parts) CHECK_THAT(message, Contains(part));
}

void stopped_at_driver(aotinfer_status status) {
  const std::string message = aotinfer_last_error();
  INFO(message);
  bool libcuda = true;
  try {
    aotinfer::detail::Driver::open("libcuda.so.1");
  } catch (const aotinfer::Error&) {
    libcuda = false;
  }
  if (!libcuda) CHECK(status == AOTINFER_NO_DRIVER);
  else CHECK((status == AOTINFER_NO_DEVICE || status == AOTINFER_UNSUPPORTED_ARCH || status == AOTINFER_CUDA_ERROR));
}

CascadeConfig good_config(int levels) {
  CascadeConfig c;
  c.level.head_dim = 64;
  c.level.num_qo_heads = 8;
  c.level.num_kv_heads = 2;
  c.num_levels = levels;
  return c;
}

// Host metadata of one level kept alive for its spans.
struct Level {
  std::vector<std::int32_t> qo, kv, last;
  CascadeLevel view() const { return {qo, kv, last, {}}; }
};

// Memory that is not a handle, and device addresses never dereferenced on the host.
alignas(64) unsigned char junk[256] = {};
void* const dev16 = reinterpret_cast<void*>(0x7f0000010000);

}  // namespace

TEST_CASE("Cascade::check_config refuses what a cascade cannot take, naming it", "[cascade]") {
  CHECK_NOTHROW(Cascade::check_config(good_config(1)));
  CHECK_NOTHROW(Cascade::check_config(good_config(3)));
  auto with = [](auto change) {
    CascadeConfig c = good_config(2);
    change(c);
    return refusal([&] { Cascade::check_config(c); });
  };
  CHECK_THAT(with([](CascadeConfig& c) { c.num_levels = 0; }), Contains("cascade: num_levels must be >= 1, got 0"));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.kv_storage = aotinfer::KvStorage::ragged; }),
             Contains("cascade: ") && Contains("kv_storage must be paged"));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.pos_encoding = aotinfer::PosEncoding::rope_llama; }),
             Contains("cascade: pos_encoding must be none"));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.window_left = 16; }), Contains("cascade: window_left must be < 0"));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.mask = aotinfer::MaskMode::custom; }),
             Contains("cascade: mask must be none or causal"));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.head_dim_vo = 32; }), Contains("cascade: head_dim_vo must be 0 or head_dim"));
  CHECK_NOTHROW(Cascade::check_config([] {
    CascadeConfig c = good_config(2);
    c.level.head_dim_vo = c.level.head_dim;
    return c;
  }()));
  // The level's own checks, restated as the cascade's.
  CHECK_THAT(with([](CascadeConfig& c) { c.level.num_kv_heads = 3; }), Contains("cascade: "));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.page_size = 0; }), Contains("cascade: page_size must be >= 1, got 0"));
  CHECK_THAT(with([](CascadeConfig& c) { c.level.cuda_graph = true; }),
             Contains("cascade: CUDA-graph mode needs max_batch >= 1 and max_total_q >= 1"));
}

TEST_CASE("Cascade::check_levels checks the levels' shapes against each other", "[cascade]") {
  const CascadeConfig config = good_config(3);
  // Level 0: one group of 32 tokens; level 1: two groups; level 2: three requests.
  std::vector<Level> levels = {{{0, 32}, {0, 4}, {16}}, {{0, 20, 32}, {0, 2, 3}, {16, 5}}, {{0, 10, 20, 32}, {0, 1, 2, 3}, {3, 4, 5}}};
  auto views = [&] {
    std::vector<CascadeLevel> out;
    for (const Level& l : levels) out.push_back(l.view());
    return out;
  };
  CHECK(Cascade::check_levels(config, views()) == 32);
  auto with = [&](auto change) {
    const std::vector<Level> saved = levels;
    change();
    const std::string message = refusal([&] { Cascade::check_levels(config, views()); });
    levels = saved;
    return message;
  };
  CHECK_THAT(with([&] { levels.pop_back(); }), Contains("cascade: plan() got 2 levels, the config has 3"));
  CHECK_THAT(with([&] { levels[1].qo = {0, 20, 30}; }), Contains("cascade: level 1 qo_indptr[-1] = 30 but total_q is 32"));
  CHECK_THAT(with([&] { levels[2].qo.clear(); }), Contains("cascade: level 2 qo_indptr must have groups + 1 entries"));
  CHECK_THAT(with([&] { levels[0].qo = {4, 32}; }), Contains("cascade: level 0 qo_indptr[0] must be 0, got 4"));
  CHECK_THAT(with([&] { levels[1].kv = {0, 2}; }),
             Contains("cascade: level 1 kv_indptr has 2 entries; qo_indptr describes 2 groups"));
  CHECK_THAT(with([&] { levels[2].last = {3, 4}; }),
             Contains("cascade: level 2 kv_last_page_len has 2 entries; qo_indptr describes 3 groups"));
  // Empty batches and groups without tokens are shapes like any other.
  CHECK(Cascade::check_levels(good_config(1), std::vector<CascadeLevel>{Level{{0}, {0}, {}}.view()}) == 0);
}

TEST_CASE("C API: cascade calls check every argument before the handle and the driver", "[cascade][c_api]") {
  aotinfer::test::FakePackage fake;  // merge_state bf16/64 and the paged prefill variant
  fake.add({"batch_prefill_paged",
            {{"dtype_q", "bf16"}, {"head_dim", "64"}, {"dtype_kv", "bf16"}, {"dtype_o", "bf16"}, {"pos_encoding", "none"},
             {"head_dim_vo", "64"}}},
           "prefill");
  fake.write();
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(fake.dir.c_str(), &pkg) == AOTINFER_OK);

  // create
  aotinfer_cascade_config good{};
  good.level.dtype_q = "bf16";
  good.level.head_dim = 64;
  good.level.num_qo_heads = 8;
  good.level.num_kv_heads = 2;
  good.level.page_size = 16;
  good.num_levels = 2;
  aotinfer_cascade* cascade = reinterpret_cast<aotinfer_cascade*>(junk);
  const char* cfn = "aotinfer_cascade_create: ";
  refused(aotinfer_cascade_create(pkg, &good, nullptr), {cfn, "out must not be NULL"});
  refused(aotinfer_cascade_create(pkg, nullptr, &cascade), {cfn, "config must not be NULL"});
  CHECK(cascade == nullptr);
  auto with = [&](auto change) {
    aotinfer_cascade_config c = good;
    change(c);
    return aotinfer_cascade_create(pkg, &c, &cascade);
  };
  refused(with([](auto& c) { c.num_levels = 0; }), {cfn, "config->num_levels: expected >= 1, got 0"});
  refused(with([](auto& c) { c.level.head_dim = 0; }), {cfn, "config->level.head_dim: expected >= 1, got 0"});
  refused(with([](auto& c) { c.level.page_size = -1; }), {cfn, "config->level.page_size (paged KV): expected >= 1, got -1"});
  refused(with([](auto& c) { c.level.kv_storage = "ragged"; }), {cfn, "config->level.kv_storage: expected \"paged\""});
  refused(with([](auto& c) { c.level.pos_encoding = "rope_llama"; }), {cfn, "config->level.pos_encoding: expected \"none\""});
  refused(with([](auto& c) { c.level.sliding_window = 1; }), {cfn, "config->level.sliding_window: expected 0"});
  refused(with([](auto& c) { c.level.mask = "diagonal"; }), {cfn, "config->level.mask: expected \"none\" or \"causal\""});
  refused(with([](auto& c) { c.level.mask = "custom"; }), {cfn, "config->level.mask: expected \"none\" or \"causal\""});
  refused(with([](auto& c) { c.level.cuda_graph = 1; }), {cfn, "config->level.max_batch (CUDA-graph mode"});
  refused(with([](auto& c) { c.level.dtype_q = "int4"; }), {"dtype_q: unknown dtype 'int4'"});
  refused(with([](auto& c) { c.level.num_kv_heads = 3; }), {"cascade: "});  // 8 heads are no multiple of 3
  refused(with([](auto& c) { c.level.head_dim_vo = -1; }), {cfn, "config->level.head_dim_vo (0: head_dim): expected >= 0, got -1"});
  refused(with([](auto& c) { c.level.head_dim_vo = 32; }), {"cascade: head_dim_vo must be 0 or head_dim"});
  refused(aotinfer_cascade_create(nullptr, &good, &cascade), {cfn, "package must not be NULL"});
  CHECK(with([](auto& c) { c.level.head_dim = 96; }) == AOTINFER_NOT_FOUND);  // no such merge_state in the fake
  stopped_at_driver(aotinfer_cascade_create(pkg, &good, &cascade));
  CHECK(cascade == nullptr);

  // workspace_sizes, plan and run on a fake handle: every bad argument is named before it.
  auto* handle = reinterpret_cast<aotinfer_cascade*>(junk);
  const std::string not_handle = "cascade: expected a handle from aotinfer_cascade_create, got a pointer to something else";
  std::size_t f = 0, i = 0;
  const char* sfn = "aotinfer_cascade_workspace_sizes: ";
  refused(aotinfer_cascade_workspace_sizes(handle, -1, 4, 0, &f, &i), {sfn, "max_total_q: expected >= 0, got -1"});
  refused(aotinfer_cascade_workspace_sizes(handle, 64, -4, 0, &f, &i), {sfn, "max_groups: expected >= 0, got -4"});
  refused(aotinfer_cascade_workspace_sizes(handle, 64, 4, -1, &f, &i), {sfn, "max_kv_len: expected >= 0, got -1"});
  refused(aotinfer_cascade_workspace_sizes(handle, 64, 4, 0, nullptr, &i), {sfn, "float_bytes must not be NULL"});
  refused(aotinfer_cascade_workspace_sizes(handle, 64, 4, 0, &f, &i), {sfn, not_handle});

  const std::int32_t groups[2] = {1, 2};
  const std::int32_t qo0[] = {0, 8}, qo1[] = {0, 3, 8}, kv0[] = {0, 2}, kv1[] = {0, 1, 2}, last0[] = {16}, last1[] = {4, 9};
  const std::int32_t ids0[] = {0, 1}, ids1[] = {2, 3}, counts[2] = {2, 2};
  const std::int32_t* qo[2] = {qo0, qo1};
  const std::int32_t* kv[2] = {kv0, kv1};
  const std::int32_t* last[2] = {last0, last1};
  const std::int32_t* ids[2] = {ids0, ids1};
  const std::int32_t* missing[2] = {qo0, nullptr};
  const std::int32_t bad_groups[2] = {1, -3};
  const char* pfn = "aotinfer_cascade_plan: ";
  auto plan = [&](std::int32_t levels, const std::int32_t* g, const std::int32_t* const* q, const std::int32_t* const* k,
                  const std::int32_t* const* lp, const std::int32_t* const* pages, const std::int32_t* n, void* iw) {
    return aotinfer_cascade_plan(handle, levels, g, q, k, lp, pages, n, 8, dev16, 256, iw, 256, nullptr);
  };
  refused(plan(0, groups, qo, kv, last, ids, counts, dev16), {pfn, "num_levels: expected >= 1, got 0"});
  refused(plan(2, nullptr, qo, kv, last, ids, counts, dev16), {pfn, "num_groups must not be NULL"});
  refused(plan(2, groups, nullptr, kv, last, ids, counts, dev16), {pfn, "qo_indptr must not be NULL"});
  refused(plan(2, groups, qo, kv, nullptr, ids, counts, dev16), {pfn, "kv_last_page_len must not be NULL"});
  refused(plan(2, bad_groups, qo, kv, last, ids, counts, dev16), {pfn, "num_groups[1]: expected >= 0, got -3"});
  refused(plan(2, groups, missing, kv, last, ids, counts, dev16), {pfn, "qo_indptr[1] must not be NULL"});
  refused(plan(2, groups, qo, kv, last, ids, nullptr, dev16), {pfn, "num_indices must not be NULL"});
  refused(plan(2, groups, qo, kv, last, ids, counts, nullptr), {pfn, "int_workspace must not be NULL"});
  refused(plan(2, groups, qo, kv, last, ids, counts, dev16), {pfn, not_handle});
  refused(plan(2, groups, qo, kv, last, nullptr, nullptr, dev16), {pfn, not_handle});  // page ids are optional

  const char* rfn = "aotinfer_cascade_run: ";
  aotinfer_cascade_run_args args{};
  refused(aotinfer_cascade_run(handle, nullptr, nullptr), {rfn, "args must not be NULL"});
  refused(aotinfer_cascade_run(handle, &args, nullptr), {rfn, "args->qo_indptr must not be NULL"});
  args.qo_indptr = args.kv_indptr = args.kv_indices = args.kv_last_page_len = qo;
  refused(aotinfer_cascade_run(nullptr, &args, nullptr), {rfn, "cascade must not be NULL"});
  refused(aotinfer_cascade_run(handle, &args, nullptr), {rfn, not_handle});

  const char* tfn = "aotinfer_cascade_tensors_run: ";
  aotinfer_cascade_tensors tensors{};
  aotinfer_attention_scalars scalars{};
  refused(aotinfer_cascade_tensors_run(handle, nullptr, &scalars, nullptr), {tfn, "tensors must not be NULL"});
  refused(aotinfer_cascade_tensors_run(handle, &tensors, nullptr, nullptr), {tfn, "scalars must not be NULL"});
  refused(aotinfer_cascade_tensors_run(handle, &tensors, &scalars, nullptr), {tfn, "tensors->qo_indptr must not be NULL"});
  aotinfer_tensor per_level[2] = {};
  tensors.qo_indptr = tensors.kv_indptr = tensors.kv_indices = tensors.kv_last_page_len = per_level;
  refused(aotinfer_cascade_tensors_run(handle, &tensors, &scalars, nullptr), {tfn, not_handle});

  aotinfer_cascade_destroy(nullptr);
  aotinfer_cascade_destroy(handle);
  CHECK_THAT(aotinfer_last_error(), Contains("aotinfer_cascade_destroy: ") && Contains(not_handle));
  aotinfer_package_close(pkg);
}

TEST_CASE("C API: the layout report holds the cascade's structs", "[cascade][c_api]") {
  const std::string layout = aotinfer_abi_layout();
  for (const char* name : {"\"aotinfer_cascade_config\"", "\"aotinfer_cascade_run_args\"", "\"aotinfer_cascade_tensors\""})
    CHECK_THAT(layout, Contains(name));
}
