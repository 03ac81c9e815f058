#include "resources.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <zstd.h>

#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/fatbin.hpp"

namespace aotinfer::gen {
namespace {

[[noreturn]] void corrupt(const std::string& what) { throw Error(ErrorCode::corrupt_package, what); }

// A cubin image is tens of KB to a few MB; a size beyond this is a damaged header.
constexpr std::uint64_t kMaxImageBytes = std::uint64_t(1) << 30;

std::string image_of(const FatbinEntry& e) {
  if (!e.compressed) return std::string(e.payload);
  if (e.uncompressed_size == 0 || e.uncompressed_size > kMaxImageBytes)
    corrupt(e.arch + " image: implausible uncompressed size " + std::to_string(e.uncompressed_size));
  // The payload is one zstd frame, padded to the entry's alignment.
  const std::size_t frame = ZSTD_findFrameCompressedSize(e.payload.data(), e.payload.size());
  if (ZSTD_isError(frame)) corrupt(e.arch + " image: not a zstd frame (" + ZSTD_getErrorName(frame) + ")");
  std::string out(e.uncompressed_size, '\0');
  const std::size_t got = ZSTD_decompress(out.data(), out.size(), e.payload.data(), frame);
  if (ZSTD_isError(got) || got != out.size())
    corrupt(e.arch + " image: zstd decompression failed (" + (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short") + ")");
  return out;
}

// The parts of an ELF64 cubin the check reads, with every offset bounds-checked.
class Cubin {
 public:
  struct Section {
    std::string name;
    std::uint32_t type = 0, link = 0, info = 0;
    std::uint64_t offset = 0, size = 0;
  };

  Cubin(std::string_view bytes, std::string arch) : bytes_(bytes), arch_(std::move(arch)) {
    if (bytes.size() < 64 || std::memcmp(bytes.data(), "\x7f" "ELF\x02\x01", 6) != 0) fail("not a 64-bit little-endian ELF");
    const auto shoff = load<std::uint64_t>(0x28);
    const auto shentsize = load<std::uint16_t>(0x3a), shnum = load<std::uint16_t>(0x3c), shstrndx = load<std::uint16_t>(0x3e);
    if (shentsize != 64 || shstrndx >= shnum) fail("bad section header table");
    for (std::uint16_t i = 0; i < shnum; ++i) {
      const std::uint64_t at = shoff + std::uint64_t(i) * 64;
      Section s;
      s.type = load<std::uint32_t>(at + 4);
      s.offset = load<std::uint64_t>(at + 24);
      s.size = load<std::uint64_t>(at + 32);
      s.link = load<std::uint32_t>(at + 40);
      s.info = load<std::uint32_t>(at + 44);
      name_offsets_.push_back(load<std::uint32_t>(at));
      sections_.push_back(s);
    }
    for (std::size_t i = 0; i < sections_.size(); ++i) sections_[i].name = string_at(sections_[shstrndx], name_offsets_[i]);
  }

  const Section* section(const std::string& name) const {
    for (const auto& s : sections_)
      if (s.name == name) return &s;
    return nullptr;
  }

  // Bytes of `symbol`'s definition (a __device__ global), or fails naming it.
  std::string_view symbol_bytes(const std::string& symbol) const {
    for (const auto& table : sections_) {
      if (table.type != 2 /* SHT_SYMTAB */ || table.link >= sections_.size()) continue;
      for (std::uint64_t at = 0; at + 24 <= table.size; at += 24) {
        const std::uint64_t entry = table.offset + at;
        if (string_at(sections_[table.link], load<std::uint32_t>(entry)) != symbol) continue;
        const auto index = load<std::uint16_t>(entry + 6);
        const auto value = load<std::uint64_t>(entry + 8), size = load<std::uint64_t>(entry + 16);
        if (index == 0 || index >= sections_.size()) fail("symbol " + symbol + " is not defined in a section");
        const Section& home = sections_[index];
        if (value > home.size || size > home.size - value) fail("symbol " + symbol + " lies outside its section");
        return span(home.offset + value, size);
      }
    }
    fail("no symbol " + symbol);
  }

  // The value of a per-function attribute in .nv.info (EIFMT_SVAL entries of {symbol index, u32}).
  std::uint32_t function_attribute(std::uint8_t attribute, std::uint32_t symbol_index) const {
    const Section* info = section(".nv.info");
    if (!info) return 0;
    for (std::uint64_t at = 0; at + 4 <= info->size;) {
      const std::uint64_t entry = info->offset + at;
      const auto format = load<std::uint8_t>(entry), attr = load<std::uint8_t>(entry + 1);
      std::uint64_t length = 4;
      if (format == 4 /* EIFMT_SVAL */) {
        const auto value_size = load<std::uint16_t>(entry + 2);
        if (attr == attribute && value_size == 8 && load<std::uint32_t>(entry + 4) == symbol_index)
          return load<std::uint32_t>(entry + 8);
        length += value_size;
      }
      at += length;
    }
    return 0;
  }

  // The symbol-table index of `name` (the key of its .nv.info attributes).
  std::uint32_t symbol_index(const std::string& name) const {
    for (const auto& table : sections_) {
      if (table.type != 2 || table.link >= sections_.size()) continue;
      for (std::uint64_t at = 0; at + 24 <= table.size; at += 24)
        if (string_at(sections_[table.link], load<std::uint32_t>(table.offset + at)) == name) return std::uint32_t(at / 24);
    }
    fail("no symbol " + name);
  }

  [[noreturn]] void fail(const std::string& why) const { corrupt(arch_ + " cubin: " + why); }

  template <typename T>
  T load(std::uint64_t offset) const {
    if (offset > bytes_.size() || sizeof(T) > bytes_.size() - offset) fail("truncated");
    T v;
    std::memcpy(&v, bytes_.data() + offset, sizeof(T));
    return v;
  }

 private:
  std::string_view span(std::uint64_t offset, std::uint64_t size) const {
    if (offset > bytes_.size() || size > bytes_.size() - offset) fail("truncated");
    return bytes_.substr(offset, size);
  }
  std::string string_at(const Section& table, std::uint32_t offset) const {
    const std::string_view text = span(table.offset, table.size);
    if (offset >= text.size()) fail("string offset beyond its table");
    const std::size_t end = text.find('\0', offset);
    if (end == std::string_view::npos) fail("unterminated string");
    return std::string(text.substr(offset, end - offset));
  }

  std::string_view bytes_;
  std::string arch_;
  std::vector<Section> sections_;
  std::vector<std::uint32_t> name_offsets_;
};

// Per-function attributes of .nv.info.
constexpr std::uint8_t kAttrFrameSize = 0x11;  // EIATTR_FRAME_SIZE: the stack frame, bytes per thread
constexpr std::uint8_t kAttrRegCount = 0x2f;   // EIATTR_REGCOUNT: registers per thread

KernelResources kernel_resources(const Cubin& cubin, const EntryPoint& e) {
  KernelResources r;
  r.entry = e.name;
  const Cubin::Section* text = cubin.section(".text." + e.symbol);
  if (!text) cubin.fail("no code for entry " + e.symbol);
  const std::uint32_t symbol = cubin.symbol_index(e.symbol);
  r.registers = cubin.function_attribute(kAttrRegCount, symbol);
  if (r.registers == 0) r.registers = text->info >> 24;  // older cubins keep it in the top byte of sh_info
  // On sm_90 and later this section also holds the 1 KiB the system reserves per CTA: counted.
  if (const Cubin::Section* shared = cubin.section(".nv.shared." + e.symbol)) r.static_smem = std::uint32_t(shared->size);
  r.stack_bytes = cubin.function_attribute(kAttrFrameSize, symbol);
  // aotinfer_launch_info (templates/aotinfer/abi.h): abi_version, params_size, block[3], dynamic_smem_bytes, tile[4].
  const std::string_view launch = cubin.symbol_bytes(e.launch_symbol);
  if (launch.size() < 24) cubin.fail("launch info " + e.launch_symbol + " has " + std::to_string(launch.size()) + " bytes");
  std::uint32_t block[3], dynamic_smem;
  std::memcpy(block, launch.data() + 8, sizeof block);
  std::memcpy(&dynamic_smem, launch.data() + 20, sizeof dynamic_smem);
  r.threads = block[0] * block[1] * block[2];
  r.dynamic_smem = dynamic_smem;
  return r;
}

std::string kib(std::uint64_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes / 1024) + (bytes % 1024 ? "+" : "") + " KiB)";
}

// Registers are allocated per warp in units of 8 per thread.
std::uint64_t registers_per_cta(const KernelResources& k) {
  const std::uint64_t warps = (std::uint64_t(k.threads) + 31) / 32;
  return warps * 32 * ((std::uint64_t(k.registers) + 7) / 8 * 8);
}

}  // namespace

std::vector<ArchResources> read_resources(std::string_view fatbin, const std::vector<EntryPoint>& entries) {
  std::vector<ArchResources> out;
  for (const FatbinEntry& e : read_fatbin_entries(fatbin)) {
    if (e.kind != FatbinEntry::Kind::sass) continue;
    const std::string image = image_of(e);
    const Cubin cubin(image, e.arch);
    ArchResources per_arch{e.arch, {}};
    for (const auto& entry : entries) per_arch.kernels.push_back(kernel_resources(cubin, entry));
    out.push_back(std::move(per_arch));
  }
  std::vector<std::string> order;
  for (const auto& r : out) order.push_back(r.arch);
  sort_arch_names(order);
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    return std::find(order.begin(), order.end(), a.arch) < std::find(order.begin(), order.end(), b.arch);
  });
  return out;
}

std::vector<std::string> resource_problems(const ManifestVariant& variant) {
  std::vector<std::string> problems;
  for (const ChipLimits& chip : known_chips()) {
    // The driver loads the newest code that runs on the chip; ties ("sm_100" and "sm_100f") are all checked.
    int newest = -1;
    for (const auto& r : variant.resources)
      if (auto a = Arch::parse(r.arch); a && a->runs_on(chip.major, chip.minor)) newest = std::max(newest, a->number());
    for (const auto& r : variant.resources) {
      const auto a = Arch::parse(r.arch);
      if (!a || a->number() != newest || !a->runs_on(chip.major, chip.minor)) continue;
      const std::string where = "variant " + variant.key.uri() + ": entry '";
      const std::string there = r.arch == chip.name() ? "" : ", and its " + r.arch + " code is what runs there";
      for (const auto& k : r.kernels) {
        const std::string head = where + k.entry + "' (" + r.arch + " code) ";
        const std::uint64_t smem = std::uint64_t(k.static_smem) + k.dynamic_smem;
        if (smem > chip.smem_per_block)
          problems.push_back(head + "needs " + kib(smem) + " of shared memory per CTA (static " + std::to_string(k.static_smem) +
                             " + dynamic " + std::to_string(k.dynamic_smem) + "); " + chip.name() + " allows at most " +
                             kib(chip.smem_per_block) + there);
        if (k.threads == 0 || k.threads > chip.threads_per_block)
          problems.push_back(head + "launches " + std::to_string(k.threads) + " threads per CTA; " + chip.name() +
                             " allows 1 to " + std::to_string(chip.threads_per_block));
        if (k.registers > chip.regs_per_thread || registers_per_cta(k) > chip.regs_per_block)
          problems.push_back(head + "needs " + std::to_string(k.registers) + " registers per thread x " +
                             std::to_string(k.threads) + " threads; " + chip.name() + " allows " +
                             std::to_string(chip.regs_per_thread) + " per thread and " + std::to_string(chip.regs_per_block) +
                             " per CTA" + there);
      }
    }
  }
  return problems;
}

}  // namespace aotinfer::gen
