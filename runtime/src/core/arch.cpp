#include "aotinfer/arch.hpp"

#include <algorithm>
#include <charconv>

namespace aotinfer {

std::optional<Arch> Arch::parse(std::string_view name) {
  for (const auto& known : known_arch_names()) {
    if (known != name) continue;
    std::string_view digits = name.substr(3);
    Arch a;
    a.specific = digits.back() == 'a';
    if (a.specific) digits.remove_suffix(1);
    int n = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), n);
    a.major = n / 10;
    a.minor = n % 10;
    return a;
  }
  return std::nullopt;
}

std::string Arch::name() const { return "sm_" + std::to_string(number()) + (specific ? "a" : ""); }

bool Arch::runs_on(int device_major, int device_minor) const {
  if (specific) return major == device_major && minor == device_minor;
  return major == device_major && minor <= device_minor;
}

void sort_arch_names(std::vector<std::string>& names) {
  const auto& known = known_arch_names();
  auto rank = [&](const std::string& n) { return std::find(known.begin(), known.end(), n) - known.begin(); };
  std::stable_sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
}

const std::vector<std::string>& known_arch_names() {
  // What nvcc 13 can target (nvcc --list-gpu-code), with the arch-specific forms.
  static const std::vector<std::string> names = {
      "sm_75",  "sm_80",  "sm_86",   "sm_87",  "sm_88",   "sm_89",  "sm_90",   "sm_90a",
      "sm_100", "sm_100a", "sm_103", "sm_103a", "sm_110", "sm_110a", "sm_120", "sm_120a",
      "sm_121", "sm_121a"};
  return names;
}

}  // namespace aotinfer
