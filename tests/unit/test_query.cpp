// Queries typed by a person: a filter naming a family, an axis or a value the package does not
// have fails and names what it has (Package::select, aotinfer list), instead of answering with
// an empty table; find() of such a key says which axis or value is wrong.
#include "catch.hpp"

#include "fake_package.hpp"
#include "test_util.hpp"

#include <string>
#include <vector>

#include "aotinfer/package.hpp"

using aotinfer::Error;
using aotinfer::ErrorCode;
using aotinfer::Package;
using aotinfer::test::error_of;
using aotinfer::test::FakePackage;
using aotinfer_test::Contains;

namespace {

std::vector<std::string> uris(const std::vector<const aotinfer::ManifestVariant*>& vs) {
  std::vector<std::string> out;
  for (auto* v : vs) out.push_back(v->key.uri());
  return out;
}

}  // namespace

TEST_CASE("Package::select answers like variants() for sound queries", "[query]") {
  FakePackage fake;
  const Package pkg = Package::open(fake.dir);
  using V = std::vector<std::string>;
  CHECK(pkg.select({}, {}).size() == 5);
  CHECK(uris(pkg.select("merge_state", {{"dtype", "f16"}})) ==
        V{"merge_state.dtype-f16.head_dim-64", "merge_state.dtype-f16.head_dim-256"});
  CHECK(uris(pkg.select({}, {{"hidden", "4096"}})) == V{"rms_norm.dtype-bf16.hidden-4096"});
  CHECK(uris(pkg.select({}, {{"dtype", "bf16"}, {"dtype", "bf16"}})).size() == 3);  // repeated, same value
  // Every value exists, only not together: an empty answer, not an error.
  CHECK(pkg.select("merge_state", {{"dtype", "bf16"}, {"head_dim", "256"}}).empty());
}

TEST_CASE("Package::select refuses a family, axis or value the package does not have, naming what it has", "[query]") {
  FakePackage fake;
  const Package pkg = Package::open(fake.dir);
  auto refused = [&](std::string_view family, std::vector<aotinfer::AxisValue> where) {
    Error e = error_of([&] { pkg.select(family, where); });
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Contains("package 'fake-kernels' (" + fake.dir.string() + ")"));
    return std::string(e.what());
  };
  CHECK_THAT(refused("merge_state", {{"head_dim", "abc"}}),
             Contains("value of head_dim (merge_state): expected one of the values this package's variants have (64, 128, 256), got 'abc'"));
  CHECK_THAT(refused("merge_state", {{"head_dim", "512"}}), Contains("(64, 128, 256), got '512'"));
  CHECK_THAT(refused("merge_state", {{"hidden", "4096"}}), Contains("axis of merge_state: expected one of its axes (dtype, head_dim), got 'hidden'"));
  CHECK_THAT(refused("softmax", {}), Contains("family: expected one of this package's families (merge_state, rms_norm), got 'softmax'"));
  CHECK_THAT(refused({}, {{"nope", "1"}}), Contains("axis: expected an axis some family of this package has (dtype, head_dim, hidden), got 'nope'"));
  CHECK_THAT(refused({}, {{"dtype", "f32"}}), Contains("value of dtype: expected one of the values this package's variants have (bf16, f16), got 'f32'"));
  CHECK_THAT(refused("rms_norm", {{"dtype", "f16"}}), Contains("value of dtype (rms_norm)") && Contains("(bf16), got 'f16'"));
  CHECK_THAT(refused("merge_state", {{"head_dim", "64"}, {"head_dim", "128"}}), Contains("axis head_dim: expected one value, got 64 and 128"));
  // variants() keeps answering with an empty list.
  CHECK(pkg.variants("merge_state", {{"head_dim", "abc"}}).empty());
}

TEST_CASE("Package::find of an axis the family lacks names its axes and does not suggest a spec edit", "[query]") {
  FakePackage fake;
  const Package pkg = Package::open(fake.dir);
  Error axis = error_of([&] { pkg.find("merge_state.hidden-4096"); });
  CHECK(axis.code() == ErrorCode::not_found);
  CHECK_THAT(axis.what(), Contains("axis of merge_state: expected one of its axes (dtype, head_dim), got 'hidden'"));
  CHECK_THAT(std::string(axis.what()), !Contains("include"));

  Error value = error_of([&] { pkg.find("merge_state.dtype-f16.head_dim-96"); });
  CHECK(value.code() == ErrorCode::not_found);
  CHECK_THAT(value.what(), Contains("(64, 128, 256), got '96'") && Contains("include"));
}

#ifdef AOTINFER_CLI_EXE
using aotinfer::test::cli;
using aotinfer::test::Run;

TEST_CASE("aotinfer list: a filter the package cannot match is a usage error naming what it has", "[query][cli]") {
  FakePackage fake;
  const std::string pkg = "'" + fake.dir.string() + "' ";

  Run ok = cli("list " + pkg + "merge_state head_dim=64");
  CHECK(ok.status == 0);
  CHECK_THAT(ok.output, Contains("merge_state.dtype-bf16.head_dim-64") && Contains("2 of 5 variants"));
  Run empty = cli("list " + pkg + "merge_state dtype=bf16 head_dim=256");  // sound, matches nothing
  CHECK(empty.status == 0);
  CHECK_THAT(empty.output, Contains("0 of 5 variants"));

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"merge_state head_dim=abc", "value of head_dim (merge_state): expected one of the values this package's variants have (64, 128, 256), got 'abc'"},
      {"merge_state hidden=4096", "axis of merge_state: expected one of its axes (dtype, head_dim), got 'hidden'"},
      {"nope=1", "axis: expected an axis some family of this package has (dtype, head_dim, hidden), got 'nope'"},
      {"dtype=f32 --json", "value of dtype: expected one of the values this package's variants have (bf16, f16), got 'f32'"},
      {"softmax", "family: expected one of this package's families (merge_state, rms_norm), got 'softmax'"},
      {"merge_state rms_norm", "list: expected one family name and AXIS=VALUE filters, got 'merge_state' and 'rms_norm'"},
      {"merge_state head_dim=", "list: filter 'head_dim=': expected AXIS=VALUE"},
      {"merge_state =64", "list: filter '=64': expected AXIS=VALUE"},
      {"head_dim=64 head_dim=128", "axis head_dim: expected one value, got 64 and 128"},
  };
  for (const auto& [args, expected] : refused) {
    INFO(args);
    Run r = cli("list " + pkg + args);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("aotinfer: list: ") && Contains(expected) && Contains("usage: aotinfer"));
  }
}
#endif
