#include "agent/dcgm_telemetry.h"

#include <chrono>
#include <cmath>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "federation/status_macros.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace gpufed::agent {
namespace {

// A metric gpufed reads, the field it fills and the readings the server accepts for that field
// (federation/telemetry.h, ValidateTelemetry): past them a whole report would be refused.
struct KnownMetric {
  absl::string_view name;
  std::optional<double> GpuMetrics::*field;
  double min, max;
};

const KnownMetric kKnownMetrics[] = {
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", &GpuMetrics::gr_engine_active, 0, kMaxActivityReading},
    {"DCGM_FI_PROF_SM_ACTIVE", &GpuMetrics::sm_active, 0, kMaxActivityReading},
    {"DCGM_FI_PROF_SM_OCCUPANCY", &GpuMetrics::sm_occupancy, 0, kMaxActivityReading},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &GpuMetrics::pipe_tensor_active, 0, kMaxActivityReading},
    {"DCGM_FI_PROF_DRAM_ACTIVE", &GpuMetrics::dram_active, 0, kMaxActivityReading},
    {"DCGM_FI_DEV_GPU_UTIL", &GpuMetrics::gpu_util, 0, 100},
    {"DCGM_FI_DEV_FB_USED", &GpuMetrics::fb_used_mib, 0, kMaxFbUsedMib},
    {"DCGM_FI_DEV_POWER_USAGE", &GpuMetrics::power_watts, 0, kMaxPowerWatts},
    {"DCGM_FI_DEV_GPU_TEMP", &GpuMetrics::gpu_temp_celsius, kMinTempCelsius, kMaxTempCelsius},
};

const KnownMetric* FindKnown(absl::string_view name) {
  for (const KnownMetric& m : kKnownMetrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// ---- The Prometheus text format ------------------------------------------------------------

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

void SkipBlanks(absl::string_view& s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
}

// A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or, without colons, a label name, taken off the front
// of `s`; empty when `s` does not start with one.
absl::string_view TakeName(absl::string_view& s, bool metric) {
  auto allowed = [metric](char c, bool first) {
    return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || (metric && c == ':') ||
           (!first && absl::ascii_isdigit(static_cast<unsigned char>(c)));
  };
  size_t n = 0;
  while (n < s.size() && allowed(s[n], n == 0)) ++n;
  const absl::string_view name = s.substr(0, n);
  s.remove_prefix(n);
  return name;
}

// A label value after its opening quote, through its closing quote, unescaped: the format knows
// \\, \" and \n.
absl::Status TakeQuoted(absl::string_view& s, std::string* out) {
  out->clear();
  while (!s.empty()) {
    const char c = s.front();
    s.remove_prefix(1);
    if (c == '"') return absl::OkStatus();
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (s.empty()) break;
    const char e = s.front();
    s.remove_prefix(1);
    if (e == 'n') {
      out->push_back('\n');
    } else if (e == '\\' || e == '"') {
      out->push_back(e);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown escape \\", absl::string_view(&e, 1), " in a label value"));
    }
  }
  return absl::InvalidArgumentError("a label value has no closing quote");
}

// The labels gpufed reads.
struct Labels {
  std::string uuid, uuid_lower, gpu, model_name, hostname, mig_profile, gpu_instance_id;

  void Set(absl::string_view name, std::string value) {
    if (name == "UUID") {
      uuid = std::move(value);
    } else if (name == "uuid") {  // dcgm-exporter --use-old-namespace
      uuid_lower = std::move(value);
    } else if (name == "gpu") {
      gpu = std::move(value);
    } else if (name == "modelName") {
      model_name = std::move(value);
    } else if (name == "Hostname" || name == "hostname") {
      hostname = std::move(value);
    } else if (name == "GPU_I_PROFILE") {
      mig_profile = std::move(value);
    } else if (name == "GPU_I_ID") {
      gpu_instance_id = std::move(value);
    }
  }
};

// `{name="value",...}` after the opening brace, through the closing one.
absl::Status TakeLabels(absl::string_view& s, Labels* labels) {
  for (;;) {
    SkipBlanks(s);
    if (absl::ConsumePrefix(&s, "}")) return absl::OkStatus();
    const absl::string_view name = TakeName(s, /*metric=*/false);
    if (name.empty()) return absl::InvalidArgumentError("expected a label name or '}'");
    SkipBlanks(s);
    if (!absl::ConsumePrefix(&s, "=")) {
      return absl::InvalidArgumentError(absl::StrCat("expected '=' after label ", name));
    }
    SkipBlanks(s);
    if (!absl::ConsumePrefix(&s, "\"")) {
      return absl::InvalidArgumentError(absl::StrCat("label ", name, ": expected a quoted value"));
    }
    std::string value;
    RETURN_IF_ERROR(TakeQuoted(s, &value));
    labels->Set(name, std::move(value));
    SkipBlanks(s);
    if (absl::ConsumePrefix(&s, "}")) return absl::OkStatus();
    if (!absl::ConsumePrefix(&s, ",")) {
      return absl::InvalidArgumentError(absl::StrCat("expected ',' or '}' after label ", name));
    }
  }
}

// One line of a known metric, read.
struct Sample {
  Labels labels;
  std::optional<uint32_t> gpu_instance_id;
  double value = 0;
};

// `rest`: what follows the metric name.
absl::StatusOr<Sample> ParseSample(absl::string_view rest) {
  Sample sample;
  SkipBlanks(rest);
  if (absl::ConsumePrefix(&rest, "{")) RETURN_IF_ERROR(TakeLabels(rest, &sample.labels));
  const std::vector<absl::string_view> tokens =
      absl::StrSplit(rest, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (tokens.empty() || tokens.size() > 2) {
    return absl::InvalidArgumentError("expected a value and at most a timestamp after the labels");
  }
  // absl::SimpleAtod reads Prometheus's NaN, +Inf and -Inf too.
  if (!absl::SimpleAtod(tokens[0], &sample.value)) {
    return absl::InvalidArgumentError(absl::StrCat("value \"", tokens[0], "\" is not a number"));
  }
  int64_t timestamp_ms = 0;
  if (tokens.size() == 2 && !absl::SimpleAtoi(tokens[1], &timestamp_ms)) {
    return absl::InvalidArgumentError(absl::StrCat("timestamp \"", tokens[1], "\" is not one"));
  }
  Labels& l = sample.labels;
  if (l.uuid.empty()) l.uuid = std::move(l.uuid_lower);
  if (l.uuid.empty()) return absl::InvalidArgumentError("no UUID label");
  if (!l.gpu_instance_id.empty()) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(l.gpu_instance_id, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU_I_ID \"", l.gpu_instance_id, "\" is not a number"));
    }
    sample.gpu_instance_id = id;
  }
  return sample;
}

// Folds `sample` of `metric` into the reading of its GPU or instance.
void Add(const KnownMetric& metric, Sample sample, std::vector<DcgmReading>& readings,
         std::map<std::tuple<std::string, std::string, int64_t>, size_t>& index,
         DcgmParseStats& stats) {
  Labels& l = sample.labels;
  const int64_t gi = sample.gpu_instance_id ? int64_t{*sample.gpu_instance_id} : -1;
  auto [it, added] = index.try_emplace({l.uuid, l.mig_profile, gi}, readings.size());
  if (added) {
    DcgmReading r;
    r.uuid = std::move(l.uuid);
    r.gpu = std::move(l.gpu);
    r.model_name = std::move(l.model_name);
    r.hostname = std::move(l.hostname);
    r.mig_profile = std::move(l.mig_profile);
    r.gpu_instance_id = sample.gpu_instance_id;
    readings.push_back(std::move(r));
  }
  std::optional<double>& field = readings[it->second].metrics.*metric.field;
  const double v = sample.value;
  if (!std::isfinite(v) || v < metric.min || v > metric.max) {
    ++stats.unusable_values;
    return;
  }
  if (!field.has_value()) field = v;
}

// ---- Matching -------------------------------------------------------------------------------

const DcgmReading* WholeGpu(const std::vector<DcgmReading>& readings, const std::string& uuid) {
  for (const DcgmReading& r : readings) {
    if (r.uuid == uuid && r.mig_profile.empty() && !r.gpu_instance_id.has_value()) return &r;
  }
  return nullptr;
}

// `held`: the starts occupants hold of o's profile on o's GPU, o's included.
const DcgmReading* MigInstance(const std::vector<DcgmReading>& readings, const Occupant& o,
                               const MigInstanceStarts& starts, const std::set<uint32_t>& held) {
  std::vector<const DcgmReading*> placed_here;
  std::vector<const DcgmReading*> unplaced;
  std::set<uint32_t> placed_starts;
  for (const DcgmReading& r : readings) {
    if (r.uuid != o.gpu_uuid || r.mig_profile != o.mig_profile) continue;
    auto it = r.gpu_instance_id ? starts.find({r.uuid, *r.gpu_instance_id}) : starts.end();
    if (it == starts.end()) {
      unplaced.push_back(&r);
      continue;
    }
    placed_starts.insert(it->second);
    if (it->second == o.mig_start) placed_here.push_back(&r);
  }
  if (!placed_here.empty()) return placed_here.size() == 1 ? placed_here.front() : nullptr;
  // No instance is known to sit here. The only one no entry places is this one, unless another
  // occupant could claim it too (it holds the profile at a start no entry names): then the
  // exporter lists fewer instances than are held, and which one it lists is unknown.
  size_t claimants = 0;
  for (const uint32_t start : held) claimants += placed_starts.contains(start) ? 0 : 1;
  if (unplaced.size() == 1 && claimants == 1) return unplaced.front();
  return nullptr;
}

// ---- Logging --------------------------------------------------------------------------------

constexpr absl::Duration kWarnEvery = absl::Minutes(1);

std::string Problem(const absl::Status& status, const DcgmParseStats& stats) {
  if (!status.ok()) return std::string(status.message());
  std::string problem;
  if (stats.malformed_lines > 0) {
    absl::StrAppend(&problem, stats.malformed_lines, " line(s) skipped (line ",
                    stats.first_malformed, ": ", stats.first_problem, ")");
  }
  if (stats.unusable_values > 0) {
    absl::StrAppend(&problem, problem.empty() ? "" : "; ", stats.unusable_values,
                    " value(s) NaN, infinite or out of range, left unset");
  }
  return problem;
}

}  // namespace

absl::StatusOr<std::vector<DcgmReading>> ParseDcgmExporter(absl::string_view text,
                                                           DcgmParseStats* stats) {
  DcgmParseStats local;
  DcgmParseStats& st = stats != nullptr ? *stats : local;
  st = DcgmParseStats{};
  std::vector<DcgmReading> readings;
  std::map<std::tuple<std::string, std::string, int64_t>, size_t> index;
  int number = 0;
  int metric_lines = 0;
  auto malformed = [&](absl::string_view why) {
    if (st.malformed_lines++ == 0) {
      st.first_malformed = number;
      st.first_problem = std::string(why);
    }
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);  // also a CRLF's \r
    if (line.empty() || line.front() == '#') continue;
    absl::string_view rest = line;
    const absl::string_view name = TakeName(rest, /*metric=*/true);
    if (name.empty() || rest.empty() || (rest.front() != '{' && !IsBlank(rest.front()))) {
      malformed("not a metric line");
      continue;
    }
    ++metric_lines;
    const KnownMetric* known = FindKnown(name);
    if (known == nullptr) continue;
    absl::StatusOr<Sample> sample = ParseSample(rest);
    if (!sample.ok()) {
      malformed(absl::StrCat(name, ": ", sample.status().message()));
      continue;
    }
    Add(*known, *std::move(sample), readings, index, st);
  }
  if (metric_lines == 0 && st.malformed_lines > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not the Prometheus text format (line ", st.first_malformed, ": ", st.first_problem, ")"));
  }
  return readings;
}

std::vector<GpuMetrics> MatchOccupants(const std::vector<DcgmReading>& readings,
                                       const std::vector<Occupant>& occupants,
                                       const MigInstanceStarts& starts) {
  std::map<std::pair<std::string, std::string>, std::set<uint32_t>> held;
  for (const Occupant& o : occupants) {
    if (!o.mig_profile.empty()) held[{o.gpu_uuid, o.mig_profile}].insert(o.mig_start);
  }
  std::vector<GpuMetrics> out;
  out.reserve(occupants.size());
  for (const Occupant& o : occupants) {
    const DcgmReading* r =
        o.mig_profile.empty() ? WholeGpu(readings, o.gpu_uuid)
                              : MigInstance(readings, o, starts, held[{o.gpu_uuid, o.mig_profile}]);
    out.push_back(r != nullptr ? r->metrics : GpuMetrics{});
  }
  return out;
}

absl::StatusOr<DcgmExporterUrl> ParseDcgmExporterUrl(absl::string_view url) {
  auto bad = [url](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--dcgm-exporter-url: \"", url, "\" ", why));
  };
  for (const char c : url) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return bad("must not contain spaces or control characters");
    }
  }
  DcgmExporterUrl out;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    out.https = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return bad("must start with http:// or https://");
  }
  if (rest.find('#') != absl::string_view::npos) return bad("must not have a fragment (#...)");
  const size_t path_at = rest.find_first_of("/?");
  absl::string_view authority = rest.substr(0, path_at);
  out.path = path_at == absl::string_view::npos ? "" : std::string(rest.substr(path_at));
  if (out.path.empty() || out.path.front() == '?') out.path = absl::StrCat("/metrics", out.path);
  if (authority.find('@') != absl::string_view::npos) {
    return bad("must not carry a user name or password");
  }
  std::optional<absl::string_view> port;
  if (absl::ConsumePrefix(&authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return bad("has an IPv6 address without its ']'");
    out.host = std::string(authority.substr(0, close));
    authority.remove_prefix(close + 1);
    if (absl::ConsumePrefix(&authority, ":")) {
      port = authority;
    } else if (!authority.empty()) {
      return bad("has something other than :PORT after the IPv6 address");
    }
    for (const char c : out.host) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return bad("has an IPv6 address that is not one");
      }
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
    for (const char c : out.host) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
        return bad("has a host that is not a name or an address (IPv6 goes in brackets)");
      }
    }
  }
  if (out.host.empty()) return bad("names no host");
  out.port = out.https ? 443 : 80;
  if (port.has_value() &&
      (!absl::SimpleAtoi(*port, &out.port) || out.port < 1 || out.port > 65535)) {
    return bad("has a port that is not 1..65535");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<DcgmExporterTelemetry>> DcgmExporterTelemetry::Create(
    DcgmExporterOptions options) {
  ASSIGN_OR_RETURN(DcgmExporterUrl url, ParseDcgmExporterUrl(options.url));
  if (options.connect_timeout <= absl::ZeroDuration() ||
      options.read_timeout <= absl::ZeroDuration() || options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("dcgm-exporter: timeouts and deadline must be > 0");
  }
  if (options.max_body_bytes == 0) {
    return absl::InvalidArgumentError("dcgm-exporter: max_body_bytes must be > 0");
  }
  return std::unique_ptr<DcgmExporterTelemetry>(
      new DcgmExporterTelemetry(std::move(options), std::move(url)));
}

DcgmExporterTelemetry::DcgmExporterTelemetry(DcgmExporterOptions options, DcgmExporterUrl url)
    : options_(std::move(options)), url_(std::move(url)) {}

absl::StatusOr<std::string> DcgmExporterTelemetry::Fetch() const {
  // A fresh client each time: nothing lingers between samples, and a stuck connection cannot
  // outlive its scrape.
  std::unique_ptr<httplib::ClientImpl> client =
      url_.https ? std::make_unique<httplib::SSLClient>(url_.host, url_.port)
                 : std::make_unique<httplib::ClientImpl>(url_.host, url_.port);
  client->set_connection_timeout(absl::ToChronoMicroseconds(options_.connect_timeout));
  client->set_read_timeout(absl::ToChronoMicroseconds(options_.read_timeout));
  client->set_write_timeout(absl::ToChronoMicroseconds(options_.read_timeout));
  client->set_keep_alive(false);
  client->set_follow_location(false);
  // Steady time, not the agent's clock: this bounds how long the agent waits on a socket.
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoMicroseconds(options_.deadline);
  const size_t max = options_.max_body_bytes;
  std::string body;
  int status = 0;
  bool too_big = false;
  bool late = false;
  // Uncompressed: the limit then counts what crosses the wire, and no small page can inflate.
  const httplib::Headers headers = {{"Accept-Encoding", "identity"}};
  httplib::Result res = client->Get(
      url_.path, headers,
      [&](const httplib::Response& response) {
        status = response.status;
        if (status != 200) return false;
        uint64_t length = 0;
        if (absl::SimpleAtoi(response.get_header_value("Content-Length"), &length) &&
            length > max) {
          too_big = true;
          return false;
        }
        return true;
      },
      [&](const char* data, size_t size) {
        if (size > max - body.size()) {
          too_big = true;
          return false;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          late = true;
          return false;
        }
        body.append(data, size);
        return true;
      });
  if (too_big) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the page is bigger than ", max, " bytes; refused"));
  }
  if (late) {
    return absl::DeadlineExceededError(absl::StrCat("the page was still arriving after ",
                                                    absl::FormatDuration(options_.deadline)));
  }
  if (status != 0 && status != 200) {
    return absl::UnavailableError(absl::StrCat("HTTP ", status, " from GET ", url_.path));
  }
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url_.path, " failed: ", httplib::to_string(res.error()), " error"));
  }
  return body;
}

absl::StatusOr<std::vector<DcgmReading>> DcgmExporterTelemetry::Scrape(
    DcgmParseStats* stats) const {
  ASSIGN_OR_RETURN(const std::string body, Fetch());
  return ParseDcgmExporter(body, stats);
}

std::vector<GpuMetrics> DcgmExporterTelemetry::Sample(const std::vector<Occupant>& occupants,
                                                      absl::Time at) {
  if (occupants.empty()) return {};
  DcgmParseStats stats;
  absl::StatusOr<std::vector<DcgmReading>> readings = Scrape(&stats);
  NoteScrape(readings.status(), stats, at);
  if (!readings.ok()) return std::vector<GpuMetrics>(occupants.size());
  return MatchOccupants(*readings, occupants, options_.mig_starts);
}

void DcgmExporterTelemetry::NoteScrape(const absl::Status& status, const DcgmParseStats& stats,
                                       absl::Time at) {
  const std::string problem = Problem(status, stats);
  bool recovered = false;
  bool warn = false;
  int unwarned = 0;
  {
    absl::MutexLock lock(&mu_);
    if (status.ok() && failing_) {
      failing_ = false;
      recovered = true;
    }
    if (!status.ok()) failing_ = true;
    if (!problem.empty()) {
      if (last_warning_.has_value() && at - *last_warning_ < kWarnEvery) {
        ++unwarned_;
      } else {
        warn = true;
        unwarned = unwarned_;
        unwarned_ = 0;
        last_warning_ = at;
      }
    }
  }
  if (recovered) spdlog::info("dcgm-exporter {}: scraped again", options_.url);
  if (!warn) return;
  spdlog::warn("dcgm-exporter {}: {}{}{}", options_.url, problem,
               status.ok() ? "" : "; this sample's telemetry is empty",
               unwarned > 0 ? absl::StrCat(" (", unwarned, " more since the last warning)") : "");
}

}  // namespace gpufed::agent
