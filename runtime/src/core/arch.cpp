#include "aotinfer/arch.hpp"

#include <algorithm>
#include <charconv>

namespace aotinfer {
namespace {

// "90a" -> Arch{9, 0, specific}; the caller has checked the name against the known list.
Arch from_digits(std::string_view digits) {
  Arch a;
  a.specific = digits.back() == 'a';
  a.family = digits.back() == 'f';
  if (a.specific || a.family) digits.remove_suffix(1);
  int n = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), n);
  a.major = n / 10;
  a.minor = n % 10;
  return a;
}

std::string suffix(const Arch& a) { return std::to_string(a.number()) + (a.specific ? "a" : a.family ? "f" : ""); }

}  // namespace

std::optional<Arch> Arch::parse(std::string_view name) {
  const auto& known = known_arch_names();
  if (std::find(known.begin(), known.end(), name) == known.end()) return std::nullopt;
  return from_digits(name.substr(3));
}

std::optional<Arch> Arch::parse_ptx(std::string_view name) {
  const auto& known = known_ptx_names();
  if (std::find(known.begin(), known.end(), name) == known.end()) return std::nullopt;
  return from_digits(name.substr(8));
}

std::string Arch::name() const { return "sm_" + suffix(*this); }
std::string Arch::ptx_name() const { return "compute_" + suffix(*this); }

bool Arch::runs_on(int device_major, int device_minor) const {
  if (specific) return major == device_major && minor == device_minor;
  return major == device_major && minor <= device_minor;
}

bool Arch::ptx_runs_on(int device_major, int device_minor) const {
  if (specific || family) return runs_on(device_major, device_minor);
  return major < device_major || (major == device_major && minor <= device_minor);
}

void sort_arch_names(std::vector<std::string>& names) {
  const auto& known = known_arch_names();
  auto rank = [&](const std::string& n) { return std::find(known.begin(), known.end(), n) - known.begin(); };
  std::stable_sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
}

const std::vector<std::string>& known_arch_names() {
  // What nvcc 13 can target (nvcc --list-gpu-code), with the arch-specific and family forms
  // it accepts (family forms exist from sm_100 on).
  static const std::vector<std::string> names = {
      "sm_75",  "sm_80",   "sm_86",  "sm_87",  "sm_88",   "sm_89",  "sm_90",  "sm_90a",
      "sm_100", "sm_100f", "sm_100a", "sm_103", "sm_103f", "sm_103a", "sm_110", "sm_110f",
      "sm_110a", "sm_120", "sm_120f", "sm_120a", "sm_121", "sm_121f", "sm_121a"};
  return names;
}

const std::vector<std::string>& known_ptx_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> ptx;
    for (const auto& sm : known_arch_names()) ptx.push_back("compute_" + sm.substr(3));
    return ptx;
  }();
  return names;
}

const std::vector<ChipLimits>& known_chips() {
  // Shared memory per block with the opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize). 8.8
  // has no published figure: it gets the smaller Ampere-class limit, so a kernel that passes
  // here launches there.
  constexpr std::uint32_t k = 1024;
  static const std::vector<ChipLimits> chips = {
      {7, 5, 64 * k},  {8, 0, 163 * k}, {8, 6, 99 * k},  {8, 7, 163 * k},  {8, 8, 99 * k},  {8, 9, 99 * k},
      {9, 0, 227 * k}, {10, 0, 227 * k}, {10, 3, 227 * k}, {11, 0, 227 * k}, {12, 0, 99 * k}, {12, 1, 99 * k}};
  return chips;
}

}  // namespace aotinfer
