// CPU-only core contracts: sha256, archs, dtypes, file writers, fatbin table of contents, manifest.
#include "catch.hpp"

#include "test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "aotinfer/json.hpp"
#include "aotinfer/arch.hpp"
#include "aotinfer/dtype.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/fatbin.hpp"
#include "aotinfer/files.hpp"
#include "aotinfer/manifest.hpp"
#include "aotinfer/sha256.hpp"

namespace fs = std::filesystem;
using aotinfer::Error;
using aotinfer::ErrorCode;
using aotinfer_test::Contains;

namespace {

using aotinfer::test::TempDir;
using aotinfer::test::error_of;

std::vector<std::string> dir_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void write_raw(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// SHA-256

TEST_CASE("sha256 matches the FIPS 180-4 test vectors", "[core][sha256]") {
  CHECK(aotinfer::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(aotinfer::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(aotinfer::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(aotinfer::sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlm"
                             "nopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST_CASE("sha256 of one million 'a' fed in uneven chunks", "[core][sha256]") {
  const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  const std::string million(1000000, 'a');
  CHECK(aotinfer::sha256_hex(million) == expected);

  // Chunk sizes that straddle the 64-byte block boundary in every way, including empty updates.
  const std::size_t pattern[] = {1, 0, 63, 64, 65, 7, 127, 55, 56, 1000, 3};
  aotinfer::Sha256 h;
  std::size_t fed = 0, i = 0;
  while (fed < million.size()) {
    std::size_t take = std::min(pattern[i++ % std::size(pattern)], million.size() - fed);
    h.update(million.data() + fed, take);
    fed += take;
  }
  CHECK(fed == million.size());
  CHECK(h.hex_digest() == expected);
}

TEST_CASE("sha256 around the padding boundaries", "[core][sha256]") {
  // Reference digests from an independent implementation (Python hashlib).
  const std::pair<std::size_t, const char*> vectors[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (const auto& [n, digest] : vectors) {
    INFO(n << " x 'a'");
    CHECK(aotinfer::sha256_hex(std::string(n, 'a')) == digest);
    aotinfer::Sha256 bytewise;
    for (std::size_t k = 0; k < n; ++k) bytewise.update("a");
    CHECK(bytewise.hex_digest() == digest);
  }
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(char(b));
  CHECK(aotinfer::sha256_hex(all_bytes) == "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880");
}

// ---------------------------------------------------------------------------------------------
// Archs and dtypes

TEST_CASE("Arch::parse and name", "[core][arch]") {
  auto a80 = aotinfer::Arch::parse("sm_80");
  REQUIRE(a80);
  CHECK(a80->major == 8);
  CHECK(a80->minor == 0);
  CHECK_FALSE(a80->specific);
  CHECK(a80->number() == 80);

  auto a90a = aotinfer::Arch::parse("sm_90a");
  REQUIRE(a90a);
  CHECK(a90a->major == 9);
  CHECK(a90a->minor == 0);
  CHECK(a90a->specific);
  CHECK(a90a->name() == "sm_90a");

  auto a121a = aotinfer::Arch::parse("sm_121a");
  REQUIRE(a121a);
  CHECK(a121a->major == 12);
  CHECK(a121a->minor == 1);
  CHECK(a121a->specific);

  auto a100 = aotinfer::Arch::parse("sm_100");
  REQUIRE(a100);
  CHECK(a100->major == 10);
  CHECK(a100->minor == 0);
  CHECK(a100->number() == 100);

  for (const char* bad : {"", "sm_", "sm_91", "sm_80a", "compute_90", "SM_90", "sm90", "sm_9", "sm_90 ", "sm_090"}) {
    INFO(bad);
    CHECK_FALSE(aotinfer::Arch::parse(bad).has_value());
  }
  for (const auto& name : aotinfer::known_arch_names()) {
    INFO(name);
    auto a = aotinfer::Arch::parse(name);
    REQUIRE(a);
    CHECK(a->name() == name);
  }
}

TEST_CASE("Arch::runs_on follows the binary compatibility rules", "[core][arch]") {
  auto arch = [](const char* n) { return *aotinfer::Arch::parse(n); };
  CHECK(arch("sm_80").runs_on(8, 0));
  CHECK(arch("sm_80").runs_on(8, 6));
  CHECK(arch("sm_80").runs_on(8, 9));
  CHECK_FALSE(arch("sm_80").runs_on(9, 0));
  CHECK_FALSE(arch("sm_80").runs_on(7, 5));
  CHECK_FALSE(arch("sm_86").runs_on(8, 0));
  CHECK(arch("sm_86").runs_on(8, 9));
  CHECK(arch("sm_90").runs_on(9, 0));
  CHECK(arch("sm_90a").runs_on(9, 0));
  CHECK_FALSE(arch("sm_90a").runs_on(9, 1));
  CHECK_FALSE(arch("sm_90a").runs_on(10, 0));
  CHECK_FALSE(arch("sm_90a").runs_on(8, 0));
  CHECK_FALSE(arch("sm_90").runs_on(10, 0));
  CHECK(arch("sm_100").runs_on(10, 3));
  CHECK_FALSE(arch("sm_100a").runs_on(10, 3));
  CHECK(arch("sm_120").runs_on(12, 1));
}

TEST_CASE("Family archs and PTX archs parse, name and run where the toolkit says", "[core][arch]") {
  auto sass = [](const char* n) { return *aotinfer::Arch::parse(n); };
  auto ptx = [](const char* n) { return *aotinfer::Arch::parse_ptx(n); };
  const aotinfer::Arch f100 = sass("sm_100f");
  CHECK((f100.major == 10 && f100.minor == 0 && f100.family && !f100.specific));
  CHECK(f100.name() == "sm_100f");
  CHECK(f100.ptx_name() == "compute_100f");
  CHECK(f100.runs_on(10, 0));
  CHECK(f100.runs_on(10, 3));  // the family's later chip
  CHECK_FALSE(f100.runs_on(11, 0));
  CHECK_FALSE(sass("sm_103f").runs_on(10, 0));
  CHECK(sass("sm_120f").runs_on(12, 1));
  for (const char* bad : {"sm_90f", "sm_80f", "compute_90f", "sm_100af"}) {
    INFO(bad);
    CHECK_FALSE(aotinfer::Arch::parse(bad).has_value());
    CHECK_FALSE(aotinfer::Arch::parse_ptx(bad).has_value());
  }
  CHECK_FALSE(aotinfer::Arch::parse_ptx("sm_80").has_value());
  CHECK_FALSE(aotinfer::Arch::parse("compute_80").has_value());

  // Plain PTX is compiled by the driver for any later chip; "a"/"f" PTX only where its SASS runs.
  CHECK(ptx("compute_80").ptx_runs_on(8, 0));
  CHECK(ptx("compute_80").ptx_runs_on(12, 0));
  CHECK_FALSE(ptx("compute_80").ptx_runs_on(7, 5));
  CHECK_FALSE(ptx("compute_86").ptx_runs_on(8, 0));
  CHECK(ptx("compute_90a").ptx_runs_on(9, 0));
  CHECK_FALSE(ptx("compute_90a").ptx_runs_on(10, 0));
  CHECK(ptx("compute_100f").ptx_runs_on(10, 3));
  CHECK_FALSE(ptx("compute_100f").ptx_runs_on(12, 0));
  for (const auto& name : aotinfer::known_ptx_names()) {
    INFO(name);
    REQUIRE(aotinfer::Arch::parse_ptx(name));
    CHECK(aotinfer::Arch::parse_ptx(name)->ptx_name() == name);
  }
}

TEST_CASE("known_chips: every known arch runs on some chip, every chip has an arch", "[core][arch]") {
  const auto& chips = aotinfer::known_chips();
  for (const auto& name : aotinfer::known_arch_names()) {
    INFO(name);
    const aotinfer::Arch a = *aotinfer::Arch::parse(name);
    CHECK(std::any_of(chips.begin(), chips.end(), [&](const auto& c) { return a.runs_on(c.major, c.minor); }));
  }
  for (const auto& c : chips) {
    INFO(c.name());
    CHECK(aotinfer::Arch::parse(c.name()).has_value());
    CHECK(c.smem_per_block >= 64 * 1024);
  }
  auto chip = [&](int major, int minor) {
    return *std::find_if(chips.begin(), chips.end(), [&](const auto& c) { return c.major == major && c.minor == minor; });
  };
  CHECK(chip(8, 9).smem_per_block == 101376);  // 99 KiB on Ada
  CHECK(chip(9, 0).smem_per_block == 232448);  // 227 KiB on Hopper
  CHECK(chip(12, 0).smem_per_block == 101376);
}

TEST_CASE("sort_arch_names sorts by generation, unknown names last", "[core][arch]") {
  std::vector<std::string> names = {"sm_100", "zz_unknown", "sm_90a", "sm_80", "sm_120a", "sm_90", "aa_unknown", "sm_86"};
  aotinfer::sort_arch_names(names);
  CHECK(names == std::vector<std::string>{"sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120a", "zz_unknown", "aa_unknown"});

  const auto& known = aotinfer::known_arch_names();
  REQUIRE(known.size() >= 2);
  CHECK(known.front() == "sm_75");
  for (std::size_t i = 1; i < known.size(); ++i) {
    INFO(known[i - 1] << " < " << known[i]);
    auto prev = *aotinfer::Arch::parse(known[i - 1]), cur = *aotinfer::Arch::parse(known[i]);
    // Within a number: plain, then family ("f"), then arch-specific ("a"), by how few chips run it.
    auto scope = [](const aotinfer::Arch& a) { return a.specific ? 2 : a.family ? 1 : 0; };
    CHECK((prev.number() < cur.number() || (prev.number() == cur.number() && scope(prev) < scope(cur))));
  }
}

TEST_CASE("dtype names and sizes", "[core][dtype]") {
  using aotinfer::DType;
  const std::pair<DType, std::size_t> all[] = {{DType::f16, 2}, {DType::bf16, 2}, {DType::e4m3, 1},
                                               {DType::e5m2, 1}, {DType::f32, 4}, {DType::i32, 4}};
  for (const auto& [t, size] : all) {
    auto name = aotinfer::dtype_name(t);
    INFO(name);
    CHECK(aotinfer::parse_dtype(name) == t);
    CHECK(aotinfer::dtype_size(t) == size);
  }
  CHECK(aotinfer::dtype_name(DType::bf16) == "bf16");
  CHECK_FALSE(aotinfer::parse_dtype("BF16").has_value());
  CHECK_FALSE(aotinfer::parse_dtype("float").has_value());
  CHECK_FALSE(aotinfer::parse_dtype("").has_value());
}

// ---------------------------------------------------------------------------------------------
// Files

TEST_CASE("write_file_atomic writes, replaces and leaves no temporary behind", "[core][files]") {
  TempDir tmp;
  const fs::path file = tmp.path / "sub" / "dir" / "out.txt";  // parents are created
  aotinfer::write_file_atomic(file, "first version, fairly long\n");
  CHECK(aotinfer::read_file(file) == "first version, fairly long\n");
  aotinfer::write_file_atomic(file, "second");
  CHECK(aotinfer::read_file(file) == "second");
  CHECK(fs::file_size(file) == 6);
  CHECK(dir_names(file.parent_path()) == std::vector<std::string>{"out.txt"});

  const std::string binary("a\0b\r\n\xff", 6);
  aotinfer::write_file_atomic(file, binary);
  CHECK(aotinfer::read_file(file) == binary);
  aotinfer::write_file_atomic(file, "");
  CHECK(aotinfer::read_file(file).empty());
  CHECK(dir_names(file.parent_path()) == std::vector<std::string>{"out.txt"});
}

TEST_CASE("write_file_atomic reports a file it cannot write", "[core][files]") {
  TempDir tmp;
  fs::create_directories(tmp.path / "occupied");
  // The target is a directory: the rename cannot replace it.
  Error e = error_of([&] { aotinfer::write_file_atomic(tmp.path / "occupied", "x"); });
  CHECK(e.code() == ErrorCode::io_error);
  CHECK_THAT(e.what(), Contains((tmp.path / "occupied").string()));
  CHECK(dir_names(tmp.path) == std::vector<std::string>{"occupied"});  // no temporary left
}

TEST_CASE("write_if_different keeps unchanged files untouched", "[core][files]") {
  TempDir tmp;
  const fs::path file = tmp.path / "gen.h";
  CHECK(aotinfer::write_if_different(file, "content A"));  // new file
  CHECK(aotinfer::read_file(file) == "content A");

  const auto old_time = fs::file_time_type::clock::now() - std::chrono::hours(48);
  fs::last_write_time(file, old_time);
  CHECK_FALSE(aotinfer::write_if_different(file, "content A"));
  CHECK(fs::last_write_time(file) == old_time);
  CHECK(aotinfer::read_file(file) == "content A");

  CHECK(aotinfer::write_if_different(file, "content B"));  // same size, other bytes
  CHECK(aotinfer::read_file(file) == "content B");
  CHECK(fs::last_write_time(file) != old_time);

  fs::last_write_time(file, old_time);
  CHECK(aotinfer::write_if_different(file, "content B, longer"));
  CHECK(aotinfer::read_file(file) == "content B, longer");
  CHECK(fs::last_write_time(file) > old_time);
  CHECK(dir_names(tmp.path) == std::vector<std::string>{"gen.h"});
}

TEST_CASE("read_file names the file it cannot read", "[core][files]") {
  TempDir tmp;
  const fs::path missing = tmp.path / "no-such-file.json";
  Error e = error_of([&] { aotinfer::read_file(missing); });
  CHECK(e.code() == ErrorCode::io_error);
  CHECK_THAT(e.what(), Contains(missing.string()));
  CHECK_THAT(e.what(), Contains("No such file"));
}

// ---------------------------------------------------------------------------------------------
// Fatbin

namespace {

template <typename T>
void put(std::string& bytes, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) bytes[offset + i] = char((std::uint64_t(value) >> (8 * i)) & 0xff);
}

constexpr std::uint16_t kPtx = 1, kElf = 2;
constexpr std::uint64_t kCompressed = 0x8000, kArchSpecific = 0x100000;

struct FakeEntry {
  std::uint16_t kind;
  std::uint32_t arch;
  std::uint64_t flags = 0;
  std::string payload = "payload";
};

std::string entry_bytes(const FakeEntry& e, std::uint32_t header_size = 64) {
  std::string h(header_size, '\0');
  put<std::uint16_t>(h, 0, e.kind);
  put<std::uint32_t>(h, 4, header_size);
  put<std::uint64_t>(h, 8, e.payload.size());
  put<std::uint32_t>(h, 28, e.arch);
  put<std::uint64_t>(h, 40, e.flags);
  return h + e.payload;
}

std::string container_bytes(const std::string& body) {
  std::string h(16, '\0');
  put<std::uint32_t>(h, 0, 0xBA55ED50u);
  put<std::uint16_t>(h, 4, 1);
  put<std::uint16_t>(h, 6, 16);
  put<std::uint64_t>(h, 8, body.size());
  return h + body;
}

std::string fatbin(const std::vector<FakeEntry>& entries) {
  std::string body;
  for (const auto& e : entries) body += entry_bytes(e);
  return container_bytes(body);
}

}  // namespace

TEST_CASE("read_fatbin_entries lists the code of each entry", "[core][fatbin]") {
  const std::string bytes = fatbin({{kElf, 80, 0, "sass for sm_80"},
                                    {kElf, 90, kArchSpecific | kCompressed, "compressed"},
                                    {kPtx, 90, 0, ".version 9.0"},
                                    {kElf, 100, 0, ""}});
  auto entries = aotinfer::read_fatbin_entries(bytes);
  REQUIRE(entries.size() == 4);
  CHECK(entries[0].kind == aotinfer::FatbinEntry::Kind::sass);
  CHECK(entries[0].arch == "sm_80");
  CHECK_FALSE(entries[0].compressed);
  CHECK(entries[1].kind == aotinfer::FatbinEntry::Kind::sass);
  CHECK(entries[1].arch == "sm_90a");
  CHECK(entries[1].compressed);
  CHECK(entries[2].kind == aotinfer::FatbinEntry::Kind::ptx);
  CHECK(entries[2].arch == "compute_90");
  CHECK_FALSE(entries[2].compressed);
  CHECK(entries[3].arch == "sm_100");
}

TEST_CASE("read_fatbin_entries reads several containers and larger entry headers", "[core][fatbin]") {
  std::string second_body = entry_bytes({kElf, 86, kCompressed, "x"}, 72) + entry_bytes({kPtx, 86, 0, "ptx"}, 64);
  const std::string bytes = fatbin({{kElf, 80}}) + container_bytes(second_body);
  auto entries = aotinfer::read_fatbin_entries(bytes);
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].arch == "sm_80");
  CHECK(entries[1].arch == "sm_86");
  CHECK(entries[1].compressed);
  CHECK(entries[2].arch == "compute_86");
  CHECK(entries[2].kind == aotinfer::FatbinEntry::Kind::ptx);
}

TEST_CASE("fatbin_sass_archs: SASS only, unique, by generation", "[core][fatbin]") {
  const std::string bytes = fatbin({{kElf, 100},
                                    {kPtx, 120},
                                    {kElf, 90, kArchSpecific},
                                    {kElf, 80},
                                    {kElf, 90},
                                    {kElf, 80, kCompressed},
                                    {kElf, 100}});
  CHECK(aotinfer::fatbin_sass_archs(bytes) == std::vector<std::string>{"sm_80", "sm_90", "sm_90a", "sm_100"});
  CHECK(aotinfer::fatbin_sass_archs(fatbin({{kPtx, 90}})).empty());
}

TEST_CASE("read_fatbin_entries rejects what is not a fatbin", "[core][fatbin]") {
  const std::string good = fatbin({{kElf, 80, 0, "0123456789"}});
  REQUIRE(aotinfer::read_fatbin_entries(good).size() == 1);

  auto wrap_body = [&] {  // body size that wraps size_t when added to the offset
    std::string b = good;
    put<std::uint64_t>(b, 8, ~std::uint64_t(0) - 15);
    return b;
  };
  auto entry_header = [&](std::uint32_t size) {
    std::string b = good;
    put<std::uint32_t>(b, 16 + 4, size);
    return b;
  };
  auto payload = [&](std::uint64_t size) {
    std::string b = good;
    put<std::uint64_t>(b, 16 + 8, size);
    return b;
  };
  auto header_size = [&](std::uint16_t size) {
    std::string b = good;
    put<std::uint16_t>(b, 6, size);
    return b;
  };
  std::string bad_magic = good;
  bad_magic[0] ^= 1;

  const std::pair<std::string, std::string> cases[] = {
      {"", "no code entries"},
      {"garbage", "truncated container header"},
      {std::string(64, 'x'), "bad magic"},
      {bad_magic, "bad magic"},
      {good.substr(0, good.size() - 1), "container size exceeds the file"},
      {good.substr(0, 40), "container size exceeds the file"},
      {good + "trailing", "truncated container header"},
      {good + std::string(16, '\0'), "bad magic"},
      {wrap_body(), "container size exceeds the file"},
      {header_size(8), "container size exceeds the file"},
      {header_size(0xffff), "container size exceeds the file"},
      {container_bytes(""), "no code entries"},
      {container_bytes(std::string(63, '\0')), "truncated entry header"},
      {entry_header(32), "entry size exceeds its container"},
      {entry_header(0xffffffffu), "entry size exceeds its container"},
      {entry_header(64 + 11), "entry size exceeds its container"},
      {payload(11), "entry size exceeds its container"},
      {payload(~std::uint64_t(0)), "entry size exceeds its container"},
  };
  int i = 0;
  for (const auto& [bytes, why] : cases) {
    INFO("case " << i++ << ": " << why);
    Error e = error_of([&] { aotinfer::read_fatbin_entries(bytes); });
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains("not a valid CUDA fatbin") && Contains(why));
    Error e2 = error_of([&] { aotinfer::fatbin_sass_archs(bytes); });
    CHECK(e2.code() == ErrorCode::corrupt_package);
  }
}

TEST_CASE("read_fatbin_entries survives random corruption", "[core][fatbin]") {
  const std::string good = fatbin({{kElf, 80, 0, "abcdefgh"}, {kPtx, 80, 0, "ptx text"}, {kElf, 90, kArchSpecific, "z"}});
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  int rejected = 0, accepted = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string b = good;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = char(rng());
    if (rng() % 3 == 0) b.resize(rng() % b.size());
    try {
      auto entries = aotinfer::read_fatbin_entries(b);
      CHECK_FALSE(entries.empty());
      ++accepted;
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::corrupt_package);
      ++rejected;
    }
  }
  CHECK(accepted + rejected == 2000);
  CHECK(rejected > 0);
}

// ---------------------------------------------------------------------------------------------
// Manifest

namespace {

aotinfer::Manifest sample_manifest() {
  aotinfer::Manifest m;
  m.generator = "aotinfer-gen 0.1.0";
  m.package_name = "aotinfer-test";
  m.package_version = "1.2.3";
  m.spec_file = "test.aotinfer.json";
  m.spec_sha256 = std::string(64, 'c');
  m.archs = {"sm_80", "sm_90a"};
  auto variant = [](aotinfer::VariantKey key, std::vector<std::string> archs) {
    aotinfer::ManifestVariant v;
    v.entries = {{"merge", aotinfer::entry_symbol(key, "merge"), aotinfer::launch_symbol(key, "merge")}};
    v.file = "kernels/" + key.uri() + ".fatbin";
    v.size = 1234 + key.axes.size();
    v.sha256 = std::string(64, 'a');
    v.archs = std::move(archs);
    v.key = std::move(key);
    return v;
  };
  // Axes deliberately not in alphabetical order: the manifest keeps template-parameter order.
  m.variants.push_back(variant({"merge_state", {{"head_dim", "128"}, {"dtype", "bf16"}}}, {"sm_80", "sm_90a"}));
  m.variants.push_back(variant({"merge_state", {{"head_dim", "64"}, {"dtype", "f16"}}}, {"sm_80"}));
  auto attention = variant({"attention", {{"window", "-1"}, {"causal", "true"}, {"pos_enc", "rope_llama"}}}, {"sm_90a"});
  attention.entries.push_back({"fwd_split", aotinfer::entry_symbol(attention.key, "fwd_split"),
                               aotinfer::launch_symbol(attention.key, "fwd_split")});
  m.variants.push_back(attention);
  return m;
}

}  // namespace

TEST_CASE("manifest_to_json writes typed values in template order", "[core][manifest]") {
  const aotinfer::Manifest m = sample_manifest();
  const nlohmann::ordered_json j = manifest_to_json(m);
  CHECK(j["format"] == 1);
  CHECK(j["package"]["name"] == "aotinfer-test");
  CHECK(j["package"]["version"] == "1.2.3");
  CHECK(j["spec"]["file"] == "test.aotinfer.json");
  CHECK(j["archs"] == nlohmann::ordered_json{"sm_80", "sm_90a"});
  REQUIRE(j["variants"].size() == 3);

  const auto& v0 = j["variants"][0];
  CHECK(v0["uri"] == "merge_state.head_dim-128.dtype-bf16");
  CHECK(v0["family"] == "merge_state");
  CHECK(v0["axes"]["head_dim"].is_number_integer());
  CHECK(v0["axes"]["head_dim"] == 128);
  CHECK(v0["axes"]["dtype"].is_string());
  CHECK(v0["axes"].begin().key() == "head_dim");  // order kept
  CHECK(v0["size"] == 1236);
  CHECK(v0["entries"][0]["symbol"] == "aotinfer_merge_state__head_dim_128__dtype_bf16__merge");

  const auto& v2 = j["variants"][2];
  CHECK(v2["axes"]["window"] == -1);
  CHECK(v2["axes"]["causal"].is_boolean());
  CHECK(v2["axes"]["causal"] == true);
  CHECK(v2["axes"]["pos_enc"] == "rope_llama");
  std::vector<std::string> axis_order;
  for (const auto& item : v2["axes"].items()) axis_order.push_back(item.key());
  CHECK(axis_order == std::vector<std::string>{"window", "causal", "pos_enc"});
  CHECK(v2["entries"].size() == 2);
}

TEST_CASE("Manifest round trips through JSON and through dump()/load()", "[core][manifest]") {
  const aotinfer::Manifest m = sample_manifest();
  CHECK(aotinfer::manifest_from_json(manifest_to_json(m), "memory") == m);

  TempDir tmp;
  const fs::path file = tmp.path / "manifest.json";
  const std::string text = m.dump();
  CHECK(text.back() == '\n');
  CHECK(m.dump() == text);  // stable
  aotinfer::write_file_atomic(file, text);
  const aotinfer::Manifest loaded = aotinfer::Manifest::load(file);
  CHECK(loaded == m);
  CHECK(loaded.variants[2].key.axes[0].name == "window");
  CHECK(loaded.variants[0].key.axes[0].name == "head_dim");
  CHECK(loaded.dump() == text);

  aotinfer::Manifest other = m;
  other.variants[1].archs.push_back("sm_100");
  CHECK_FALSE(other == m);
  CHECK(other.dump() != text);
}

TEST_CASE("Manifest families: recorded ones round trip, a manifest without them loads and dumps unchanged", "[core][manifest]") {
  aotinfer::Manifest m = sample_manifest();
  m.variants.pop_back();  // the attention variant: its family is not recorded below
  const std::string without = m.dump();
  CHECK_FALSE(manifest_to_json(m).contains("families"));
  CHECK(aotinfer::manifest_from_json(manifest_to_json(m), "memory").families.empty());

  aotinfer::ManifestAxis dtype{"dtype", "dtype", {"f16", "bf16"}, std::nullopt, std::nullopt};
  dtype.follows = "head_dim";
  aotinfer::ManifestAxis head_dim{"head_dim", "int", {"64", "128"}, std::nullopt, std::nullopt};
  head_dim.default_value = "128";
  m.families = {{"merge_state", {head_dim, dtype}}};
  const nlohmann::ordered_json j = manifest_to_json(m);
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  CHECK(keys == std::vector<std::string>{"format", "generator", "package", "spec", "archs", "families", "variants"});
  CHECK(j["families"][0] == nlohmann::ordered_json::parse(R"({"family": "merge_state", "axes": [
          {"name": "head_dim", "kind": "int", "allowed": [64, 128], "default": 128},
          {"name": "dtype", "kind": "dtype", "allowed": ["f16", "bf16"], "follows": "head_dim"}]})"));
  CHECK(aotinfer::manifest_from_json(j, "memory") == m);
  CHECK(m.family("merge_state")->axis("head_dim")->default_value == "128");
  CHECK(m.family("attention") == nullptr);
  CHECK(m.family("merge_state")->axis("window") == nullptr);
  CHECK(m.dump() != without);
}

TEST_CASE("Manifest::load names the file and the JSON pointer of a problem", "[core][manifest]") {
  TempDir tmp;
  const fs::path file = tmp.path / "manifest.json";
  const nlohmann::ordered_json good = manifest_to_json(sample_manifest());

  auto load_error = [&](const std::string& text) {
    write_raw(file, text);
    Error e = error_of([&] { aotinfer::Manifest::load(file); });
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(file.string()));
    return std::string(e.what());
  };
  auto edited = [&](auto&& edit) {
    nlohmann::ordered_json j = good;
    edit(j);
    return j.dump(2);
  };

  SECTION("bad JSON") {
    CHECK_THAT(load_error("{\"format\": 1,"), Contains("not valid JSON"));
    CHECK_THAT(load_error(""), Contains("not valid JSON"));
  }
  SECTION("not an object") { CHECK_THAT(load_error("[1, 2]"), Contains("a manifest is a JSON object")); }
  SECTION("wrong format number") {
    auto msg = load_error(edited([](auto& j) { j["format"] = 2; }));
    CHECK_THAT(msg, Contains("manifest format 2 is not supported") && Contains("rebuild"));
  }
  SECTION("wrong type") {
    CHECK_THAT(load_error(edited([](auto& j) { j["format"] = "1"; })), Contains("/format has the wrong type (string)"));
    CHECK_THAT(load_error(edited([](auto& j) { j["variants"][1]["size"] = "big"; })),
               Contains("/variants/1/size has the wrong type (string)"));
    CHECK_THAT(load_error(edited([](auto& j) { j["archs"] = "sm_80"; })), Contains("/archs has the wrong type"));
  }
  SECTION("missing members") {
    CHECK_THAT(load_error(edited([](auto& j) { j.erase("generator"); })), Contains("/generator is missing"));
    CHECK_THAT(load_error(edited([](auto& j) { j.erase("package"); })), Contains("/package is missing"));
    CHECK_THAT(load_error(edited([](auto& j) { j["package"].erase("version"); })), Contains("/package/version is missing"));
    CHECK_THAT(load_error(edited([](auto& j) { j.erase("spec"); })), Contains("/spec is missing"));
    CHECK_THAT(load_error(edited([](auto& j) { j["variants"][1].erase("sha256"); })),
               Contains("/variants/1/sha256 is missing"));
    CHECK_THAT(load_error(edited([](auto& j) { j["variants"][0].erase("uri"); })), Contains("/variants/0/uri is missing"));
    CHECK_THAT(load_error(edited([](auto& j) { j["variants"][2]["entries"][1].erase("launch_symbol"); })),
               Contains("/variants/2/entries/1/launch_symbol is missing"));
  }
  SECTION("uri disagreeing with family and axes") {
    auto msg = load_error(edited([](auto& j) { j["variants"][1]["axes"]["head_dim"] = 256; }));
    CHECK_THAT(msg, Contains("/variants/1") && Contains("disagrees") && Contains("merge_state.head_dim-64.dtype-f16") &&
                        Contains("head_dim=256"));
    msg = load_error(edited([](auto& j) { j["variants"][0]["family"] = "other"; }));
    CHECK_THAT(msg, Contains("/variants/0") && Contains("disagrees"));
    // Same values, other order: the order is part of the key.
    msg = load_error(edited([](auto& j) {
      j["variants"][0]["axes"] = nlohmann::ordered_json{{"dtype", "bf16"}, {"head_dim", 128}};
    }));
    CHECK_THAT(msg, Contains("/variants/0") && Contains("disagrees"));
    // An integer axis written as a string is not the same value.
    msg = load_error(edited([](auto& j) { j["variants"][0]["axes"]["head_dim"] = "128"; }));
    CHECK_THAT(msg, Contains("/variants/0") && Contains("'128'"));
  }
  SECTION("invalid uri") {
    auto msg = load_error(edited([](auto& j) { j["variants"][2]["uri"] = "Attention.window--1"; }));
    CHECK_THAT(msg, Contains("/variants/2") && Contains("invalid variant URI"));
  }
}

TEST_CASE("manifest_from_json names its source", "[core][manifest]") {
  Error e = error_of([] { aotinfer::manifest_from_json(nlohmann::ordered_json::object(), "some/source.json"); });
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains("some/source.json") && Contains("/format is missing"));

  Error missing = error_of([] { aotinfer::Manifest::load("/nonexistent-aotinfer-dir/manifest.json"); });
  CHECK(missing.code() == ErrorCode::io_error);
  CHECK_THAT(missing.what(), Contains("/nonexistent-aotinfer-dir/manifest.json"));
}
