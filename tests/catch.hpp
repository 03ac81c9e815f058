// The one Catch2 include of the tests: they build against Catch2 2.x (Debian 12) or 3.x (Ubuntu
// 24.04, Fedora, Homebrew), whichever find_package found. The tests name the string matchers
// through aotinfer_test:: so the two versions' spellings never leak into them.
#pragma once

#include <cctype>
#include <string>

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

namespace aotinfer_test {
// Catch2 3 renamed the substring matcher; its Matchers::Contains matches range elements.
template <class... CaseSensitivity>
auto Contains(const std::string& part, CaseSensitivity... cs) {
  return Catch::Matchers::ContainsSubstring(part, cs...);
}
using Catch::Matchers::StartsWith;
}  // namespace aotinfer_test

#else
#include <catch2/catch.hpp>

namespace aotinfer_test {
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
}  // namespace aotinfer_test

#endif

namespace aotinfer_test {

// True when `text` holds `n` as a whole number (a maximal run of digits), e.g. "kv_indptr[5]".
inline bool names_number(const std::string& text, long long n) {
  const std::string digits = std::to_string(n);
  for (std::size_t at = text.find(digits); at != std::string::npos; at = text.find(digits, at + 1)) {
    const bool left = at == 0 || !std::isdigit(static_cast<unsigned char>(text[at - 1]));
    const std::size_t end = at + digits.size();
    const bool right = end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]));
    if (left && right) return true;
  }
  return false;
}

// Matches a message that names `n` as a whole number.
inline auto NamesNumber(long long n) {
  return Catch::Matchers::Predicate<std::string>([n](const std::string& s) { return names_number(s, n); },
                                                 "names " + std::to_string(n));
}

}  // namespace aotinfer_test
