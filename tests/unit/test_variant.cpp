// The naming contract: variant keys <-> URIs <-> C symbols <-> JSON values.
#include "catch.hpp"

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "aotinfer/json.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/variant.hpp"

using aotinfer::Error;
using aotinfer::ErrorCode;
using aotinfer::VariantKey;
using aotinfer_test::Contains;

namespace {

// Keys covering every kind of value text: dtypes, enumerators with underscores, booleans,
// zero, negative and large integers, and a family with no axes.
std::vector<VariantKey> sample_keys() {
  return {
      {"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}},
      {"merge_state", {{"dtype", "f16"}, {"head_dim", "64"}}},
      {"merge_state", {{"dtype", "f16"}, {"head_dim", "128"}}},
      {"attention", {{"dtype", "e4m3"}, {"causal", "true"}, {"pos_enc", "rope_llama"}, {"window", "-1"}}},
      {"attention", {{"dtype", "e4m3"}, {"causal", "false"}, {"pos_enc", "rope_llama"}, {"window", "-1"}}},
      {"attention", {{"dtype", "e4m3"}, {"causal", "false"}, {"pos_enc", "none"}, {"window", "0"}}},
      {"attention", {{"dtype", "e5m2"}, {"causal", "false"}, {"pos_enc", "alibi_v2"}, {"window", "4096"}}},
      {"attention", {{"dtype", "e5m2"}, {"causal", "false"}, {"pos_enc", "alibi_v2"}, {"window", "-4096"}}},
      {"rms_norm", {{"hidden", "9223372036854775807"}, {"eps_mode", "a_b_c"}}},
      {"rms_norm", {{"hidden", "-9223372036854775808"}, {"eps_mode", "a_b_c"}}},
      {"silu2", {}},
  };
}

// The Error thrown by from_uri, or a failed check when none is thrown.
Error uri_error(const std::string& uri) {
  try {
    VariantKey::from_uri(uri);
  } catch (const Error& e) {
    return e;
  }
  FAIL("from_uri accepted '" << uri << "'");
  return Error(ErrorCode::invalid_argument, "");
}

}  // namespace

TEST_CASE("uri() writes family.axis-value.axis-value", "[variant]") {
  CHECK(VariantKey{"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}}.uri() == "merge_state.dtype-bf16.head_dim-128");
  CHECK(VariantKey{"attention", {{"window", "-1"}, {"causal", "true"}}}.uri() == "attention.window--1.causal-true");
  CHECK(VariantKey{"silu2", {}}.uri() == "silu2");
}

TEST_CASE("from_uri parses uri() back into the same key", "[variant]") {
  for (const auto& key : sample_keys()) {
    INFO(key.uri());
    VariantKey parsed = VariantKey::from_uri(key.uri());
    CHECK(parsed.family == key.family);
    CHECK(parsed.axes == key.axes);  // order kept: template-parameter order
    CHECK(parsed == key);
    CHECK(parsed.uri() == key.uri());
  }
  VariantKey k = VariantKey::from_uri("attention.window--12.causal-false");
  REQUIRE(k.axes.size() == 2);
  CHECK(k.axes[0] == aotinfer::AxisValue{"window", "-12"});
  CHECK(k.axes[1] == aotinfer::AxisValue{"causal", "false"});
}

TEST_CASE("find() returns an axis value or nullptr", "[variant]") {
  VariantKey k{"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}};
  REQUIRE(k.find("head_dim") != nullptr);
  CHECK(*k.find("head_dim") == "128");
  CHECK(*k.find("dtype") == "bf16");
  CHECK(k.find("head") == nullptr);
  CHECK(k.find("") == nullptr);
}

TEST_CASE("from_uri rejects bad URIs naming the bad part", "[variant]") {
  struct Case {
    std::string uri, names;
  };
  const std::vector<Case> cases = {
      {"", "family ''"},
      {"Merge_state.dtype-bf16", "family 'Merge_state'"},
      {"merge_state.Dtype-bf16", "axis name 'Dtype'"},
      {"merge_state.dtype-BF16", "value 'BF16' of axis 'dtype'"},
      {"merge_state..dtype-bf16", "axis segment ''"},
      {"merge_state.dtype-bf16.", "axis segment ''"},
      {".dtype-bf16", "family ''"},
      {"merge_state.dtype_bf16", "axis segment 'dtype_bf16' has no '-'"},
      {"merge_state.-bf16", "axis name ''"},
      {"merge_state.dtype-", "value '' of axis 'dtype'"},
      {"merge_state.dtype-bf16.dtype-f16", "axis 'dtype' appears twice"},
      {"merge__state.dtype-bf16", "family 'merge__state'"},
      {"merge_state.head__dim-128", "axis name 'head__dim'"},
      {"attention.pos_enc-rope__llama", "value 'rope__llama'"},
      {"merge_state_.dtype-bf16", "family 'merge_state_'"},
      {"_merge.dtype-bf16", "family '_merge'"},
      {"2merge.dtype-bf16", "family '2merge'"},
      {"merge_state.dtype-bf16_", "value 'bf16_'"},
      {"merge_state.head_dim-0128", "value '0128'"},    // not canonical: leading zero
      {"merge_state.head_dim--0", "value '-0'"},        // not canonical: would read back as 0
      {"merge_state.head_dim-1x", "value '1x'"},        // neither a name nor an integer
      {"merge_state.head_dim-99999999999999999999", "value '99999999999999999999'"},  // > int64
      {"merge_state.head_dim-1.5", "axis segment '5' has no '-'"},
      {"merge state.dtype-bf16", "family 'merge state'"},
  };
  for (const auto& c : cases) {
    INFO("uri: '" << c.uri << "'");
    Error e = uri_error(c.uri);
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Contains(c.names));
    CHECK_THAT(e.what(), Contains("invalid variant URI '" + c.uri + "'"));
  }
}

TEST_CASE("is_name and is_value_text", "[variant]") {
  for (const char* s : {"a", "merge_state", "e4m3", "rope_llama", "a1_b2"}) {
    INFO(s);
    CHECK(aotinfer::is_name(s));
    CHECK(aotinfer::is_value_text(s));
  }
  for (const char* s : {"", "_a", "a_", "a__b", "A", "aB", "1a", "a-b", "a.b", "a b"}) {
    INFO(s);
    CHECK_FALSE(aotinfer::is_name(s));
  }
  for (const char* s : {"0", "7", "-1", "128", "-9223372036854775808", "9223372036854775807", "true", "false"}) {
    INFO(s);
    CHECK(aotinfer::is_value_text(s));
  }
  for (const char* s : {"", "-", "-0", "00", "01", "1a", "-a", "+1", "1.0", "BF16", "a__b", "9223372036854775808",
                        "-9223372036854775809"}) {
    INFO(s);
    CHECK_FALSE(aotinfer::is_value_text(s));
  }
}

TEST_CASE("entry_symbol and launch_symbol spell the documented names", "[variant]") {
  VariantKey k{"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}};
  CHECK(aotinfer::entry_symbol(k, "merge") == "aotinfer_merge_state__dtype_bf16__head_dim_128__merge");
  CHECK(aotinfer::launch_symbol(k, "merge") == "aotinfer_merge_state__dtype_bf16__head_dim_128__merge__launch");

  VariantKey negative{"attention", {{"window", "-1"}, {"causal", "true"}}};
  CHECK(aotinfer::entry_symbol(negative, "fwd") == "aotinfer_attention__window_m1__causal_true__fwd");
  CHECK(aotinfer::entry_symbol(VariantKey{"silu2", {}}, "run") == "aotinfer_silu2__run");
}

TEST_CASE("symbols are valid C identifiers and distinct across keys and entries", "[variant]") {
  std::set<std::string> symbols;
  std::size_t made = 0;
  for (const auto& key : sample_keys()) {
    for (const char* entry : {"merge", "merge_rows", "run"}) {
      const std::string entry_sym = aotinfer::entry_symbol(key, entry);
      const std::string launch_sym = aotinfer::launch_symbol(key, entry);
      INFO(entry_sym);
      CHECK(launch_sym == entry_sym + "__launch");
      for (const std::string& s : {entry_sym, launch_sym}) {
        CHECK(s.rfind("aotinfer_", 0) == 0);
        bool identifier = true;
        for (char c : s) identifier &= (c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
        CHECK(identifier);
      }
      symbols.insert(entry_sym);
      symbols.insert(launch_sym);
      made += 2;
    }
  }
  CHECK(made == sample_keys().size() * 3 * 2);
  CHECK(symbols.size() == made);
}

TEST_CASE("value_text and value_json map canonical text onto typed JSON", "[variant]") {
  using nlohmann::json;
  CHECK(aotinfer::value_json("128") == json(128));
  CHECK(aotinfer::value_json("128").is_number_integer());
  CHECK(aotinfer::value_json("-1") == json(-1));
  CHECK(aotinfer::value_json("0") == json(0));
  CHECK(aotinfer::value_json("-9223372036854775808") == json(INT64_MIN));
  CHECK(aotinfer::value_json("true") == json(true));
  CHECK(aotinfer::value_json("true").is_boolean());
  CHECK(aotinfer::value_json("false") == json(false));
  CHECK(aotinfer::value_json("bf16") == json("bf16"));
  CHECK(aotinfer::value_json("rope_llama").is_string());

  CHECK(aotinfer::value_text(json(128)) == "128");
  CHECK(aotinfer::value_text(json(-4096)) == "-4096");
  CHECK(aotinfer::value_text(json(0u)) == "0");
  CHECK(aotinfer::value_text(json(true)) == "true");
  CHECK(aotinfer::value_text(json(false)) == "false");
  CHECK(aotinfer::value_text(json("rope_llama")) == "rope_llama");

  for (const char* text : {"bf16", "e4m3", "rope_llama", "true", "false", "0", "64", "-1", "9223372036854775807",
                           "-9223372036854775808"}) {
    INFO(text);
    CHECK(aotinfer::value_text(aotinfer::value_json(text)) == text);
  }
  for (const auto& key : sample_keys())
    for (const auto& a : key.axes) {
      INFO(a.value);
      CHECK(aotinfer::value_text(aotinfer::value_json(a.value)) == a.value);
    }
}

TEST_CASE("value_text rejects what is not a canonical axis value", "[variant]") {
  using nlohmann::json;
  auto rejects = [](const json& v, const std::string& names) {
    INFO(v.dump());
    try {
      aotinfer::value_text(v);
      FAIL("accepted " << v.dump());
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK_THAT(e.what(), Contains(names));
    }
  };
  rejects(json("BF16"), "'BF16'");
  rejects(json("128"), "'128'");   // an integer must be a JSON number, not a string
  rejects(json("true"), "'true'");  // a boolean must be a JSON boolean
  rejects(json("rope__llama"), "'rope__llama'");
  rejects(json(""), "''");
  rejects(json("0128"), "'0128'");
  rejects(json(1.5), "number");
  rejects(json(nullptr), "null");
  rejects(json::array({1, 2}), "array");
  rejects(json::object({{"a", 1}}), "object");
  rejects(json(std::uint64_t(9223372036854775808ull)), "9223372036854775808");
}

TEST_CASE("describe() lists the axes for messages", "[variant]") {
  CHECK(VariantKey{"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}}.describe() ==
        "merge_state{dtype=bf16, head_dim=128}");
  CHECK(VariantKey{"attention", {{"window", "-1"}}}.describe() == "attention{window=-1}");
  CHECK(VariantKey{"silu2", {}}.describe() == "silu2{}");
}
