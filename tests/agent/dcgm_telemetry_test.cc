// The DCGM telemetry source (agent/dcgm_telemetry.h): parsing dcgm-exporter pages recorded in
// tests/agent/testdata (where their layout comes from: README-dcgm.md there), matching readings
// to what workloads hold, and scraping a real cpp-httplib server on 127.0.0.1.

#include "agent/dcgm_telemetry.h"

#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX SIGPIPE

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace gpufed::agent {
namespace {

using ::testing::DoubleEq;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::SizeIs;

constexpr char kMigGpu[] = "GPU-3f1c9a52-7d84-4e0b-b6a1-2c95e8d04f17";    // H100, MIG on
constexpr char kWholeGpu[] = "GPU-8e07b2d6-51c3-4a9f-9d2e-f6a0c3b71e58";  // H100, MIG off
constexpr char kK80[] = "GPU-1b6e0d4a-93f2-4c57-8e1d-5a7c2f9b3e60";

std::string Testdata(const std::string& name) {
  std::ifstream in(absl::StrCat(GPUFED_SOURCE_DIR, "/tests/agent/testdata/", name));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<DcgmReading> Parse(const std::string& text, DcgmParseStats* stats = nullptr) {
  absl::StatusOr<std::vector<DcgmReading>> readings = ParseDcgmExporter(text, stats);
  EXPECT_TRUE(readings.ok()) << readings.status();
  return readings.ok() ? *readings : std::vector<DcgmReading>{};
}

const DcgmReading* Find(const std::vector<DcgmReading>& readings, const std::string& uuid,
                        const std::string& profile = "",
                        std::optional<uint32_t> gi = std::nullopt) {
  for (const DcgmReading& r : readings) {
    if (r.uuid == uuid && r.mig_profile == profile && r.gpu_instance_id == gi) return &r;
  }
  return nullptr;
}

Occupant Holds(const std::string& workload, const std::string& uuid,
               const std::string& mig_profile = "", uint32_t mig_start = 0,
               uint32_t gpu_milli = 0) {
  Occupant o;
  o.workload_id = workload;
  o.attempt = 1;
  o.gpu_uuid = uuid;
  o.mig_profile = mig_profile;
  o.mig_start = mig_start;
  o.gpu_milli = gpu_milli;
  return o;
}

// ---- Parsing --------------------------------------------------------------------------------

TEST(ParseDcgmExporterTest, AnH100WithMigInstancesAndAWholeGpu) {
  DcgmParseStats stats;
  const std::vector<DcgmReading> r = Parse(Testdata("dcgm_exporter_h100_mig.txt"), &stats);
  EXPECT_EQ(stats.malformed_lines, 0) << stats.first_problem;
  EXPECT_EQ(stats.unusable_values, 0);
  // Four instances on GPU 0, GPU 1 whole; the lines of metrics gpufed does not read add nothing.
  ASSERT_THAT(r, SizeIs(5));

  const DcgmReading* whole = Find(r, kWholeGpu);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->gpu, "1");
  EXPECT_EQ(whole->model_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(whole->hostname, "dgx-h100-07");
  const GpuMetrics& w = whole->metrics;
  EXPECT_THAT(w.gr_engine_active, Optional(DoubleEq(0.973812)));
  EXPECT_THAT(w.sm_active, Optional(DoubleEq(0.712204)));
  EXPECT_THAT(w.sm_occupancy, Optional(DoubleEq(0.358027)));
  EXPECT_THAT(w.pipe_tensor_active, Optional(DoubleEq(0.447630)));
  EXPECT_THAT(w.dram_active, Optional(DoubleEq(0.401558)));
  EXPECT_THAT(w.gpu_util, Optional(DoubleEq(14)));        // percent, as read
  EXPECT_THAT(w.fb_used_mib, Optional(DoubleEq(51958)));  // MiB, as read
  EXPECT_THAT(w.power_watts, Optional(DoubleEq(158.276)));
  EXPECT_THAT(w.gpu_temp_celsius, Optional(DoubleEq(37)));

  const DcgmReading* big = Find(r, kMigGpu, "3g.40gb", 1);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->gpu, "0");
  // Passed through as DCGM reports MIG instances: SM activity above 1, engine activity as a part
  // of the whole GPU, no coarse utilisation, and (dcgm-exporter issue #512) no memory figure.
  EXPECT_THAT(big->metrics.sm_active, Optional(DoubleEq(1.083611)));
  EXPECT_THAT(big->metrics.gr_engine_active, Optional(DoubleEq(0.402417)));
  EXPECT_EQ(big->metrics.gpu_util, std::nullopt);
  EXPECT_EQ(big->metrics.fb_used_mib, std::nullopt);
  EXPECT_THAT(big->metrics.power_watts, Optional(DoubleEq(70.372)));  // the GPU's

  for (const uint32_t gi : {7u, 8u, 9u}) {
    const DcgmReading* small = Find(r, kMigGpu, "1g.10gb", gi);
    ASSERT_NE(small, nullptr) << gi;
    EXPECT_TRUE(small->metrics.sm_active.has_value()) << gi;
  }
  EXPECT_THAT(Find(r, kMigGpu, "1g.10gb", 8)->metrics.sm_active, Optional(DoubleEq(0)));
  EXPECT_THAT(Find(r, kMigGpu, "1g.10gb", 9)->metrics.sm_active, Optional(DoubleEq(0.276815)));
  EXPECT_EQ(Find(r, kMigGpu), nullptr);  // a MIG-enabled GPU has no whole-GPU reading
}

TEST(ParseDcgmExporterTest, APreVoltaGpuHasOnlyTheCoarseCounter) {
  DcgmParseStats stats;
  const std::vector<DcgmReading> r = Parse(Testdata("dcgm_exporter_pre_volta.txt"), &stats);
  EXPECT_EQ(stats.malformed_lines, 0) << stats.first_problem;
  ASSERT_THAT(r, SizeIs(3));
  const DcgmReading* busy = Find(r, kK80);
  ASSERT_NE(busy, nullptr);
  EXPECT_EQ(busy->model_name, "Tesla K80");
  EXPECT_EQ(busy->hostname, "dcgm-exporter-x7k2q");
  GpuMetrics expected;
  expected.gpu_util = 97;
  expected.fb_used_mib = 5186;
  expected.power_watts = 118.694;
  expected.gpu_temp_celsius = 61;
  EXPECT_EQ(busy->metrics, expected);  // every DCGM_FI_PROF_* field unset
}

TEST(ParseDcgmExporterTest, CommentsEscapesNanTimestampsAndMalformedLines) {
  const std::string text =
      "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\r\n"
      "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\r\n"
      "\r\n"
      "   \n"
      // An older exporter's string field: not a number, but not a metric gpufed reads either.
      "DCGM_FI_DEV_NAME{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"Tesla T4\","
      "Hostname=\"myhost1.compute.internal\"} Tesla T4\n"
      // Escapes, lowercase hostname (dcgm-exporter 4), a timestamp, a CRLF.
      "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-a\",modelName=\"Tesla T4\","
      "hostname=\"node-\\\"a\\\"\\\\b\\nc\",pod=\"x\"} 41 1712345678901\r\n"
      // Blanks around labels and a trailing comma.
      "DCGM_FI_DEV_POWER_USAGE { gpu = \"0\" , UUID = \"GPU-a\" , }\t27.5\n"
      "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} NaN\n"
      "DCGM_FI_PROF_DRAM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} +Inf\n"
      "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\"} 9223372036854775792\n"  // DCGM's blank
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 100\n"
      // Malformed, each skipped:
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-a} 0.5\n"      // no closing quote
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"}\n"        // no value
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-\\x\"} 0.5\n"  // unknown escape
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\"} 0.5\n"                   // no UUID
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} busy\n"   // not a number
      "DCGM_FI_PROF_SM_OCCUPANCY{UUID=\"GPU-a\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"x\"} 0.1\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} 0.5 soon\n"  // bad timestamp
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\" UUID=\"GPU-a\"} 0.5\n"       // no comma
      "{gpu=\"0\"} 1\n"                                                     // no name
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} 0.25";       // no final newline
  DcgmParseStats stats;
  const std::vector<DcgmReading> r = Parse(text, &stats);
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_EQ(r[0].uuid, "GPU-a");
  EXPECT_EQ(r[0].hostname, "node-\"a\"\\b\nc");
  GpuMetrics expected;
  expected.gpu_temp_celsius = 41;
  expected.power_watts = 27.5;
  expected.gpu_util = 100;
  expected.gr_engine_active = 0.25;
  EXPECT_EQ(r[0].metrics, expected);  // NaN, +Inf and the blank sentinel left unset
  EXPECT_EQ(stats.unusable_values, 3);
  EXPECT_EQ(stats.malformed_lines, 9);
  EXPECT_EQ(stats.first_malformed, 12);
  EXPECT_THAT(stats.first_problem, HasSubstr("no closing quote"));
}

TEST(ParseDcgmExporterTest, PodLinesOfASharedGpuKeepTheFirstValue) {
  const std::vector<DcgmReading> r = Parse(
      "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-s\",pod=\"a\"} 0.4\n"
      "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-s\",pod=\"b\"} 0.9\n");
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_THAT(r[0].metrics.sm_active, Optional(DoubleEq(0.4)));
}

TEST(ParseDcgmExporterTest, APageThatIsNotTheExportersIsRefused) {
  absl::StatusOr<std::vector<DcgmReading>> html =
      ParseDcgmExporter("<html>\n<body>502 Bad Gateway</body>\n</html>\n");
  EXPECT_EQ(html.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(html.status().message(), HasSubstr("not the Prometheus text format (line 1"));
  EXPECT_EQ(ParseDcgmExporter("{\"error\": \"no GPUs\"}").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Empty, comments only, or only metrics gpufed does not read: nothing measured, no error.
  for (const char* text : {"", "# HELP x y\n# TYPE x gauge\n", "go_goroutines 12\nup 1\n"}) {
    absl::StatusOr<std::vector<DcgmReading>> r = ParseDcgmExporter(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_TRUE(r->empty()) << text;
  }
}

// ---- Matching -------------------------------------------------------------------------------

class MatchOccupantsTest : public ::testing::Test {
 protected:
  void SetUp() override { readings_ = Parse(Testdata("dcgm_exporter_h100_mig.txt")); }

  const GpuMetrics& Of(const std::string& uuid, const std::string& profile = "",
                       std::optional<uint32_t> gi = std::nullopt) {
    const DcgmReading* r = Find(readings_, uuid, profile, gi);
    EXPECT_NE(r, nullptr);
    return r != nullptr ? r->metrics : empty_;
  }

  std::vector<DcgmReading> readings_;
  const GpuMetrics empty_{};
};

TEST_F(MatchOccupantsTest, AWholeGpuAndEverySharerGetTheGpusReadings) {
  const std::vector<GpuMetrics> whole = MatchOccupants(readings_, {Holds("1", kWholeGpu)});
  ASSERT_THAT(whole, SizeIs(1));
  EXPECT_EQ(whole[0], Of(kWholeGpu));
  EXPECT_TRUE(whole[0].sm_active.has_value());

  const std::vector<GpuMetrics> shared = MatchOccupants(
      readings_, {Holds("2", kWholeGpu, "", 0, 500), Holds("3", kWholeGpu, "", 0, 250)});
  ASSERT_THAT(shared, SizeIs(2));
  EXPECT_EQ(shared[0], Of(kWholeGpu));
  EXPECT_EQ(shared[1], Of(kWholeGpu));
}

TEST_F(MatchOccupantsTest, AMigInstanceByItsProfile) {
  const std::vector<GpuMetrics> m = MatchOccupants(readings_, {Holds("1", kMigGpu, "3g.40gb", 4)});
  ASSERT_THAT(m, SizeIs(1));
  EXPECT_EQ(m[0], Of(kMigGpu, "3g.40gb", 1));
  EXPECT_THAT(m[0].sm_active, Optional(DoubleEq(1.083611)));  // as read: the server clamps
}

TEST_F(MatchOccupantsTest, InstancesOfOneProfileNeedTheMapOfStarts) {
  const std::vector<Occupant> occupants = {Holds("a", kMigGpu, "1g.10gb", 0),
                                           Holds("b", kMigGpu, "1g.10gb", 1),
                                           Holds("c", kMigGpu, "1g.10gb", 2)};
  // Three 1g.10gb instances and nothing to say which is where: nobody gets another's readings.
  for (const GpuMetrics& m : MatchOccupants(readings_, occupants)) EXPECT_EQ(m, GpuMetrics{});

  const MigInstanceStarts starts = {
      {{kMigGpu, 7}, 0}, {{kMigGpu, 8}, 1}, {{kMigGpu, 9}, 2}, {{kMigGpu, 1}, 4}};
  const std::vector<GpuMetrics> m = MatchOccupants(readings_, occupants, starts);
  ASSERT_THAT(m, SizeIs(3));
  EXPECT_EQ(m[0], Of(kMigGpu, "1g.10gb", 7));
  EXPECT_EQ(m[1], Of(kMigGpu, "1g.10gb", 8));
  EXPECT_EQ(m[2], Of(kMigGpu, "1g.10gb", 9));
  EXPECT_NE(m[0], m[2]);

  // Two instances placed elsewhere leave one: that is where the third sits.
  const std::vector<GpuMetrics> rest =
      MatchOccupants(readings_, occupants, {{{kMigGpu, 7}, 0}, {{kMigGpu, 8}, 1}});
  EXPECT_EQ(rest[2], Of(kMigGpu, "1g.10gb", 9));
  // One placed elsewhere leaves two: still not told apart.
  EXPECT_EQ(MatchOccupants(readings_, occupants, {{{kMigGpu, 7}, 0}})[2], GpuMetrics{});
}

TEST_F(MatchOccupantsTest, AMapThatPlacesTheOnlyInstanceElsewhereWins) {
  const std::vector<GpuMetrics> m =
      MatchOccupants(readings_, {Holds("1", kMigGpu, "3g.40gb", 4)}, {{{kMigGpu, 1}, 0}});
  EXPECT_EQ(m[0], GpuMetrics{});
}

TEST_F(MatchOccupantsTest, FewerInstancesListedThanHeldIsNotAGuess) {
  std::vector<DcgmReading> one;
  for (const DcgmReading& r : readings_) {
    if (r.mig_profile != "1g.10gb" || r.gpu_instance_id == 7u) one.push_back(r);
  }
  // The exporter lists one 1g.10gb, two workloads hold one each: which one it is, is unknown.
  for (const GpuMetrics& m : MatchOccupants(
           one, {Holds("a", kMigGpu, "1g.10gb", 0), Holds("b", kMigGpu, "1g.10gb", 1)})) {
    EXPECT_EQ(m, GpuMetrics{});
  }
  // Nor when a map places one instance and two workloads hold others, at starts it does not name.
  for (const GpuMetrics& m : MatchOccupants(
           readings_, {Holds("a", kMigGpu, "1g.10gb", 3), Holds("b", kMigGpu, "1g.10gb", 5)},
           {{{kMigGpu, 7}, 0}, {{kMigGpu, 8}, 1}})) {
    EXPECT_EQ(m, GpuMetrics{});
  }
  // One listed, one held: that one.
  EXPECT_EQ(MatchOccupants(one, {Holds("a", kMigGpu, "1g.10gb", 3)})[0], Of(kMigGpu, "1g.10gb", 7));
}

TEST_F(MatchOccupantsTest, WhatTheExporterDoesNotListGetsNothing) {
  const std::vector<GpuMetrics> m =
      MatchOccupants(readings_, {Holds("1", "GPU-00000000-0000-0000-0000-000000000000"),
                                 Holds("2", kMigGpu),                  // MIG on: no whole GPU
                                 Holds("3", kMigGpu, "2g.20gb", 2),    // no such instance
                                 Holds("4", kWholeGpu, "1g.10gb", 0),  // MIG off there
                                 Holds("5", kWholeGpu)});
  ASSERT_THAT(m, SizeIs(5));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m[i], GpuMetrics{}) << i;
  EXPECT_EQ(m[4], Of(kWholeGpu));
  EXPECT_THAT(MatchOccupants({}, {Holds("1", kWholeGpu)}), SizeIs(1));
}

// ---- URLs -----------------------------------------------------------------------------------

TEST(ParseDcgmExporterUrlTest, HttpOrHttpsWithAHost) {
  absl::StatusOr<DcgmExporterUrl> u = ParseDcgmExporterUrl("http://127.0.0.1:9400/metrics");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_FALSE(u->https);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9400);
  EXPECT_EQ(u->path, "/metrics");

  u = ParseDcgmExporterUrl("https://dcgm.example.internal");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->path, "/metrics");

  u = ParseDcgmExporterUrl("http://[::1]:9400/gpu/metrics?collect=all");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->path, "/gpu/metrics?collect=all");

  u = ParseDcgmExporterUrl("http://gpu-node-7?x=1");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/metrics?x=1");
}

TEST(ParseDcgmExporterUrlTest, AnythingElseIsOneClearError) {
  for (const char* bad :
       {"", "127.0.0.1:9400", "ftp://h/metrics", "http://", "http://:9400/metrics", "http://h:0/",
        "http://h:65536/", "http://h:/", "http://h:x/", "http://user:pw@h/", "http://h/metrics#top",
        "http://h /metrics", "http://::1:9400/", "http://[::1/metrics", "http://[::1]x/",
        "http://[zz]/"}) {
    absl::StatusOr<DcgmExporterUrl> u = ParseDcgmExporterUrl(bad);
    EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(u.status().message(), HasSubstr("--dcgm-exporter-url: \"")) << bad;
  }
  DcgmExporterOptions options;
  options.url = "localhost:9400";
  EXPECT_EQ(DcgmExporterTelemetry::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.url = "http://localhost:9400/metrics";
  options.read_timeout = absl::ZeroDuration();
  EXPECT_EQ(DcgmExporterTelemetry::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Scraping a real server -----------------------------------------------------------------

// A cpp-httplib server on 127.0.0.1, on a port of its own, for the test's lifetime.
class FakeExporter {
 public:
  explicit FakeExporter(const std::function<void(httplib::Server&)>& routes) {
    // A scrape that gives up closes its socket while the server still writes.
    signal(SIGPIPE, SIG_IGN);
    routes(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~FakeExporter() { Stop(); }
  FakeExporter(const FakeExporter&) = delete;
  FakeExporter& operator=(const FakeExporter&) = delete;

  void Stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string Url(const std::string& path = "/metrics") const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

std::unique_ptr<DcgmExporterTelemetry> Source(const std::string& url,
                                              const MigInstanceStarts& starts = {}) {
  DcgmExporterOptions options;
  options.url = url;
  options.mig_starts = starts;
  absl::StatusOr<std::unique_ptr<DcgmExporterTelemetry>> source =
      DcgmExporterTelemetry::Create(options);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

const absl::Time kAt = absl::FromUnixSeconds(1'800'000'000);

TEST(DcgmExporterTelemetryTest, SamplesWhatARealServerServes) {
  const std::string page = Testdata("dcgm_exporter_h100_mig.txt");
  FakeExporter exporter([&page](httplib::Server& s) {
    s.Get("/metrics", [&page](const httplib::Request&, httplib::Response& res) {
      res.set_content(page, "text/plain; version=0.0.4; charset=utf-8");
    });
  });
  const std::vector<DcgmReading> readings = Parse(page);
  const std::vector<Occupant> occupants = {
      Holds("train", kWholeGpu), Holds("finetune", kMigGpu, "3g.40gb", 4),
      Holds("embed", kMigGpu, "1g.10gb", 0), Holds("gone", "GPU-ffffffff")};

  std::unique_ptr<DcgmExporterTelemetry> source = Source(exporter.Url());
  ASSERT_NE(source, nullptr);
  std::vector<GpuMetrics> m = source->Sample(occupants, kAt);
  ASSERT_THAT(m, SizeIs(4));
  EXPECT_EQ(m[0], Find(readings, kWholeGpu)->metrics);
  EXPECT_THAT(m[0].gpu_util, Optional(DoubleEq(14)));
  EXPECT_EQ(m[1], Find(readings, kMigGpu, "3g.40gb", 1)->metrics);
  EXPECT_EQ(m[2], GpuMetrics{});  // one of three 1g.10gb: which, the agent was not told
  EXPECT_EQ(m[3], GpuMetrics{});

  source = Source(exporter.Url(), {{{kMigGpu, 7}, 0}, {{kMigGpu, 8}, 1}, {{kMigGpu, 9}, 2}});
  ASSERT_NE(source, nullptr);
  m = source->Sample(occupants, kAt);
  EXPECT_EQ(m[2], Find(readings, kMigGpu, "1g.10gb", 7)->metrics);
  EXPECT_THAT(m[2].sm_active, Optional(DoubleEq(1.012520)));

  // Another path answers 404: the scrape fails, every occupant gets nothing.
  source = Source(exporter.Url("/nothing-here"));
  ASSERT_NE(source, nullptr);
  absl::StatusOr<std::vector<DcgmReading>> scraped = source->Scrape();
  EXPECT_EQ(scraped.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(scraped.status().message(), HasSubstr("HTTP 404"));
  m = source->Sample(occupants, kAt);
  ASSERT_THAT(m, SizeIs(4));
  for (const GpuMetrics& g : m) EXPECT_EQ(g, GpuMetrics{});
}

TEST(DcgmExporterTelemetryTest, AClosedPortGivesEmptyMetricsAtOnce) {
  FakeExporter exporter([](httplib::Server&) {});
  const std::string url = exporter.Url();
  exporter.Stop();  // nothing listens there any more
  std::unique_ptr<DcgmExporterTelemetry> source = Source(url);
  ASSERT_NE(source, nullptr);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<GpuMetrics> m =
      source->Sample({Holds("1", kWholeGpu), Holds("2", kMigGpu, "3g.40gb", 4)}, kAt);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_THAT(m, SizeIs(2));
  EXPECT_EQ(m[0], GpuMetrics{});
  EXPECT_EQ(m[1], GpuMetrics{});
  EXPECT_LT(took, std::chrono::seconds(2));  // refused, not waited on
  EXPECT_EQ(source->Scrape().status().code(), absl::StatusCode::kUnavailable);
}

TEST(DcgmExporterTelemetryTest, AnOversizePageIsRefused) {
  const std::string big(size_t{17} << 20, '#');  // 17 MiB of comments, with a Content-Length
  FakeExporter exporter([&big](httplib::Server& s) {
    s.Get("/metrics", [&big](const httplib::Request&, httplib::Response& res) {
      res.set_content(big, "text/plain");
    });
    // No Content-Length: only counting what arrives can tell.
    s.Get("/chunked", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
        if (offset >= (size_t{2} << 20)) {
          sink.done();
          return true;
        }
        const std::string chunk(size_t{16} << 10, '#');
        return sink.write(chunk.data(), chunk.size());
      });
    });
  });
  std::unique_ptr<DcgmExporterTelemetry> source = Source(exporter.Url());
  ASSERT_NE(source, nullptr);
  absl::StatusOr<std::vector<DcgmReading>> scraped = source->Scrape();
  EXPECT_EQ(scraped.status().code(), absl::StatusCode::kResourceExhausted) << scraped.status();
  EXPECT_THAT(source->Sample({Holds("1", kWholeGpu)}, kAt), SizeIs(1));

  DcgmExporterOptions options;
  options.url = exporter.Url("/chunked");
  options.max_body_bytes = size_t{1} << 20;
  absl::StatusOr<std::unique_ptr<DcgmExporterTelemetry>> chunked =
      DcgmExporterTelemetry::Create(options);
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  EXPECT_EQ((*chunked)->Scrape().status().code(), absl::StatusCode::kResourceExhausted);
  // The same page under a bigger limit is fine (and all comments).
  options.max_body_bytes = size_t{4} << 20;
  chunked = DcgmExporterTelemetry::Create(options);
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  absl::StatusOr<std::vector<DcgmReading>> fits = (*chunked)->Scrape();
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_TRUE(fits->empty());
}

TEST(DcgmExporterTelemetryTest, APageStillArrivingAtTheDeadlineIsDropped) {
  FakeExporter exporter([](httplib::Server& s) {
    s.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
      // A line every 50 ms, for up to 5 s: an exporter that never finishes its page.
      res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
        if (offset > 800) {  // about 115 lines
          sink.done();
          return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return sink.write("# slow\n", 7);
      });
    });
  });
  DcgmExporterOptions options;
  options.url = exporter.Url();
  options.deadline = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<DcgmExporterTelemetry>> source =
      DcgmExporterTelemetry::Create(options);
  ASSERT_TRUE(source.ok()) << source.status();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<DcgmReading>> scraped = (*source)->Scrape();
  EXPECT_EQ(scraped.status().code(), absl::StatusCode::kDeadlineExceeded) << scraped.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace gpufed::agent
