// The checks every described tensor goes through before a launch (runtime/src/checks/tensor_checks.hpp),
// on the CPU: a correct set passes and becomes the right launch arguments; each class of mistake
// (dtype, shape against the config and the plan, device, strides, alignment, scalars) is refused
// with a message naming the argument, what was expected and what was given.
#include "catch.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "checks/tensor_checks.hpp"
#include "unit/test_util.hpp"

using namespace aotinfer;
using aotinfer::test::error_of;
using aotinfer_test::Contains;

namespace {

// A described tensor at a fake, well-aligned device address (nothing is dereferenced).
aotinfer_tensor tensor(aotinfer_dtype dtype, std::vector<std::int64_t> shape, std::uintptr_t address = 0x7f0000000000) {
  aotinfer_tensor t{};
  t.data = reinterpret_cast<void*>(address);
  t.ndim = int(shape.size());
  t.dtype = dtype;
  t.device_type = AOTINFER_DEVICE_CUDA;
  t.device_id = 0;
  std::int64_t step = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = step;
    step *= shape[i];
  }
  return t;
}

// Ragged prefill tensors of the default config (bf16, head_dim 128, 32 query / 8 KV heads):
// q and o of q_rows tokens, K and V of kv_rows, indptrs for `batch` requests.
aotinfer_batch_prefill_tensors ragged_tensors(std::int64_t q_rows, std::int64_t kv_rows, std::int64_t batch) {
  aotinfer_batch_prefill_tensors t{};
  t.q = tensor(AOTINFER_BF16, {q_rows, 32, 128});
  t.o = tensor(AOTINFER_BF16, {q_rows, 32, 128});
  t.k = tensor(AOTINFER_BF16, {kv_rows, 8, 128});
  t.v = tensor(AOTINFER_BF16, {kv_rows, 8, 128});
  t.qo_indptr = tensor(AOTINFER_I32, {batch + 1});
  t.kv_indptr = tensor(AOTINFER_I32, {batch + 1});
  return t;
}

int device_zero() { return 0; }
int no_device_expected() {
  FAIL("the current device was asked for although no GPU tensor needed it");
  return 0;
}

struct DecodeCase {
  BatchDecodeConfig config;  // bf16, hd128, 32/8 heads, page 16, nhd
  detail::PlannedShape plan{3, 3, 10, 40, 0};
  aotinfer_batch_decode_tensors t{};
  aotinfer_attention_scalars scalars{};

  DecodeCase() {
    t.q = tensor(AOTINFER_BF16, {3, 32, 128});
    t.o = tensor(AOTINFER_BF16, {3, 32, 128}, 0x7f0000100000);
    t.k_pages = tensor(AOTINFER_BF16, {40, 16, 8, 128}, 0x7f0001000000);
    t.v_pages = tensor(AOTINFER_BF16, {40, 16, 8, 128}, 0x7f0002000000);
    t.kv_indptr = tensor(AOTINFER_I32, {4});
    t.kv_indices = tensor(AOTINFER_I32, {10});
    t.kv_last_page_len = tensor(AOTINFER_I32, {3});
  }
  std::string error() { return error_of([&] { detail::decode_run_args(config, plan, t, scalars); }).what(); }
};

}  // namespace

TEST_CASE("decode tensors that fit become the launch arguments", "[tensor_checks]") {
  DecodeCase c;
  DecodeRunArgs a = detail::decode_run_args(c.config, c.plan, c.t, c.scalars);
  CHECK(a.batch == 3);
  CHECK(a.q == c.t.q.data);
  CHECK(a.o == c.t.o.data);
  CHECK(a.k_pages == c.t.k_pages.data);
  CHECK(a.kv_stride_page == 16 * 8 * 128);
  CHECK(a.lse == nullptr);
  CHECK(a.rope_theta == 1e4f);
  CHECK(a.k_scale == 1.f);

  // K and V interleaved in one [pages, 2, page_size, heads, dim] tensor: a double page stride.
  for (aotinfer_tensor* pool : {&c.t.k_pages, &c.t.v_pages}) pool->strides[0] = 2 * 16 * 8 * 128;
  c.t.v_pages.data = static_cast<char*>(c.t.k_pages.data) + 16 * 8 * 128 * 2;
  CHECK(detail::decode_run_args(c.config, c.plan, c.t, c.scalars).kv_stride_page == 2 * 16 * 8 * 128);

  CHECK(a.sinks == nullptr);

  c.t.lse = tensor(AOTINFER_F32, {3, 32});
  c.t.q_positions = tensor(AOTINFER_I32, {3});
  c.t.sinks = tensor(AOTINFER_F32, {32}, 0x7f0000200000);
  a = detail::decode_run_args(c.config, c.plan, c.t, c.scalars);
  CHECK(a.lse == c.t.lse.data);
  CHECK(a.q_positions == c.t.q_positions.data);
  CHECK(a.sinks == c.t.sinks.data);
}

TEST_CASE("decode under a custom mask takes the packed bits and their offsets, and only then", "[tensor_checks]") {
  DecodeCase c;
  c.config.q_len = 2;
  c.plan.q_rows = 6;
  c.plan.mask_bytes = 9;  // packed bits of the three requests
  c.t.q = tensor(AOTINFER_BF16, {6, 32, 128});
  c.t.o = tensor(AOTINFER_BF16, {6, 32, 128}, 0x7f0000100000);
  c.t.custom_mask = tensor(AOTINFER_U8, {12}, 0x7f0000200000);
  c.t.mask_indptr = tensor(AOTINFER_I32, {4}, 0x7f0000300000);
  CHECK_THAT(c.error(), Contains("batch_decode.run: custom_mask: is given but the decode's config.custom_mask is false"));
  c.config.custom_mask = true;
  const DecodeRunArgs a = detail::decode_run_args(c.config, c.plan, c.t, c.scalars);
  CHECK(a.custom_mask == c.t.custom_mask.data);
  CHECK(a.mask_indptr == c.t.mask_indptr.data);
  c.t.custom_mask.shape[0] = 11;  // 9 bytes rounded up to 4: 12
  CHECK_THAT(c.error(), Contains("custom_mask: expected shape [>= 12]"));
  c.t.custom_mask = {};
  CHECK_THAT(c.error(), Contains("custom_mask"));
}

TEST_CASE("decode with several query tokens per request takes batch * q_len rows of q, o, lse and q_positions", "[tensor_checks]") {
  DecodeCase c;
  c.config.q_len = 4;
  c.plan.q_rows = 12;
  CHECK_THAT(c.error(), Contains("batch_decode.run: q: expected shape [12, 32, 128] (batch * q_len, num_qo_heads, head_dim), got [3, 32, 128]"));
  c.t.q = tensor(AOTINFER_BF16, {12, 32, 128});
  c.t.o = tensor(AOTINFER_BF16, {12, 32, 128}, 0x7f0000100000);
  c.t.lse = tensor(AOTINFER_F32, {12, 32});
  c.t.q_positions = tensor(AOTINFER_I32, {12});
  const DecodeRunArgs a = detail::decode_run_args(c.config, c.plan, c.t, c.scalars);
  CHECK(a.batch == 3);
  CHECK(a.lse == c.t.lse.data);
  c.t.q_positions = tensor(AOTINFER_I32, {3});
  CHECK_THAT(c.error(), Contains("q_positions: expected shape [12] (batch * q_len), got [3]"));
}

TEST_CASE("MLA decode tensors: latent views of one cache pass, each bad one is refused by name", "[tensor_checks]") {
  BatchMlaDecodeConfig config;  // bf16, 16 heads, page 64
  const detail::PlannedShape plan{2, 4, 7, 9, 0};  // 2 requests x 2 tokens, 7 page entries, 9 pages
  aotinfer_batch_mla_decode_tensors t{};
  t.q_nope = tensor(AOTINFER_BF16, {4, 16, 512});
  t.q_pe = tensor(AOTINFER_BF16, {4, 16, 64}, 0x7f0000100000);
  t.o = tensor(AOTINFER_BF16, {4, 16, 512}, 0x7f0000200000);
  // ckv and kpe as views of one [pages, page_size, 576] cache (page stride 64 * 576).
  t.ckv = tensor(AOTINFER_BF16, {9, 64, 512}, 0x7f0001000000);
  t.kpe = tensor(AOTINFER_BF16, {9, 64, 64}, 0x7f0001000000 + 512 * 2);
  t.ckv.strides[0] = t.kpe.strides[0] = 64 * 576;
  t.kv_indices = tensor(AOTINFER_I32, {7});
  const aotinfer_mla_scalars scalars{0.07f, 0, 0};  // cache scales 0: 1
  auto error = [&] { return std::string(error_of([&] { detail::mla_decode_run_args(config, plan, t, scalars); }).what()); };

  MlaDecodeRunArgs a = detail::mla_decode_run_args(config, plan, t, scalars);
  CHECK(a.batch == 2);
  CHECK(a.ckv_stride_page == 64 * 576);
  CHECK(a.kpe_stride_page == 64 * 576);
  CHECK(a.q_nope_stride == 16 * 512);  // dense rows, said explicitly
  CHECK(a.lse == nullptr);
  CHECK(a.sm_scale == 0.07f);
  CHECK((a.ckv_scale == 1.f && a.kpe_scale == 1.f));

  SECTION("q_pe of another dtype") {
    t.q_pe.dtype = AOTINFER_F16;
    CHECK_THAT(error(), Contains("batch_mla_decode.run: q_pe: expected dtype bf16, got f16"));
  }
  SECTION("q_nope for one token per request") {
    t.q_nope = tensor(AOTINFER_BF16, {2, 16, 512});
    CHECK_THAT(error(), Contains("q_nope: expected shape [4, 16, 512] (batch * q_len, num_heads, kv_lora_rank 512)"));
  }
  SECTION("ckv whose tokens are strided inside a page (a [pages, page_size, 576] slice the kernel cannot read)") {
    t.ckv.strides[1] = 576;
    CHECK_THAT(error(), Contains("ckv: must be contiguous past its first dimension"));
  }
  SECTION("a cache of another page size") {
    t.kpe = tensor(AOTINFER_BF16, {9, 16, 64});
    CHECK_THAT(error(), Contains("kpe: expected shape [>= 9, 64, 64] (pages, page_size, qk_rope_head_dim 64)"));
  }
  SECTION("an lse of the wrong rows") {
    t.lse = tensor(AOTINFER_F32, {2, 16});
    CHECK_THAT(error(), Contains("lse: expected shape [4, 16] (batch * q_len, num_heads)"));
  }
  SECTION("an e4m3 cache: the pools in e4m3 with their scales, q and o in bf16") {
    config.dtype_kv = DType::e4m3;
    CHECK_THAT(error(), Contains("ckv: expected dtype e4m3, got bf16"));
    t.ckv.dtype = t.kpe.dtype = AOTINFER_E4M3;
    t.kpe.data = reinterpret_cast<void*>(0x7f0001000000 + 512);  // a byte per element
    const MlaDecodeRunArgs fp8 = detail::mla_decode_run_args(config, plan, t, {0.07f, 0.5f, 0.25f});
    CHECK((fp8.ckv_scale == 0.5f && fp8.kpe_scale == 0.25f));
    t.q_nope.dtype = AOTINFER_E4M3;
    CHECK_THAT(error(), Contains("q_nope: expected dtype bf16, got e4m3"));
  }
}

TEST_CASE("each kind of bad decode tensor is refused, naming it", "[tensor_checks]") {
  DecodeCase c;
  SECTION("float16 q for a bf16 decode") {
    c.t.q.dtype = AOTINFER_F16;
    CHECK_THAT(c.error(), Contains("batch_decode.run: q: expected dtype bf16, got f16"));
  }
  SECTION("a dtype aotinfer does not know, by the caller's name") {
    c.t.o.dtype = AOTINFER_DTYPE_OTHER;
    std::snprintf(c.t.o.dtype_name, sizeof c.t.o.dtype_name, "float64");
    CHECK_THAT(c.error(), Contains("o: expected dtype bf16, got float64"));
  }
  SECTION("o with too few rows") {
    c.t.o.shape[0] = 2;
    CHECK_THAT(c.error(), Contains("o: expected shape [3, 32, 128] (batch, num_qo_heads, head_dim), got [2, 32, 128]"));
  }
  SECTION("q with the wrong head_dim") {
    c.t.q = tensor(AOTINFER_BF16, {3, 32, 64});
    CHECK_THAT(c.error(), Contains("q: expected shape [3, 32, 128]"));
  }
  SECTION("a KV pool left on the CPU") {
    c.t.k_pages.device_type = AOTINFER_DEVICE_CPU;
    CHECK_THAT(c.error(), Contains("k_pages: is in the CPU"));
  }
  SECTION("pinned host memory") {
    c.t.kv_indptr.device_type = AOTINFER_DEVICE_CUDA_HOST;
    CHECK_THAT(c.error(), Contains("kv_indptr: is in pinned host memory"));
  }
  SECTION("another GPU than the plan's") {
    c.t.v_pages.device_id = 1;
    CHECK_THAT(c.error(), Contains("v_pages: is on cuda:1 but the kernels run on cuda:0"));
  }
  SECTION("a transposed q") {
    std::swap(c.t.q.strides[1], c.t.q.strides[2]);
    CHECK_THAT(c.error(), Contains("q: must be contiguous past its first dimension"));
  }
  SECTION("a token-strided q (a slice of a fused qkv tensor) is read in place; overlapping rows are not") {
    c.t.q.strides[0] = 48 * 128;
    CHECK(detail::decode_run_args(c.config, c.plan, c.t, c.scalars).q_stride == 48 * 128);
    c.t.q.strides[0] = 31 * 128;
    CHECK_THAT(c.error(), Contains("q: rows overlap"));
  }
  SECTION("a misaligned q") {
    c.t.q.data = static_cast<char*>(c.t.q.data) + 2;
    CHECK_THAT(c.error(), Contains("q: data must be 16-byte aligned"));
  }
  SECTION("lse of the wrong dtype") {
    c.t.lse = tensor(AOTINFER_BF16, {3, 32});
    CHECK_THAT(c.error(), Contains("lse: expected dtype f32, got bf16"));
  }
  SECTION("sinks of the wrong dtype, or one per KV head") {
    c.t.sinks = tensor(AOTINFER_BF16, {32});
    CHECK_THAT(c.error(), Contains("sinks: expected dtype f32, got bf16"));
    c.t.sinks = tensor(AOTINFER_F32, {8});
    CHECK_THAT(c.error(), Contains("sinks: expected shape [32] (num_qo_heads), got [8]"));
  }
  SECTION("kv_indptr of the wrong length") {
    c.t.kv_indptr = tensor(AOTINFER_I32, {3});
    CHECK_THAT(c.error(), Contains("kv_indptr: expected shape [4] (batch + 1), got [3]"));
  }
  SECTION("kv_indices shorter than the plan's pages") {
    c.t.kv_indices = tensor(AOTINFER_I32, {9});
    CHECK_THAT(c.error(), Contains("kv_indices: expected shape [>= 10]"));
  }
  SECTION("int64 metadata") {
    c.t.kv_last_page_len.dtype = AOTINFER_DTYPE_OTHER;
    std::snprintf(c.t.kv_last_page_len.dtype_name, sizeof c.t.kv_last_page_len.dtype_name, "int64");
    CHECK_THAT(c.error(), Contains("kv_last_page_len: expected dtype i32, got int64"));
  }
  SECTION("a pool with fewer pages than the plan's page ids reach") {
    c.t.k_pages.shape[0] = 39;
    CHECK_THAT(c.error(), Contains("k_pages: expected shape [>= 40, 16, 8, 128]"));
  }
  SECTION("a pool in the other layout") {
    c.t.k_pages = tensor(AOTINFER_BF16, {40, 8, 16, 128}, 0x7f0001000000);
    CHECK_THAT(c.error(), Contains("(pages, page_size, num_kv_heads, head_dim)"));
  }
  SECTION("K and V pools with different page strides") {
    c.t.v_pages.strides[0] *= 2;
    CHECK_THAT(c.error(), Contains("v_pages: its page stride"));
  }
  SECTION("a missing required tensor") {
    c.t.kv_indices.data = nullptr;
    CHECK_THAT(c.error(), Contains("kv_indices: is required"));
  }
}

TEST_CASE("prefill tensors: ragged K/V may be views of a fused tensor, q and o need the planned rows", "[tensor_checks]") {
  BatchPrefillConfig config;
  config.kv_storage = KvStorage::ragged;
  const detail::PlannedShape plan{2, 100, 300, 0, 0};
  aotinfer_batch_prefill_tensors t = ragged_tensors(128, 300, 2);
  // k and v: slices of a [300, 32 + 8 + 8, 128] fused QKV tensor.
  t.v = tensor(AOTINFER_BF16, {300, 8, 128}, 0x7f0000000000 + 8 * 128 * 2);
  t.k.strides[0] = t.v.strides[0] = 48 * 128;
  const aotinfer_attention_scalars scalars{};
  PrefillRunArgs a = detail::prefill_run_args(config, plan, t, scalars);
  CHECK(a.kv_stride == 48 * 128);
  CHECK(a.total_q == 100);
  CHECK(a.q_stride == 32 * 128);  // dense rows
  // q a slice of the same fused tensor: its tokens 48 rows of 128 apart, read in place.
  t.q.strides[0] = 48 * 128;
  CHECK(detail::prefill_run_args(config, plan, t, scalars).q_stride == 48 * 128);
  t.q.strides[0] = 48 * 128 + 4;  // rows 8 bytes off the 16-byte grid
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("q: the first dimension's stride must be a multiple of 16 bytes"));
  t.q.strides[0] = 32 * 128;
  CHECK(a.sinks == nullptr);
  t.sinks = tensor(AOTINFER_F32, {32});
  CHECK(detail::prefill_run_args(config, plan, t, scalars).sinks == t.sinks.data);
  t.sinks = tensor(AOTINFER_F32, {1, 32});
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("batch_prefill.run: sinks: expected shape [32] (num_qo_heads), got [1, 32]"));
  t.sinks = {};

  t.q.shape[0] = t.o.shape[0] = 99;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("batch_prefill.run: q: expected shape [>= 100, 32, 128] (total_q, num_qo_heads, head_dim), got [99, 32, 128]"));
  t.q.shape[0] = t.o.shape[0] = 128;
  t.k.shape[0] = 299;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(), Contains("k: expected shape [>= 300"));
  t.k.shape[0] = 300;
  t.k.strides[2] = 2;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("k: must be contiguous past its first dimension"));
  t.k.strides[2] = 1;
  t.k.strides[0] = t.v.strides[0] = 48 * 128 + 1;  // rows 2 bytes off the 16-byte grid
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("k: the first dimension's stride must be a multiple of 16 bytes"));
}

TEST_CASE("paged prefill checks its pools and page table", "[tensor_checks]") {
  BatchPrefillConfig config;  // paged, nhd, page 16, bf16 hd128 32/8
  config.layout = KvLayout::hnd;
  const detail::PlannedShape plan{1, 20, 4, 0, 0};
  aotinfer_batch_prefill_tensors t{};
  t.q = tensor(AOTINFER_BF16, {20, 32, 128});
  t.o = tensor(AOTINFER_BF16, {20, 32, 128});
  t.k = tensor(AOTINFER_BF16, {6, 8, 16, 128});
  t.v = tensor(AOTINFER_BF16, {6, 8, 16, 128});
  t.qo_indptr = tensor(AOTINFER_I32, {2});
  t.kv_indptr = tensor(AOTINFER_I32, {2});
  t.kv_indices = tensor(AOTINFER_I32, {4});
  t.kv_last_page_len = tensor(AOTINFER_I32, {1});
  const aotinfer_attention_scalars scalars{};
  CHECK(detail::prefill_run_args(config, plan, t, scalars).kv_stride == 8 * 16 * 128);
  t.kv_last_page_len.data = nullptr;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(), Contains("kv_last_page_len: is required"));
}

TEST_CASE("prefill at head_dim 192 / head_dim_vo 128: o and v are head_dim_vo wide, V's stride is its own", "[tensor_checks]") {
  BatchPrefillConfig config;  // bf16, 32/8 heads
  config.head_dim = 192, config.head_dim_vo = 128;
  const aotinfer_attention_scalars scalars{};
  aotinfer_batch_prefill_tensors t{};
  t.q = tensor(AOTINFER_BF16, {20, 32, 192});
  t.o = tensor(AOTINFER_BF16, {20, 32, 128});
  t.qo_indptr = tensor(AOTINFER_I32, {2});
  t.kv_indptr = tensor(AOTINFER_I32, {2});
  auto error = [&](const detail::PlannedShape& plan) {
    return std::string(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what());
  };

  SECTION("ragged: k and v are slices of one up-projection with their own token strides") {
    config.kv_storage = KvStorage::ragged;
    const detail::PlannedShape plan{1, 20, 300, 0, 0};
    // Each token's row holds its 8 K heads (192 wide), then its 8 V heads (128 wide).
    t.k = tensor(AOTINFER_BF16, {300, 8, 192});
    t.v = tensor(AOTINFER_BF16, {300, 8, 128}, 0x7f0000000000 + 8 * 192 * 2);
    t.k.strides[0] = t.v.strides[0] = 8 * (192 + 128);
    PrefillRunArgs a = detail::prefill_run_args(config, plan, t, scalars);
    CHECK(a.kv_stride == 8 * (192 + 128));
    CHECK(a.v_stride == 8 * (192 + 128));
    t.v.strides[0] = 8 * 128;  // a dense V of its own
    a = detail::prefill_run_args(config, plan, t, scalars);
    CHECK(a.kv_stride == 8 * (192 + 128));
    CHECK(a.v_stride == 8 * 128);
    t.v = tensor(AOTINFER_BF16, {300, 8, 192});
    CHECK_THAT(error(plan), Contains("batch_prefill.run: v: expected shape [>= 300, 8, 128] (total_kv, num_kv_heads, head_dim_vo), "
                                     "got [300, 8, 192]"));
  }
  SECTION("paged: V's pool has head_dim_vo rows and its own page stride") {
    const detail::PlannedShape plan{1, 20, 4, 6, 0};
    t.k = tensor(AOTINFER_BF16, {6, 16, 8, 192});
    t.v = tensor(AOTINFER_BF16, {6, 16, 8, 128});
    t.kv_indices = tensor(AOTINFER_I32, {4});
    t.kv_last_page_len = tensor(AOTINFER_I32, {1});
    const PrefillRunArgs a = detail::prefill_run_args(config, plan, t, scalars);
    CHECK(a.kv_stride == 16 * 8 * 192);
    CHECK(a.v_stride == 16 * 8 * 128);
    t.v = tensor(AOTINFER_BF16, {6, 16, 8, 192});
    CHECK_THAT(error(plan), Contains("v: expected shape [>= 6, 16, 8, 128] (pages, page_size, num_kv_heads, head_dim_vo)"));
  }
  SECTION("o is head_dim_vo wide, q head_dim") {
    config.kv_storage = KvStorage::ragged;
    t.k = tensor(AOTINFER_BF16, {300, 8, 192});
    t.v = tensor(AOTINFER_BF16, {300, 8, 128});
    t.o = tensor(AOTINFER_BF16, {20, 32, 192});
    CHECK_THAT(error({1, 20, 300, 0, 0}),
               Contains("o: expected shape [>= 20, 32, 128] (total_q, num_qo_heads, head_dim_vo), got [20, 32, 192]"));
    t.o = tensor(AOTINFER_BF16, {20, 32, 128});
    t.q = tensor(AOTINFER_BF16, {20, 32, 128});
    CHECK_THAT(error({1, 20, 300, 0, 0}), Contains("q: expected shape [>= 20, 32, 192] (total_q, num_qo_heads, head_dim)"));
  }
}

TEST_CASE("prefill at equal widths takes one stride for K and V, which the kernels step both with", "[tensor_checks]") {
  BatchPrefillConfig config;
  config.kv_storage = KvStorage::ragged;
  config.head_dim_vo = 128;  // spelled out: the same as 0
  const detail::PlannedShape plan{1, 20, 300, 0, 0};
  aotinfer_batch_prefill_tensors t = ragged_tensors(20, 300, 1);
  const aotinfer_attention_scalars scalars{};
  t.k.strides[0] = t.v.strides[0] = 16 * 128;
  const PrefillRunArgs a = detail::prefill_run_args(config, plan, t, scalars);
  CHECK(a.kv_stride == 16 * 128);
  CHECK(a.v_stride == 16 * 128);
  t.v.strides[0] = 8 * 128;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("v: its page stride 1024 differs from K's 2048"));
}

TEST_CASE("prefill under a custom mask needs its bits (rounded up to 4 bytes) and offsets, and only then", "[tensor_checks]") {
  BatchPrefillConfig config;
  config.kv_storage = KvStorage::ragged;
  detail::PlannedShape plan{2, 100, 300, 0, 0};
  plan.mask_bytes = 10;  // the kernels read words: 12 bytes must be there
  aotinfer_batch_prefill_tensors t = ragged_tensors(100, 300, 2);
  const aotinfer_attention_scalars scalars{};
  t.custom_mask = tensor(AOTINFER_U8, {12}, 0x7f0000200000);
  t.mask_indptr = tensor(AOTINFER_I32, {3}, 0x7f0000300000);
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("custom_mask: is given but the prefill's mask is not \"custom\""));
  config.mask = MaskMode::custom;
  const PrefillRunArgs a = detail::prefill_run_args(config, plan, t, scalars);
  CHECK(a.custom_mask == t.custom_mask.data);
  CHECK(a.mask_indptr == t.mask_indptr.data);
  t.custom_mask.shape[0] = 11;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(),
             Contains("custom_mask: expected shape [>= 12]"));
  t.custom_mask.shape[0] = 12;
  t.custom_mask.dtype = AOTINFER_I32;
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(), Contains("custom_mask: expected dtype u8"));
  t.custom_mask.dtype = AOTINFER_U8;
  t.mask_indptr = {};
  CHECK_THAT(error_of([&] { detail::prefill_run_args(config, plan, t, scalars); }).what(), Contains("mask_indptr: is required"));
}

TEST_CASE("merge_state and append_paged_kv pick their variant from the tensors and check the rest", "[tensor_checks]") {
  aotinfer_merge_state_tensors m{};
  m.v_a = tensor(AOTINFER_F16, {5, 4, 64});
  m.v_b = tensor(AOTINFER_F16, {5, 4, 64});
  m.v_out = tensor(AOTINFER_F16, {5, 4, 64});
  m.s_a = tensor(AOTINFER_F32, {5, 4});
  m.s_b = tensor(AOTINFER_F32, {5, 4});
  const auto call = detail::merge_state_call(m, device_zero);
  CHECK(call.dtype == DType::f16);
  CHECK(call.head_dim == 64);
  CHECK(call.params.rows == 20);
  CHECK(call.params.s_out == nullptr);

  m.s_b.shape[1] = 5;
  CHECK_THAT(error_of([&] { detail::merge_state_call(m, device_zero); }).what(),
             Contains("merge_state: s_b: expected shape [5, 4] (tokens, heads), got [5, 5]"));
  // A CPU tensor is refused before the current device is ever needed (no driver required).
  m.v_a.device_type = AOTINFER_DEVICE_CPU;
  CHECK_THAT(error_of([&] { detail::merge_state_call(m, no_device_expected); }).what(), Contains("v_a: is in the CPU"));

  aotinfer_append_paged_kv_tensors a{};
  a.k_pages = tensor(AOTINFER_E4M3, {9, 8, 16, 128});
  a.v_pages = tensor(AOTINFER_E4M3, {9, 8, 16, 128});
  a.k = tensor(AOTINFER_E4M3, {1, 8, 128});
  a.k.strides[0] = 3;  // meaningless for one token
  a.v = tensor(AOTINFER_E4M3, {1, 8, 128});
  a.batch_indices = tensor(AOTINFER_I32, {1});
  a.positions = tensor(AOTINFER_I32, {1});
  a.kv_indptr = tensor(AOTINFER_I32, {3});
  a.kv_indices = tensor(AOTINFER_I32, {7});
  a.kv_last_page_len = tensor(AOTINFER_I32, {2});
  const auto append = detail::append_paged_kv_call(a, KvLayout::hnd, device_zero);
  CHECK(append.dtype == DType::e4m3);
  CHECK(append.head_dim == 128);
  CHECK(append.params.kv.page_size == 16);
  CHECK(append.params.kv.num_kv_heads == 8);
  CHECK(append.params.kv.stride_head == 16 * 128);
  CHECK(append.params.k_stride_token == 8 * 128);
  a.v.dtype = AOTINFER_BF16;
  CHECK_THAT(error_of([&] { detail::append_paged_kv_call(a, KvLayout::hnd, device_zero); }).what(),
             Contains("append_paged_kv: v: expected dtype e4m3, got bf16"));
}
