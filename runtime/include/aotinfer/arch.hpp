// GPU architectures a package may target, which of them a device can run, and what a kernel may
// use on each chip.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aotinfer {

struct Arch {
  int major = 0;
  int minor = 0;
  bool specific = false;  // "sm_90a": arch-specific features, runs on exactly this chip
  bool family = false;    // "sm_100f": family features, runs on this chip and later ones of its family

  static std::optional<Arch> parse(std::string_view name);      // SASS: "sm_90a"
  static std::optional<Arch> parse_ptx(std::string_view name);  // PTX: "compute_90a"
  std::string name() const;                                     // "sm_90a"
  std::string ptx_name() const;                                 // "compute_90a"
  int number() const { return major * 10 + minor; }            // 90
  // SASS runs on the same major revision with an equal or newer minor; arch-specific code
  // ("a") runs only on the exact chip; family code ("f") like plain code, within its family.
  bool runs_on(int device_major, int device_minor) const;
  // PTX of this arch can be compiled for the device by the driver: any newer chip for plain
  // PTX, the same chip ("a") or family ("f") otherwise.
  bool ptx_runs_on(int device_major, int device_minor) const;
  bool operator==(const Arch&) const = default;
};

// Sorts arch names by generation (sm_80 < sm_90 < sm_90a < sm_100); unknown names last.
void sort_arch_names(std::vector<std::string>& names);

// The archs this toolkit generation can target, in ascending order ("sm_75" ... "sm_121a"), and
// their PTX names ("compute_75" ... "compute_121a").
const std::vector<std::string>& known_arch_names();
const std::vector<std::string>& known_ptx_names();

// What one CTA may use on a chip (the CUDA programming guide's per-compute-capability table).
struct ChipLimits {
  int major = 0, minor = 0;
  std::uint32_t smem_per_block = 0;  // static + dynamic bytes, with the opt-in above 48 KiB
  std::uint32_t regs_per_block = 65536;
  std::uint32_t regs_per_thread = 255;
  std::uint32_t threads_per_block = 1024;
  std::string name() const { return "sm_" + std::to_string(major * 10 + minor); }
};

// Every chip the known archs can run on, oldest first.
const std::vector<ChipLimits>& known_chips();

}  // namespace aotinfer
