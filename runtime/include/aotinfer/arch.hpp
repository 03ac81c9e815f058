// GPU architectures a package may target, and which of them a device can run.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aotinfer {

struct Arch {
  int major = 0;
  int minor = 0;
  bool specific = false;  // "sm_90a": arch-specific features, runs on exactly this chip

  static std::optional<Arch> parse(std::string_view name);  // "sm_90a"
  std::string name() const;                                  // "sm_90a"
  int number() const { return major * 10 + minor; }         // 90
  // SASS runs on the same major revision with an equal or newer minor; arch-specific code
  // ("a") runs only on the exact chip.
  bool runs_on(int device_major, int device_minor) const;
  bool operator==(const Arch&) const = default;
};

// Sorts arch names by generation (sm_80 < sm_90 < sm_90a < sm_100); unknown names last.
void sort_arch_names(std::vector<std::string>& names);

// The archs this toolkit generation can target, in ascending order ("sm_75" ... "sm_121a").
const std::vector<std::string>& known_arch_names();

}  // namespace aotinfer
