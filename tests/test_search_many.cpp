// search-many without MPI: the manifest, fingerprints, shards and device pinning as functions;
// then the built command on small kits: results equal to one `shiftstack search` per unit, an
// injected failure and a timeout recorded while the other units complete, resume by checksums,
// job-array shards and their merge, and `gpus` bands in the pipeline.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "shiftstack/error.hpp"
#include "shiftstack/search_many.hpp"
#include "test_search_many_support.hpp"

using namespace shiftstack;
using namespace shiftstack::many;
using namespace shiftstack::many::testing_support;
using shiftstack::io::testing_support::TempDir;

namespace fs = std::filesystem;

namespace {

// The kits are the same for every test: written once into one folder for the whole binary.
const std::string& kits() {
  static TempDir dir;
  static const bool written = (write_kits(dir.path(), 4), true);
  (void)written;
  return dir.path();
}

std::string manifest_text(const std::string& extra_units = "") {
  const std::string k = kits();
  return "output: out\n"
         "config: " + k + "/kit1/search.yaml\n"
         "engine: cpu\n"
         "units:\n"
         "  - each: \"" + k + "/kit*\"\n"
         "  - name: broken\n"
         "    inputs: " + k + "/bad\n" + extra_units;
}

// The digest of one unit searched on its own by `shiftstack search`.
nlohmann::json direct_digest(const std::string& kit, const std::string& dir) {
  const Outcome r = run_cli("search --config '" + kits() + "/kit1/search.yaml' '" + kits() + "/" + kit +
                               "' --engine cpu --json -q -o '" + dir + "/" + kit + ".ecsv'");
  EXPECT_EQ(r.status, 0) << r.output;
  return nlohmann::json::parse(r.output.substr(r.output.find('{'))).at("digest");
}

}  // namespace

TEST(Manifest, ExpandsEachAndAppliesDefaultsThenUnitSettings) {
  TempDir dir;
  fs::create_directories(dir.file("night/ccd01"));
  fs::create_directories(dir.file("night/ccd02"));
  write_text(dir.file("a.yaml"), "lh_level: 6\n");
  const Manifest m = parse_manifest(
      "output: results\nset: [lh_level=8]\ntimeout: 30\nstamps: false\nunits:\n"
      "  - each: night/ccd*\n    suffix: -40au\n    set: [num_obs=5]\n"
      "  - name: one\n    inputs: [night/ccd01, '@list.txt']\n    config: a.yaml\n    engine: cpu\n    timeout: 0\n"
      "    output: deep/one\n",
      dir.path(), "test manifest");
  EXPECT_EQ(m.output_root, dir.file("results"));
  ASSERT_EQ(m.units.size(), 3u);
  EXPECT_EQ(m.units[0].name, "ccd01-40au");
  EXPECT_EQ(m.units[1].name, "ccd02-40au");
  EXPECT_EQ(m.units[0].inputs, std::vector<std::string>{dir.file("night/ccd01")});
  EXPECT_EQ(m.units[0].overrides, (std::vector<std::string>{"lh_level=8", "num_obs=5"}));
  EXPECT_EQ(m.units[0].timeout, 30);
  EXPECT_FALSE(m.units[0].stamps);
  EXPECT_TRUE(m.units[0].fits);
  EXPECT_EQ(m.units[0].output_dir, dir.file("results/ccd01-40au"));
  const Unit& one = m.units[2];
  EXPECT_EQ(one.inputs, (std::vector<std::string>{dir.file("night/ccd01"), "@" + dir.file("list.txt")}));
  EXPECT_EQ(one.config, dir.file("a.yaml"));
  EXPECT_EQ(one.engine, "cpu");
  EXPECT_EQ(one.timeout, 0);
  EXPECT_EQ(one.output_rel, "deep/one");
  EXPECT_EQ(one.output_dir, dir.file("results/deep/one"));
  // A command-line root wins over the manifest's.
  EXPECT_EQ(parse_manifest("output: x\nunits: [{inputs: a.fits}]\n", dir.path(), "m", dir.file("other")).output_root,
            dir.file("other"));
}

TEST(Manifest, RejectsMistakesWithTheEntryNamed) {
  TempDir dir;
  auto error_of = [&](const std::string& yaml) -> std::string {
    try {
      parse_manifest(yaml, dir.path(), "m.yaml");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  auto expect_error = [&](const std::string& yaml, const std::string& part) {
    const std::string what = error_of(yaml);
    EXPECT_NE(what.find(part), std::string::npos) << "manifest:\n" << yaml << "\nerror: " << what;
  };
  expect_error("units: [{inputs: a.fits}]\n", "`output`");
  expect_error("output: o\nunits: []\n", "non-empty list");
  expect_error("output: o\nunit: [{inputs: a}]\n", "unknown key 'unit'");
  expect_error("output: o\nunits: [{inputs: a, colour: red}]\n", "units[0]: unknown key 'colour'");
  expect_error("output: o\nunits: [{name: a, inputs: x}, {name: a, inputs: y}]\n", "'a' is used twice");
  expect_error("output: o\nunits: [{name: a/b, inputs: x}]\n", "unit name 'a/b'");
  expect_error("output: o\nunits: [{name: records, inputs: x}]\n", "unit name 'records'");
  expect_error("output: o\nunits: [{inputs: x, each: y}]\n", "either `inputs` or `each`");
  expect_error("output: o\nunits: [{each: 'nothing*'}]\n", "matches nothing");
  expect_error("output: o\nunits: [{inputs: x, config: missing.yaml}]\n", "is not a file");
  expect_error("output: o\nunits: [{inputs: x, timeout: -3}]\n", "timeout");
  expect_error("output: o\nunits: [{inputs: x, encoding: fp64}]\n", "fp32, fp16 or int8");
  expect_error("output: o\nunits: [{inputs: x, set: [lh_level]}]\n", "not key=value");
  expect_error("output: o\nunits: [{inputs: x, output: ../../elsewhere}]\n", "outside the output root");
  expect_error("output: o\nunits: [{name: a, inputs: x, output: same}, {name: b, inputs: y, output: same}]\n", "used twice");
}

TEST(Manifest, FingerprintFollowsWhatTheUnitComputes) {
  TempDir dir;
  write_text(dir.file("c.yaml"), "lh_level: 6\n");
  const std::string yaml = "output: o\nconfig: c.yaml\nunits: [{name: a, inputs: x}]\n";
  const std::string before = fingerprint(parse_manifest(yaml, dir.path(), "m").units[0]);
  EXPECT_EQ(before, fingerprint(parse_manifest(yaml, dir.path(), "m").units[0]));
  EXPECT_NE(before, fingerprint(parse_manifest("output: o\nconfig: c.yaml\nunits: [{name: a, inputs: x, set: [num_obs=3]}]\n",
                                               dir.path(), "m").units[0]));
  write_text(dir.file("c.yaml"), "lh_level: 7\n");  // the same file name, other contents
  EXPECT_NE(before, fingerprint(parse_manifest(yaml, dir.path(), "m").units[0]));
}

TEST(Shards, PartitionTheUnits) {
  TempDir dir;
  std::string yaml = "output: o\nunits:\n";
  for (int i = 0; i < 11; ++i) yaml += "  - {name: u" + std::to_string(i) + ", inputs: x}\n";
  const Manifest m = parse_manifest(yaml, dir.path(), "m");
  std::set<std::size_t> seen;
  for (int shard = 0; shard < 4; ++shard)
    for (std::size_t i : shard_units(m, shard, 4)) {
      EXPECT_EQ(int(i % 4), shard);
      EXPECT_TRUE(seen.insert(i).second);
    }
  EXPECT_EQ(seen.size(), 11u);
  EXPECT_THROW(shard_units(m, 4, 4), Error);
  EXPECT_THROW(shard_units(m, 0, 0), Error);
}

TEST(DevicePinning, TakesEachRanksShareOfTheVisibleDevices) {
  const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string before = saved ? saved : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "4,5,6", 1);
  EXPECT_EQ(devices_for_rank(0, 1), "4");
  EXPECT_EQ(devices_for_rank(2, 1), "6");
  EXPECT_EQ(devices_for_rank(3, 1), "4");  // more ranks than devices: they share
  EXPECT_EQ(devices_for_rank(1, 2), "6,4");
  ::setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-bb", 1);
  EXPECT_EQ(devices_for_rank(1, 1), "GPU-bb");
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_EQ(devices_for_rank(0, 1), "");  // no device visible: nothing pinned
  EXPECT_THROW(devices_for_rank(0, 0), Error);
  if (saved) ::setenv("CUDA_VISIBLE_DEVICES", before.c_str(), 1);
  else ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(SearchMany, EveryUnitAsAlonePlusAFailureRecordedAndAResume) {
  TempDir dir;
  write_text(dir.file("m.yaml"), manifest_text());
  const Outcome first = run_cli("search-many '" + dir.file("m.yaml") + "'");
  EXPECT_EQ(first.status, 2) << first.output;  // one unit failed: the run went on and says so
  const nlohmann::json summary = read_json(dir.file("out/summary.json"));
  EXPECT_EQ(summary.at("mode"), "serial");
  EXPECT_EQ(summary.at("units_run"), 5);
  auto units = units_by_name(summary);
  ASSERT_EQ(units.size(), 5u);
  EXPECT_EQ(units["broken"].at("status"), "failed");
  EXPECT_NE(units["broken"].at("error").get<std::string>().find("bad/exposure.fits"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir.file("out/broken/search.log")));
  int detections = 0;
  for (int k = 1; k <= 4; ++k) {
    const std::string name = "kit" + std::to_string(k);
    SCOPED_TRACE(name);
    const auto& u = units[name];
    ASSERT_EQ(u.at("status"), "ok") << u.dump();
    EXPECT_EQ(u.at("engine"), "cpu");
    EXPECT_EQ(u.at("outputs").size(), 4u);  // ecsv, fits, stamps, summary
    // The same search run on its own gives the same digest, bit for bit.
    EXPECT_EQ(u.at("digest"), direct_digest(name, dir.path()));
    detections += u.at("detections").get<int>();
  }
  // One worker process ran the four units (start-up paid once); "broken" came after them.
  std::set<int> pids;
  for (int k = 1; k <= 4; ++k) pids.insert(units["kit" + std::to_string(k)].at("pid").get<int>());
  EXPECT_EQ(pids.size(), 1u);
  EXPECT_EQ(summary.at("catalogue").at("rows"), detections);
  EXPECT_GT(detections, 0);
  std::ifstream catalogue(dir.file("out/catalogue.ecsv"));
  std::string line, names;
  while (std::getline(catalogue, line))
    if (line.rfind("kit", 0) == 0) names += line.substr(0, 4) + " ";
  EXPECT_NE(names.find("kit1"), std::string::npos) << names;
  EXPECT_TRUE(fs::exists(dir.file("out/catalogue.fits")));

  // A rerun redoes only the failed unit; the complete ones are checked, not rewritten.
  const auto written = fs::last_write_time(dir.file("out/kit2/results.ecsv"));
  const Outcome second = run_cli("search-many '" + dir.file("m.yaml") + "'");
  EXPECT_EQ(second.status, 2) << second.output;
  const nlohmann::json again = read_json(dir.file("out/summary.json"));
  EXPECT_EQ(again.at("units_run"), 1);
  EXPECT_EQ(again.at("units_reused"), 4);
  EXPECT_EQ(fs::last_write_time(dir.file("out/kit2/results.ecsv")), written);
  EXPECT_EQ(units_by_name(again)["kit3"].at("digest"), units["kit3"].at("digest"));

  // An output that changed on disk (same size, other bytes) fails its checksum: that unit reruns.
  {
    std::fstream f(dir.file("out/kit3/results.fits"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('#');
  }
  const Outcome third = run_cli("search-many '" + dir.file("m.yaml") + "'");
  EXPECT_EQ(read_json(dir.file("out/summary.json")).at("units_run"), 2) << third.output;
  EXPECT_NE(third.output.find("kit3 ok"), std::string::npos) << third.output;
  EXPECT_EQ(units_by_name(read_json(dir.file("out/summary.json")))["kit3"].at("status"), "ok");

  // --force reruns everything; a changed setting reruns every unit it touches.
  const Outcome changed = run_cli("search-many '" + dir.file("m.yaml") + "' --set num_obs=5 -q");
  EXPECT_EQ(read_json(dir.file("out/summary.json")).at("units_run"), 5) << changed.output;
}

TEST(SearchMany, ATimedOutUnitIsKilledAndTheNextRunsInAFreshWorker) {
  TempDir dir;
  // The reference engine needs seconds for a whole ci kit: far past a 0.3 s limit.
  write_text(dir.file("m.yaml"), "output: out\nconfig: " + kits() + "/kit1/search.yaml\nengine: cpu\nunits:\n"
                                 "  - {name: slow, inputs: " + kits() + "/kit1, engine: reference, timeout: 0.3}\n"
                                 "  - {name: after, inputs: " + kits() + "/kit2}\n");
  const Outcome r = run_cli("search-many '" + dir.file("m.yaml") + "'");
  EXPECT_EQ(r.status, 2) << r.output;
  const nlohmann::json summary = read_json(dir.file("out/summary.json"));
  auto units = units_by_name(summary);
  EXPECT_EQ(units["slow"].at("status"), "timeout") << units["slow"].dump();
  EXPECT_LT(units["slow"].at("seconds").get<double>(), 3.0);
  EXPECT_EQ(units["after"].at("status"), "ok");
  EXPECT_NE(units["slow"].at("pid"), units["after"].at("pid"));
  EXPECT_EQ(summary.at("worker_restarts"), 1);
}

TEST(SearchMany, JobArrayShardsMergeToTheSerialResult) {
  TempDir serial, array;
  write_text(serial.file("m.yaml"), manifest_text());
  write_text(array.file("m.yaml"), manifest_text());
  run_cli("search-many -q '" + serial.file("m.yaml") + "'");
  const Outcome s0 = run_cli("search-many -q --shard 0/2 '" + array.file("m.yaml") + "'");
  EXPECT_EQ(s0.status, 2) << s0.output;  // units 0, 2, 4: "broken" is the fifth
  const nlohmann::json shard0 = read_json(array.file("out/summary.shard-0000-of-0002.json"));
  EXPECT_EQ(shard0.at("units_listed"), 3);
  EXPECT_FALSE(fs::exists(array.file("out/catalogue.ecsv")));
  // Merging before shard 1 ran: its units are reported missing.
  const Outcome early = run_cli("search-many -q --merge '" + array.file("m.yaml") + "'");
  EXPECT_EQ(early.status, 2);
  EXPECT_EQ(read_json(array.file("out/summary.json")).at("status_counts").at("missing"), 2);
  const Outcome s1 = run_cli("search-many -q --shard 1/2 '" + array.file("m.yaml") + "'");
  EXPECT_EQ(s1.status, 0) << s1.output;
  run_cli("search-many -q --merge '" + array.file("m.yaml") + "'");
  auto merged = units_by_name(read_json(array.file("out/summary.json")));
  auto alone = units_by_name(read_json(serial.file("out/summary.json")));
  for (const auto& [name, u] : alone) {
    SCOPED_TRACE(name);
    EXPECT_EQ(merged[name].at("status"), u.at("status"));
    if (u.at("status") == "ok") {
      EXPECT_EQ(merged[name].at("digest"), u.at("digest"));
    }
  }
  EXPECT_EQ(read_json(array.file("out/summary.json")).at("catalogue").at("rows"),
            read_json(serial.file("out/summary.json")).at("catalogue").at("rows"));
  const Outcome bad = run_cli("search-many -q --shard 2/2 '" + array.file("m.yaml") + "'");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--shard"), std::string::npos) << bad.output;
}

TEST(SearchMany, PipelineGpusBandsGiveTheSameDigest) {
  TempDir dir;
  const std::string base = "search --config '" + kits() + "/kit1/search.yaml' '" + kits() + "/kit1' --engine cpu --json -q";
  const Outcome one = run_cli(base + " -o '" + dir.file("a.ecsv") + "'");
  const Outcome two = run_cli(base + " --set gpus=0,0 -o '" + dir.file("b.ecsv") + "'");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  const auto a = nlohmann::json::parse(one.output.substr(one.output.find('{')));
  const auto b = nlohmann::json::parse(two.output.substr(two.output.find('{')));
  EXPECT_EQ(b.at("devices"), (std::vector<int>{0, 0}));
  EXPECT_EQ(a.at("devices"), (std::vector<int>{0}));
  for (const char* key : {"maxZ", "count", "scored", "trials", "z_thr", "argmax"}) EXPECT_EQ(a["digest"][key], b["digest"][key]) << key;
  EXPECT_NEAR(a["digest"]["sumA"].get<double>(), b["digest"]["sumA"].get<double>(), 1e-12 * std::abs(a["digest"]["sumA"].get<double>()));
  EXPECT_EQ(a.at("counts"), b.at("counts"));
  const Outcome typo = run_cli(base + " --set gpus=two -o '" + dir.file("c.ecsv") + "'");
  EXPECT_NE(typo.status, 0);
  EXPECT_NE(typo.output.find("config key gpus"), std::string::npos) << typo.output;
}
