// Speculative verification benchmark: q_len new tokens per request against a long paged KV,
// causal among themselves, run two ways on the same shapes: BatchDecode with q_len (the decode
// kernel, a request's tokens packed with its GQA heads into the MMA's rows) and BatchPrefill
// (the paged prefill kernels); skewed batches and several tokens a request also on the decode
// kernel with fixed KV chunks ("decode/2048"); both also under a custom mask of a speculative
// tree over the new tokens ("decode/tree", "prefill/tree": token t's parent is (t - 1) / 2, and
// it sees the whole prefix, its ancestors and itself), FlashInfer's packed bits. The work is memory-bound: each row prints the bytes moved (K and V of every
// request once, q and o) per second against the device's copy bandwidth, each row timed alone and
// queued back to back (bench_util.hpp; the bandwidth from the queued time, as FlashInfer's
// benchmarks time). Writes its rows as JSON lines.
// Usage: aotinfer_bench_specdec PACKAGE_DIR RESULTS.jsonl
// AOTINFER_BENCH_ONLY="decode:32:4:1024-8192" runs that row only (path:batch:q_len:kv lengths).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "bench_util.hpp"

namespace {

using bench::check;
using bench::median_us;
using bench::median_us_queued;

// A row's time two ways (bench_util.hpp): a call alone on an idle GPU, and calls queued back to
// back (as FlashInfer's benchmarks time them), from which the bandwidth columns come.
struct Times {
  double alone_us, queued_us;
};

constexpr int kQoHeads = 32, kKvHeads = 8, kHeadDim = 128, kPage = 16;

struct Shape {
  int batch, q_len, min_len, max_len;  // KV lengths evenly spaced over [min_len, max_len]
  int long_len = 0;                    // > 0: the last request has this many keys instead
  int longest() const { return std::max(max_len, long_len); }
  std::string lengths() const {
    return (min_len == max_len ? std::to_string(min_len) : std::to_string(min_len) + "-" + std::to_string(max_len)) +
           (long_len > 0 ? "+" + std::to_string(long_len) : "");
  }
};

void* device(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "malloc");
  return p;
}

// Random 16-bit values near 1 (timing on zeros can flatter a kernel).
void fill(void* p, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  std::mt19937 rng(16);
  for (size_t i = 0; i < bytes; ++i) host[i] = i % 2 ? (0x3c | (rng() & 0x81)) : (rng() & 0xff);
  check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
}

// One shape's cache and queries on the device, several copies of the KV pools so that L2
// serves no timed run.
struct Problem {
  std::vector<int> lens, kv_indptr, last, indices, qo_indptr;
  int num_pages = 0, sets = 1;
  size_t pool_bytes = 0, q_bytes = 0, moved = 0;
  std::vector<void*> k, v;
  void *q = nullptr, *o = nullptr;
  int *d_kv_indptr = nullptr, *d_last = nullptr, *d_indices = nullptr, *d_qo = nullptr;

  Problem(const Shape& s, size_t l2_bytes) {
    kv_indptr.push_back(0);
    qo_indptr.push_back(0);
    long keys = 0;
    for (int i = 0; i < s.batch; ++i) {
      // Evenly spaced, so that a peer script draws the same lengths without sharing a generator.
      const int n = s.long_len > 0 && i == s.batch - 1 ? s.long_len
                                                      : s.min_len + int(long(s.max_len - s.min_len) * i / std::max(1, s.batch - 1));
      const int pages = (n + kPage - 1) / kPage;
      lens.push_back(n);
      keys += n;
      kv_indptr.push_back(kv_indptr.back() + pages);
      last.push_back(n - (pages - 1) * kPage);
      qo_indptr.push_back(qo_indptr.back() + s.q_len);
    }
    num_pages = kv_indptr.back();
    indices.resize(num_pages);
    std::iota(indices.begin(), indices.end(), 0);
    std::shuffle(indices.begin(), indices.end(), std::mt19937(7));  // pages scattered as in a real pool
    pool_bytes = size_t(num_pages) * kPage * kKvHeads * kHeadDim * 2;
    q_bytes = size_t(s.batch) * s.q_len * kQoHeads * kHeadDim * 2;
    moved = 2 * size_t(keys) * kKvHeads * kHeadDim * 2 + 2 * q_bytes;  // the keys read once, q in, o out
    sets = int(std::min<size_t>(8, 3 * l2_bytes / (2 * pool_bytes) + 1));
    for (int i = 0; i < sets; ++i) {
      k.push_back(device(pool_bytes)), v.push_back(device(pool_bytes));
      fill(k.back(), pool_bytes), fill(v.back(), pool_bytes);
    }
    q = device(q_bytes), o = device(q_bytes);
    fill(q, q_bytes);
    d_kv_indptr = upload(kv_indptr), d_last = upload(last), d_indices = upload(indices), d_qo = upload(qo_indptr);
  }
  ~Problem() {
    for (int i = 0; i < sets; ++i) cudaFree(k[i]), cudaFree(v[i]);
    for (void* p : {q, o, static_cast<void*>(d_kv_indptr), static_cast<void*>(d_last), static_cast<void*>(d_indices),
                    static_cast<void*>(d_qo)})
      cudaFree(p);
  }
  static int* upload(const std::vector<int>& x) {
    int* d = static_cast<int*>(device(x.size() * 4));
    check(cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload");
    return d;
  }
};

// Request i's q_len x kv_len bits of a speculative tree (see the file comment), row-major and
// packed little-endian from byte indptr[i], as FlashInfer's packed_custom_mask; whole 4-byte
// words at the end, which the kernels read.
struct TreeMask {
  std::vector<std::uint8_t> bits;
  std::vector<int> indptr = {0};
  TreeMask(const Shape& s, const std::vector<int>& lens) {
    for (int n : lens) indptr.push_back(indptr.back() + (s.q_len * n + 7) / 8);
    bits.assign((std::size_t(indptr.back()) + 3) / 4 * 4, 0);
    for (std::size_t i = 0; i < lens.size(); ++i) {
      const int n = lens[i], prefix = n - s.q_len;
      for (int t = 0; t < s.q_len; ++t) {
        auto set = [&](int key) {
          const long bit = long(indptr[i]) * 8 + long(t) * n + key;
          bits[bit / 8] |= std::uint8_t(1u << (bit % 8));
        };
        for (int key = 0; key < prefix; ++key) set(key);
        for (int u = t;; u = (u - 1) / 2) {  // itself and its ancestors
          set(prefix + u);
          if (u == 0) break;
        }
      }
    }
  }
};

// The tree's bits and offsets on the device (freed with the object).
struct DeviceTreeMask {
  void *bits = nullptr, *indptr = nullptr;
  DeviceTreeMask(const Shape& s, const std::vector<int>& lens) {
    const TreeMask mask(s, lens);
    bits = device(mask.bits.size()), indptr = Problem::upload(mask.indptr);
    check(cudaMemcpy(bits, mask.bits.data(), mask.bits.size(), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceTreeMask() { cudaFree(bits), cudaFree(indptr); }
  const std::uint8_t* custom_mask() const { return static_cast<const std::uint8_t*>(bits); }
  const std::int32_t* mask_indptr() const { return static_cast<const std::int32_t*>(indptr); }
};


// The median of 30 runs (after 5), each over the next of the problem's K/V copies (run_on(copy)),
// alone and queued, under the tree mask when asked (set in a's custom_mask and mask_indptr);
// frees the workspace.
template <typename Args, typename RunOn>
Times time_runs(const Shape& s, Problem& p, Args& a, bool tree, const aotinfer::Workspace& ws, RunOn run_on) {
  std::optional<DeviceTreeMask> mask;
  if (tree) {
    mask.emplace(s, p.lens);
    a.custom_mask = mask->custom_mask(), a.mask_indptr = mask->mask_indptr();
  }
  const Times t{median_us(5, 30, [&](int i) { run_on(i % p.sets); }),
                median_us_queued(5, 30, [&](int i) { run_on(i % p.sets); })};
  check(cudaDeviceSynchronize(), "run");
  cudaFree(ws.float_buffer), cudaFree(ws.int_buffer);
  return t;
}

// chunk > 0: every request cut into chunks of that many keys (the fixed KV split), to show what
// splitting a skewed batch would gain over the adaptive plan. tree: under the tree mask.
Times run_decode(const aotinfer::Package& pkg, const Shape& s, Problem& p, bool& split, int chunk, bool tree) {
  aotinfer::BatchDecodeConfig cfg;
  cfg.num_qo_heads = kQoHeads, cfg.num_kv_heads = kKvHeads, cfg.head_dim = kHeadDim, cfg.page_size = kPage;
  cfg.q_len = s.q_len;
  cfg.custom_mask = tree;
  if (chunk > 0) cfg.kv_split = {aotinfer::KvSplit::Mode::fixed, chunk};
  aotinfer::BatchDecode decode(pkg, cfg);
  const aotinfer::WorkspaceSizes sizes = decode.workspace_sizes(s.batch, s.longest());
  aotinfer::Workspace ws{device(sizes.float_bytes), sizes.float_bytes, device(sizes.int_bytes), sizes.int_bytes};
  decode.plan(p.kv_indptr, p.last, p.indices, p.num_pages, ws, nullptr);
  split = decode.work_plan().split;
  aotinfer::DecodeRunArgs a;
  a.batch = s.batch, a.q = p.q, a.o = p.o;
  a.kv_indptr = p.d_kv_indptr, a.kv_indices = p.d_indices, a.kv_last_page_len = p.d_last;
  return time_runs(s, p, a, tree, ws, [&](int copy) {
    a.k_pages = p.k[copy], a.v_pages = p.v[copy];
    decode.run(a, nullptr);
  });
}

Times run_prefill(const aotinfer::Package& pkg, const Shape& s, Problem& p, bool& split, bool tree) {
  aotinfer::BatchPrefillConfig cfg;
  cfg.num_qo_heads = kQoHeads, cfg.num_kv_heads = kKvHeads, cfg.head_dim = kHeadDim, cfg.page_size = kPage;
  cfg.kv_storage = aotinfer::KvStorage::paged;
  cfg.mask = tree ? aotinfer::MaskMode::custom : aotinfer::MaskMode::causal;
  aotinfer::BatchPrefill prefill(pkg, cfg);
  const long tokens = long(s.batch) * s.q_len;
  const aotinfer::WorkspaceSizes sizes = prefill.workspace_sizes(tokens, s.batch, s.longest());
  aotinfer::Workspace ws{device(sizes.float_bytes), sizes.float_bytes, device(sizes.int_bytes), sizes.int_bytes};
  prefill.plan_paged(p.qo_indptr, p.kv_indptr, p.last, p.indices, p.num_pages, ws, nullptr);
  split = prefill.work_plan().split;
  aotinfer::PrefillRunArgs a;
  a.batch = s.batch, a.total_q = tokens, a.q = p.q, a.o = p.o, a.qo_indptr = p.d_qo;
  a.kv_indptr = p.d_kv_indptr, a.kv_indices = p.d_indices, a.kv_last_page_len = p.d_last;
  return time_runs(s, p, a, tree, ws, [&](int copy) {
    a.k = p.k[copy], a.v = p.v[copy];
    prefill.run(a, nullptr);
  });
}

}  // namespace

int main(int argc, char** argv) {
  bench::Session run = bench::start(argc, argv);
  std::printf("\nspeculative verification: bf16, %d qo / %d kv heads, head_dim %d, page %d, causal among the new tokens;\n"
              "KV lengths evenly spaced over the range; time is eager run(), median of 30, alone and queued back to back\n",
              kQoHeads, kKvHeads, kHeadDim, kPage);
  std::printf("%-12s %6s %6s %12s %6s %10s %10s %10s %8s %8s\n", "path", "batch", "q_len", "kv_len", "split", "MB moved",
              "alone us", "queued us", "GB/s", "of copy");
  // The last three are plain decode (one token) over skewed batches that fill a wave of CTAs by
  // themselves: lengths evenly spaced, and one 128k-key request among 31 short ones.
  const std::vector<Shape> shapes = {{32, 4, 1024, 8192}, {32, 4, 4096, 4096}, {8, 8, 2048, 32768}, {64, 2, 4096, 4096},
                                     {128, 4, 1024, 1024}, {16, 16, 4096, 4096}, {32, 1, 1024, 8192}, {64, 1, 512, 16384},
                                     {32, 1, 256, 1024, 131072}};
  aotinfer::BatchDecodeConfig decode_cfg;  // the variant both paths' tables need
  aotinfer::BatchPrefillConfig prefill_cfg;
  prefill_cfg.kv_storage = aotinfer::KvStorage::paged;
  const bool has_decode = bench::has_variant<aotinfer::BatchDecode>(run.pkg, decode_cfg);
  const bool has_prefill = bench::has_variant<aotinfer::BatchPrefill>(run.pkg, prefill_cfg);
  const bench::OnlyRows only;
  for (const Shape& s : shapes) {
    // Skewed batches and speculative rows also run with fixed chunks ("decode/2048": the fixed
    // KV split), which show whether a plan of more, shorter items would read faster.
    std::vector<std::string> paths = {"decode", "prefill"};
    if (s.q_len > 1) paths.insert(paths.end(), {"decode/tree", "prefill/tree"});
    if (s.min_len != s.max_len || s.long_len > 0 || s.q_len > 1) paths.insert(paths.begin() + 1, {"decode/2048", "decode/4096"});
    auto name = [&](const std::string& path) {
      return path + ":" + std::to_string(s.batch) + ":" + std::to_string(s.q_len) + ":" + s.lengths();
    };
    if (std::all_of(paths.begin(), paths.end(), [&](const std::string& path) { return only.skips(name(path)); })) continue;
    Problem p(s, size_t(run.prop.l2CacheSize));  // (the pools take seconds to fill: only for rows that run)
    for (const std::string& path : paths) {
      if (only.skips(name(path))) continue;
      const bool decode = path.rfind("decode", 0) == 0;
      if (!(decode ? has_decode : has_prefill)) {
        std::printf("%-12s %6d %6d %12s  (bf16/128 not in the package: skipped)\n", path.c_str(), s.batch, s.q_len,
                    s.lengths().c_str());
        continue;
      }
      const bool tree = path.size() > 5 && path.substr(path.size() - 5) == "/tree";
      const int chunk = decode && !tree && path.size() > 7 ? std::stoi(path.substr(7)) : 0;
      bool split = false;
      const Times t = decode ? run_decode(run.pkg, s, p, split, chunk, tree) : run_prefill(run.pkg, s, p, split, tree);
      const double gbs = p.moved / t.queued_us / 1e3;
      std::printf("%-12s %6d %6d %12s %6s %10.1f %10.1f %10.1f %8.0f %7.0f%%\n", path.c_str(), s.batch, s.q_len,
                  s.lengths().c_str(), split ? "yes" : "no", p.moved / 1e6, t.alone_us, t.queued_us, gbs,
                  100 * gbs / run.copy_gbs);
      run.results << "{\"path\": \"" << path << "\", \"batch\": " << s.batch << ", \"q_len\": " << s.q_len << ", \"kv_len\": \""
                  << s.lengths() << "\", \"us\": " << t.queued_us << ", \"alone_us\": " << t.alone_us
                  << ", \"bytes\": " << p.moved << "}\n";
    }
  }
  return 0;
}
