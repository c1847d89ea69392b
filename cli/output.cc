#include "cli/output.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cli/duration.h"
#include "cli/enum_names.h"
#include "cli/money.h"
#include "federation/quota.h"
#include "google/protobuf/util/json_util.h"

namespace gpufed::cli {
namespace {

constexpr char kColumnGap[] = "   ";

size_t DisplayWidth(absl::string_view text) {
  // Counts UTF-8 lead bytes. Wide (CJK) characters are rare in these names and would only
  // shift a column, so they are not measured separately.
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

std::string OrDash(absl::string_view text) { return text.empty() ? "-" : std::string(text); }

// Milli-GPUs as a fraction of a GPU: 250 -> "0.25", 5 -> "0.005", 1500 -> "1.5".
std::string GpuFraction(uint32_t milli) {
  std::string text = absl::StrFormat("%d.%03d", milli / 1000, milli % 1000);
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
  return text;
}

std::string GangShape(const v1::WorkloadSpec& spec) {
  // The server reads replicas 0 as 1.
  const uint32_t replicas = spec.replicas() == 0 ? 1 : spec.replicas();
  switch (spec.per_replica().kind_case()) {
    case v1::ReplicaResources::kGpus:
      return absl::StrCat(replicas, "x", spec.per_replica().gpus());
    case v1::ReplicaResources::kMigProfile:
      return absl::StrCat(replicas, "x", spec.per_replica().mig_profile());
    case v1::ReplicaResources::kGpuMilli:
      return absl::StrCat(replicas, "x", GpuFraction(spec.per_replica().gpu_milli()));
    case v1::ReplicaResources::KIND_NOT_SET:
      break;
  }
  return absl::StrCat(replicas, "x?");
}

// "3g.40gb@0,2g.20gb@4": MIG instances as profile@start.
std::string MigLayoutText(const google::protobuf::RepeatedPtrField<v1::MigInstance>& layout) {
  return absl::StrJoin(layout, ",", [](std::string* out, const v1::MigInstance& m) {
    absl::StrAppend(out, m.profile(), "@", m.start());
  });
}

// A GPU's MIG state in one cell: "-" (not capable), "off", "on" (no instances), or the layout.
std::string MigCell(const v1::Gpu& gpu) {
  if (gpu.mig_enabled()) return gpu.mig_layout().empty() ? "on" : MigLayoutText(gpu.mig_layout());
  return gpu.mig_capable() ? "off" : "-";
}

// Where one replica runs: node, GPUs, and the MIG instance or share it holds on its GPU.
std::string ReplicaText(const v1::ReplicaAssignment& r) {
  std::string text = absl::StrCat(r.node(), " GPUs ", absl::StrJoin(r.gpu_indices(), ","), " (",
                                  absl::StrJoin(r.gpu_uuids(), ","), ")");
  if (!r.mig_profile().empty()) {
    absl::StrAppend(&text, " MIG ", r.mig_profile(), " at slot ", r.mig_start());
  } else if (r.gpu_milli() > 0) {
    absl::StrAppend(&text, " share ", GpuFraction(r.gpu_milli()), " (", r.gpu_milli(), "m)");
  }
  return text;
}

std::string RepartitionText(const v1::Repartition& r) {
  std::string text = absl::StrCat(r.node(), " ", r.gpu_uuid(), " MIG ");
  if (!r.mig_enabled()) {
    absl::StrAppend(&text, "off");
  } else if (r.layout().empty()) {
    absl::StrAppend(&text, "on, no instances");
  } else {
    absl::StrAppend(&text, "on: ", MigLayoutText(r.layout()));
  }
  if (!r.reason().empty()) absl::StrAppend(&text, " (", r.reason(), ")");
  return text;
}

std::string StateWithCancel(const v1::Workload& w) {
  std::string state = WorkloadStateName(w.state());
  if (w.cancel_requested() && !IsTerminalState(w.state())) absl::StrAppend(&state, " (cancelling)");
  return state;
}

// Why the workload is where it is: the pending reason while pending, else the last message.
std::string Reason(const v1::Workload& w) {
  return w.pending_reason().empty() ? w.message() : w.pending_reason();
}

std::string Age(const google::protobuf::Timestamp& t, absl::Time now) {
  return IsSet(t) ? FormatAge(now - TimeFromProto(t)) : "-";
}

std::string JoinCommand(const google::protobuf::RepeatedPtrField<std::string>& command) {
  // Quote arguments with spaces so the printed command reads back the way it will run.
  std::vector<std::string> parts;
  for (const std::string& arg : command) {
    if (arg.empty() || arg.find_first_of(" \t\"'") != std::string::npos) {
      parts.push_back(absl::StrCat("'", arg, "'"));
    } else {
      parts.push_back(arg);
    }
  }
  return absl::StrJoin(parts, " ");
}

// Aligned "Key: value" lines.
class Details {
 public:
  void Add(std::string key, std::string value) {
    if (!value.empty()) lines_.emplace_back(std::move(key), std::move(value));
  }
  void Render(std::ostream& out) const {
    size_t width = 0;
    for (const auto& [key, value] : lines_) width = std::max(width, key.size() + 1);
    for (const auto& [key, value] : lines_) {
      out << key << ":" << std::string(width - key.size() - 1 + 2, ' ')
          << SanitizeForTerminal(value) << "\n";
    }
  }

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

}  // namespace

std::optional<OutputFormat> ParseOutputFormat(absl::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "csv") return OutputFormat::kCsv;
  return std::nullopt;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& cell : cells) cell = SanitizeForTerminal(cell);
  rows_.push_back(std::move(cells));
}

void Table::Render(std::ostream& out) const {
  std::vector<size_t> widths(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) widths[i] = DisplayWidth(headers_[i]);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  const auto write_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += kColumnGap;
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - DisplayWidth(row[i]), ' ');
    }
    // An empty last cell would otherwise leave the padding of the one before it.
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  };
  write_row(headers_);
  for (const auto& row : rows_) write_row(row);
}

std::string SanitizeForTerminal(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else if (c == 0xC2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      // U+0080..U+009F: the C1 controls, which include a one-character escape introducer.
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(text[i + 1]));
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string FormatAge(absl::Duration age) {
  if (age < absl::ZeroDuration()) age = absl::ZeroDuration();
  const int64_t seconds = absl::ToInt64Seconds(age);
  if (seconds < 120) return absl::StrCat(seconds, "s");
  const int64_t minutes = seconds / 60;
  if (minutes < 120) return absl::StrCat(minutes, "m");
  const int64_t hours = minutes / 60;
  if (hours < 48) return absl::StrCat(hours, "h");
  return absl::StrCat(hours / 24, "d");
}

bool IsSet(const google::protobuf::Timestamp& t) { return t.seconds() != 0 || t.nanos() != 0; }

absl::Time TimeFromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

std::string FormatTimestamp(const google::protobuf::Timestamp& t) {
  if (!IsSet(t)) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", TimeFromProto(t), absl::UTCTimeZone());
}

absl::Status WriteJson(const google::protobuf::Message& message, std::ostream& out) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = false;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ", message.GetTypeName(), " as JSON: ", status.ToString()));
  }
  out << json << "\n";
  return absl::OkStatus();
}

void WriteWorkloadTable(const google::protobuf::RepeatedPtrField<v1::Workload>& workloads,
                        absl::Time now, std::ostream& out) {
  Table table({"ID", "NAME", "TENANT/PROJECT", "STATE", "GPUS", "CLUSTER", "AGE", "REASON"});
  for (const v1::Workload& w : workloads) {
    table.AddRow({w.id(), w.spec().name(), absl::StrCat(w.spec().tenant(), "/", w.spec().project()),
                  StateWithCancel(w), GangShape(w.spec()), OrDash(w.assignment().cluster()),
                  Age(w.create_time(), now), Reason(w)});
  }
  table.Render(out);
}

// "up to 3 attempts, on cluster_lost"
std::string RetryText(const v1::RetryPolicy& retry) {
  std::vector<std::string> on;
  on.reserve(retry.on_size());
  for (int i = 0; i < retry.on_size(); ++i) {
    on.push_back(RetryOnName(static_cast<v1::RetryOn>(retry.on(i))));
  }
  const uint32_t attempts = retry.max_attempts() != 0 ? retry.max_attempts() : (on.empty() ? 1 : 3);
  return absl::StrCat(
      "up to ", attempts, " attempts, on ",
      on.empty() ? "any cluster loss, preemption or node failure" : absl::StrJoin(on, ", "));
}

namespace {

// The placement rules, one line each; rules left at "any" are left out.
void AddPlacement(const v1::PlacementConstraints& p, Details& d) {
  d.Add("Jurisdictions", absl::StrJoin(p.jurisdictions(), ", "));
  d.Add("Compliance labels", absl::StrJoin(p.compliance_labels(), ", "));
  d.Add("Providers", absl::StrJoin(p.providers(), ", "));
  d.Add("Regions", absl::StrJoin(p.regions(), ", "));
  d.Add("Allowed clusters", absl::StrJoin(p.clusters(), ", "));
  d.Add("Denied clusters", absl::StrJoin(p.denied_clusters(), ", "));
  if (p.max_price_per_gpu_hour_micros() > 0) {
    d.Add("Max price",
          absl::StrCat(FormatMicros(p.max_price_per_gpu_hour_micros()), " per GPU-hour"));
  }
  d.Add("Spot", p.spot_tolerated() ? "tolerated" : "not tolerated");
  d.Add("Min driver", p.min_driver_version());
  d.Add("Min CUDA", p.min_cuda_version());
  std::string objective = ObjectiveName(p.objective());
  std::vector<std::string> clients;
  if (!p.client_region().empty()) clients.push_back(absl::StrCat("clients in ", p.client_region()));
  if (p.has_max_rtt() && DurationFromProto(p.max_rtt()) > absl::ZeroDuration()) {
    clients.push_back(absl::StrCat("max RTT ", DurationToText(DurationFromProto(p.max_rtt()))));
  }
  if (!clients.empty()) absl::StrAppend(&objective, " (", absl::StrJoin(clients, ", "), ")");
  d.Add("Objective", objective);
}

}  // namespace

void WriteWorkloadDetail(const v1::Workload& w, absl::Time now, std::ostream& out) {
  const v1::WorkloadSpec& spec = w.spec();
  Details d;
  d.Add("ID", w.id());
  d.Add("Name", spec.name());
  d.Add("Tenant/Project", absl::StrCat(spec.tenant(), "/", spec.project()));
  d.Add("State", StateWithCancel(w));
  d.Add("Pending reason", w.pending_reason());
  d.Add("Class", WorkloadClassName(spec.workload_class()));
  d.Add("Priority", absl::StrCat(spec.priority()));
  d.Add("Replicas x GPUs", GangShape(spec));
  if (spec.per_replica().kind_case() == v1::ReplicaResources::kMigProfile) {
    d.Add("MIG profile", absl::StrCat(spec.per_replica().mig_profile(), " per replica"));
  } else if (spec.per_replica().kind_case() == v1::ReplicaResources::kGpuMilli) {
    d.Add("GPU share", absl::StrCat(spec.per_replica().gpu_milli(), " milli-GPU per replica"));
  }
  if (spec.per_replica().cpu_millis() > 0) {
    d.Add("CPU", absl::StrCat(spec.per_replica().cpu_millis(), "m per replica"));
  }
  if (spec.per_replica().memory_mib() > 0) {
    d.Add("Memory", absl::StrCat(spec.per_replica().memory_mib(), " MiB per replica"));
  }
  d.Add("GPU models", spec.gpu_models().empty() ? "any" : absl::StrJoin(spec.gpu_models(), ", "));
  if (spec.min_gpu_memory_mib() > 0) {
    d.Add("Min GPU memory", absl::StrCat(spec.min_gpu_memory_mib(), " MiB"));
  }
  d.Add("Topology", TopologyName(spec.topology()));
  if (spec.has_estimated_duration()) {
    d.Add("Duration", DurationToText(DurationFromProto(spec.estimated_duration())));
  }
  if (spec.has_checkpoint_interval()) {
    d.Add("Checkpoints every", DurationToText(DurationFromProto(spec.checkpoint_interval())));
  }
  d.Add("Idempotency key", spec.idempotency_key());
  if (spec.has_retry()) d.Add("Retry", RetryText(spec.retry()));
  if (spec.has_placement()) AddPlacement(spec.placement(), d);
  d.Add("Image", spec.run().image());
  d.Add("Command", JoinCommand(spec.run().command()));
  std::vector<std::pair<std::string, std::string>> env(spec.run().env().begin(),
                                                       spec.run().env().end());
  std::sort(env.begin(), env.end());  // Protobuf maps have no stable order.
  d.Add("Env", absl::StrJoin(env, " ", absl::PairFormatter("=")));
  if (spec.run().sim_outcome() == v1::SIM_OUTCOME_FAIL || spec.run().sim_exit_code() != 0) {
    d.Add("Simulated outcome", absl::StrCat(SimOutcomeName(spec.run().sim_outcome()),
                                            " (exit code ", spec.run().sim_exit_code(), ")"));
  }
  if (!w.assignment().cluster().empty()) {
    d.Add("Cluster",
          absl::StrCat(w.assignment().cluster(), " (epoch ", w.assignment().epoch(), ")"));
    for (int i = 0; i < w.assignment().replicas_size(); ++i) {
      d.Add(absl::StrCat("Replica ", i), ReplicaText(w.assignment().replicas(i)));
    }
    for (int i = 0; i < w.assignment().repartitions_size(); ++i) {
      d.Add(absl::StrCat("Repartition ", i), RepartitionText(w.assignment().repartitions(i)));
    }
  }
  // Placements so far: shown once there was more than one.
  if (w.attempts() > 1) d.Add("Attempts", absl::StrCat(w.attempts()));
  if (w.cancel_requested()) d.Add("Cancel requested", "yes");
  if (IsTerminalState(w.state())) d.Add("Exit code", absl::StrCat(w.exit_code()));
  d.Add("Message", w.message());
  if (IsSet(w.create_time())) {
    d.Add("Created",
          absl::StrCat(FormatTimestamp(w.create_time()), " (", Age(w.create_time(), now), " ago)"));
  }
  if (IsSet(w.start_time())) d.Add("Started", FormatTimestamp(w.start_time()));
  if (IsSet(w.end_time())) d.Add("Ended", FormatTimestamp(w.end_time()));
  d.Add("Version", absl::StrCat(w.version()));
  d.Render(out);
}

void WriteSubmitResult(const v1::SubmitResponse& response, std::ostream& out) {
  const v1::Workload& w = response.workload();
  out << "workload/" << SanitizeForTerminal(w.id()) << " " << SanitizeForTerminal(w.spec().name())
      << (response.created() ? " created"
                             : " unchanged (its idempotency key matched an earlier submission)")
      << "\n";
}

void WriteCancelResult(const v1::Workload& w, std::ostream& out) {
  out << "workload/" << SanitizeForTerminal(w.id());
  if (w.state() == v1::WORKLOAD_STATE_CANCELLED) {
    out << " cancelled\n";
  } else {
    out << " cancel requested (" << WorkloadStateName(w.state()) << ")\n";
  }
}

void WriteWatchEvent(const v1::WorkloadEvent& event, std::ostream& out) {
  const v1::Workload& w = event.workload();
  std::string line =
      absl::StrCat(FormatTimestamp(IsSet(event.time()) ? event.time() : w.update_time()), "  ",
                   w.id(), "  ", w.spec().name(), "  ");
  // A resumed Watch's catch-up (resync) is the workload's state, not a change: shown as the
  // first event of a watch is.
  if (!event.resync() && event.from_state() != v1::WORKLOAD_STATE_UNSPECIFIED) {
    absl::StrAppend(&line, WorkloadStateName(event.from_state()), " -> ");
  }
  absl::StrAppend(&line, WorkloadStateName(event.to_state()));
  if (!w.assignment().cluster().empty()) {
    absl::StrAppend(&line, "  cluster=", w.assignment().cluster());
  }
  if (IsTerminalState(event.to_state()) && event.to_state() != v1::WORKLOAD_STATE_CANCELLED) {
    absl::StrAppend(&line, "  exit_code=", w.exit_code());
  }
  if (const std::string reason = Reason(w); !reason.empty()) absl::StrAppend(&line, "  ", reason);
  out << SanitizeForTerminal(line) << "\n";
}

namespace {

std::string RuleText(const v1::RuleCheck& r) {
  return absl::StrCat(r.rule(), "=", OrDash(r.detail()), r.passed() ? " ok" : " FAIL");
}

// An offer's key as the objective measures it.
std::string KeyText(v1::Objective objective, double key) {
  if (std::isinf(key)) return "last";
  if (std::isnan(key)) return "?";
  switch (objective) {
    case v1::OBJECTIVE_COST:
      return FormatMicros(std::llround(key));
    case v1::OBJECTIVE_LATENCY:
      return DurationToText(absl::Microseconds(std::llround(key)));
    case v1::OBJECTIVE_BALANCED:
      return absl::StrFormat("%.3f", key);
    default:
      return "-";
  }
}

}  // namespace

void WriteCandidateTable(v1::Objective objective,
                         const google::protobuf::RepeatedPtrField<v1::ClusterCandidate>& candidates,
                         std::ostream& out) {
  Table table({"CLUSTER", "ALLOWED", "CHOSEN", "RULES", "MODEL", "CAPACITY", "PRICE/H", "RTT",
               "KEY", "REFUSED", "FITS-NOW"});
  for (const v1::ClusterCandidate& c : candidates) {
    std::vector<std::string> first = {
        c.cluster(), c.allowed() ? "yes" : "no", c.chosen() ? "yes" : "-",
        OrDash(absl::StrJoin(c.rules(), "; ", [](std::string* text, const v1::RuleCheck& r) {
          absl::StrAppend(text, RuleText(r));
        }))};
    if (c.offers().empty()) {
      first.insert(first.end(), {"-", "-", "-", "-", "-", "-", "-"});
      table.AddRow(std::move(first));
      continue;
    }
    bool first_row = true;
    for (const v1::OfferCheck& o : c.offers()) {
      std::vector<std::string> row = first_row ? first : std::vector<std::string>{"", "", "", ""};
      first_row = false;
      row.insert(
          row.end(),
          {o.gpu_model(), CapacityTypeName(o.capacity_type()),
           o.has_price_per_hour_micros() ? FormatMicros(o.price_per_hour_micros()) : "unpriced",
           o.has_rtt() ? DurationToText(DurationFromProto(o.rtt())) : "-",
           KeyText(objective, o.key()), OrDash(o.refused()), o.fits_now() ? "yes" : "no"});
      table.AddRow(std::move(row));
    }
  }
  table.Render(out);
}

void WriteWhatIf(const v1::WorkloadSpec& spec, const v1::WhatIfResponse& response,
                 std::ostream& out) {
  Details d;
  d.Add("Workload",
        absl::StrCat(spec.name(), " (", spec.tenant(), "/", spec.project(), "), not submitted"));
  const v1::Assignment& a = response.assignment();
  const absl::Duration hours = absl::Seconds(std::llround(response.estimated_hours() * 3600));
  if (response.has_assignment()) {
    d.Add("Would go to", a.cluster());
    for (int i = 0; i < a.replicas_size(); ++i) {
      d.Add(absl::StrCat("Replica ", i), ReplicaText(a.replicas(i)));
    }
    for (int i = 0; i < a.repartitions_size(); ++i) {
      d.Add(absl::StrCat("Repartition ", i), RepartitionText(a.repartitions(i)));
    }
    if (response.has_price_per_hour_micros()) {
      d.Add("Price", absl::StrCat(FormatMicros(response.price_per_hour_micros()), " per hour"));
    } else {
      d.Add("Price", "unpriced (a GPU it would take has no price in force)");
    }
    const std::string over =
        absl::StrCat("over ", DurationToText(hours),
                     DurationFromProto(spec.estimated_duration()) > absl::ZeroDuration()
                         ? ""
                         : " (no estimated duration: 1h assumed)");
    d.Add("Estimated cost",
          response.has_estimated_cost_micros()
              ? absl::StrCat(FormatMicros(response.estimated_cost_micros()), " ", over)
              : "unknown (unpriced)");
  } else {
    d.Add("Would go to", "nowhere now");
    d.Add("Why", response.explanation());
  }
  d.Add("Objective", ObjectiveName(response.objective()));
  d.Render(out);
  if (response.never_fits()) {
    out << "Waiting will not help: no cluster may or could hold it as asked. Change the request "
           "(rules, models, GPUs per replica, topology) or the clusters.\n";
  }
  if (!response.candidates().empty()) {
    out << "\n";
    WriteCandidateTable(response.objective(), response.candidates(), out);
  }
}

void WriteClusterTable(const google::protobuf::RepeatedPtrField<v1::Cluster>& clusters,
                       std::ostream& out) {
  Table table({"NAME", "PROVIDER", "REGION", "STATE", "NODES", "GPUS", "FREE", "MODELS"});
  for (const v1::Cluster& c : clusters) {
    std::vector<std::string> models;
    for (const v1::ModelCapacity& m : c.capacity()) {
      models.push_back(absl::StrCat(m.model(), ":", m.free(), "/", m.total()));
    }
    table.AddRow({c.name(), OrDash(c.info().provider()), OrDash(c.info().region()),
                  ClusterStateName(c.state()), absl::StrCat(c.nodes_size()),
                  absl::StrCat(c.gpus_total()), absl::StrCat(c.gpus_free()),
                  OrDash(absl::StrJoin(models, ","))});
  }
  table.Render(out);
}

namespace {

// The caller's workloads on the GPU; "(others)" beside them when the server says the GPU is
// held by more than it names (another tenant's work, which a tenant never sees by id).
std::string AllocatedCell(const v1::Gpu& gpu) {
  if (!gpu.allocated()) return OrDash(gpu.allocated_to());
  if (gpu.allocated_to().empty()) return "(others)";
  return gpu.allocated_to();
}

}  // namespace

void WriteGpuTable(const google::protobuf::RepeatedPtrField<v1::Cluster>& clusters,
                   std::ostream& out) {
  Table table({"CLUSTER", "NODE", "RACK", "GPU", "MODEL", "MEMORY", "NVLINK", "MIG", "STATUS",
               "ALLOCATED_TO"});
  for (const v1::Cluster& c : clusters) {
    for (const v1::Node& node : c.nodes()) {
      for (const v1::Gpu& gpu : node.gpus()) {
        std::string status = "ok";
        if (!node.schedulable()) {
          status = "drained";
        } else if (!gpu.healthy()) {
          status = "unhealthy";
        }
        table.AddRow({c.name(), node.name(), OrDash(node.rack()), absl::StrCat(gpu.index()),
                      gpu.model(), absl::StrCat(gpu.memory_mib(), "MiB"),
                      OrDash(gpu.nvlink_domain()), MigCell(gpu), status, AllocatedCell(gpu)});
      }
    }
  }
  table.Render(out);
}

void WriteApplyResult(const v1::ApplyClustersResponse& response, std::ostream& out) {
  Table table({"CLUSTER", "RESULT", "CHANGES"});
  std::map<v1::DeclarationChange, int> counts;
  for (const v1::DeclarationDiff& diff : response.diffs()) {
    ++counts[diff.kind()];
    const std::string kind = DeclarationChangeName(diff.kind());
    if (diff.changes().empty()) {
      table.AddRow({diff.cluster(), kind, "-"});
      continue;
    }
    for (int i = 0; i < diff.changes_size(); ++i) {
      table.AddRow({i == 0 ? diff.cluster() : "", i == 0 ? kind : "", diff.changes(i)});
    }
  }
  table.Render(out);
  std::vector<std::string> parts;
  parts.reserve(counts.size());
  for (const auto& [kind, count] : counts) {
    parts.push_back(absl::StrCat(count, " ", DeclarationChangeName(kind)));
  }
  out << response.diffs_size() << " cluster(s): " << absl::StrJoin(parts, ", ");
  if (response.dry_run()) out << " (dry run: nothing was stored)";
  out << "\n";
}

void WriteDeclarationTables(
    const google::protobuf::RepeatedPtrField<v1::ClusterDeclaration>& declarations,
    std::ostream& out) {
  Table clusters({"CLUSTER", "PROVIDER", "REGION", "ZONE", "JURISDICTION", "LABELS",
                  "DEFAULT-CAPACITY", "RTT"});
  Table prices({"CLUSTER", "MODEL", "MIG", "CAPACITY", "PER-HOUR", "EFFECTIVE-FROM"});
  for (const v1::ClusterDeclaration& d : declarations) {
    std::string labels = "-";
    if (d.has_compliance_labels()) {
      labels = d.compliance_labels().labels().empty()
                   ? "(none)"
                   : absl::StrJoin(d.compliance_labels().labels(), ",");
    }
    // Protobuf maps have no stable order.
    std::map<std::string, std::string> rtts;
    for (const auto& [region, rtt] : d.client_rtts()) {
      rtts[region] = DurationToText(DurationFromProto(rtt));
    }
    clusters.AddRow({d.cluster(), OrDash(d.provider()), OrDash(d.region()), OrDash(d.zone()),
                     OrDash(d.jurisdiction()), labels, CapacityTypeName(d.default_capacity()),
                     OrDash(absl::StrJoin(rtts, ",", absl::PairFormatter("=")))});
    for (const v1::PriceEntry& p : d.prices()) {
      prices.AddRow({d.cluster(), p.gpu_model(), OrDash(p.mig_profile()),
                     CapacityTypeName(p.capacity_type()), FormatMicros(p.price_per_hour_micros()),
                     FormatTimestamp(p.effective_from())});
    }
  }
  clusters.Render(out);
  if (prices.rows() > 0) {
    out << "\n";
    prices.Render(out);
  }
}

void WriteTenantTable(const google::protobuf::RepeatedPtrField<v1::Tenant>& tenants, absl::Time now,
                      std::ostream& out) {
  Table table({"NAME", "DISPLAY NAME", "AGE"});
  for (const v1::Tenant& t : tenants) {
    table.AddRow({t.name(), OrDash(t.display_name()), Age(t.create_time(), now)});
  }
  table.Render(out);
}

void WriteQuotaTable(const google::protobuf::RepeatedPtrField<v1::Quota>& quotas,
                     std::ostream& out) {
  Table table({"TENANT", "PROJECT", "RESOURCE", "GUARANTEED", "LIMIT", "NOTE"});
  for (const v1::Quota& q : quotas) {
    table.AddRow({q.tenant(), q.project().empty() ? "-" : q.project(), q.resource(),
                  FormatQuotaAmount(q.guaranteed_milli()),
                  q.has_limit_milli() ? FormatQuotaAmount(q.limit_milli()) : "-",
                  q.overcommitted() ? "overcommitted" : ""});
  }
  table.Render(out);
}

void WriteQuotaUsageTable(const google::protobuf::RepeatedPtrField<v1::QuotaUsage>& usage,
                          std::ostream& out) {
  Table table({"TENANT", "PROJECT", "RESOURCE", "USED", "GUARANTEED", "LIMIT", "BORROWED"});
  for (const v1::QuotaUsage& u : usage) {
    std::string guaranteed = "-";
    std::string limit = "-";
    if (u.has_quota()) {
      guaranteed = FormatQuotaAmount(u.quota().guaranteed_milli());
      limit = FormatQuotaAmount(u.quota().has_limit_milli() ? u.quota().limit_milli()
                                                            : u.quota().guaranteed_milli());
    }
    table.AddRow({u.tenant(), u.project().empty() ? "-" : u.project(), u.resource(),
                  FormatQuotaAmount(u.used_milli()), guaranteed, limit,
                  FormatQuotaAmount(u.borrowed_milli())});
  }
  table.Render(out);
}

void WriteFairShareTable(const google::protobuf::RepeatedPtrField<v1::FairShare>& shares,
                         std::ostream& out) {
  Table table({"TENANT", "PROJECT", "WEIGHT", "SHARE", "HELD", "DECAYED-GPU-H", "WAITING"});
  for (const v1::FairShare& f : shares) {
    table.AddRow({f.tenant(), f.project().empty() ? "-" : f.project(), absl::StrCat(f.weight()),
                  absl::StrFormat("%.1f%%", 100 * f.share()), FormatQuotaAmount(f.held_milli()),
                  absl::StrFormat("%.1f", f.decayed_gpu_hours()), absl::StrCat(f.waiting())});
  }
  table.Render(out);
}

void WritePreemptionTable(const google::protobuf::RepeatedPtrField<v1::Preemption>& preemptions,
                          absl::Time now, std::ostream& out) {
  Table table({"ID", "AGE", "REASON", "BY", "RESOURCE", "CLUSTER", "NEEDED", "EVICTED", "VICTIMS"});
  for (const v1::Preemption& p : preemptions) {
    std::vector<std::string> victims;
    for (const v1::PreemptionVictim& v : p.victims()) {
      victims.push_back(v.workload_id().empty() ? v.tenant()
                                                : absl::StrCat(v.tenant(), ":", v.workload_id()));
    }
    absl::string_view reason = v1::PreemptionReason_Name(p.reason());
    absl::ConsumePrefix(&reason, "PREEMPTION_REASON_");
    // Another tenant's preemptor and victims come blank (or not at all): "(another tenant)".
    const std::string by = p.tenant().empty() ? "(another tenant)"
                                              : absl::StrCat(p.tenant(), "/", p.project(), " ",
                                                             p.preemptor_workload_id());
    if (victims.empty()) victims.emplace_back("(another tenant)");
    table.AddRow({absl::StrCat(p.id()), Age(p.time(), now), absl::AsciiStrToLower(reason), by,
                  p.resource(), p.cluster(), FormatQuotaAmount(p.needed_milli()),
                  FormatQuotaAmount(p.evicted_milli()), absl::StrJoin(victims, ",")});
  }
  table.Render(out);
}

void WriteTokenTable(const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                     absl::Time now, std::ostream& out) {
  Table table({"ID", "SUBJECT", "ROLE", "SCOPE", "AGE", "EXPIRES", "LAST-USED", "STATE"});
  for (const v1::TokenInfo& t : tokens) {
    std::string scope = t.tenant().empty()    ? "platform"
                        : t.project().empty() ? t.tenant()
                                              : absl::StrCat(t.tenant(), "/", t.project());
    if (!t.cluster().empty()) scope = absl::StrCat("cluster ", t.cluster());
    const bool expired = IsSet(t.expire_time()) && TimeFromProto(t.expire_time()) <= now;
    const std::string expires =
        !IsSet(t.expire_time()) ? "never"
        : expired               ? "expired"
                  : absl::StrCat("in ", FormatAge(TimeFromProto(t.expire_time()) - now));
    table.AddRow({absl::StrCat(t.id()), SanitizeForTerminal(t.subject()), RoleName(t.role()),
                  SanitizeForTerminal(scope), Age(t.create_time(), now), expires,
                  Age(t.last_used_time(), now),
                  IsSet(t.revoke_time()) ? "revoked"
                  : expired              ? "expired"
                                         : "live"});
  }
  table.Render(out);
}

void WriteMemberTable(const google::protobuf::RepeatedPtrField<v1::RoleBinding>& bindings,
                      absl::Time now, std::ostream& out) {
  Table table({"SUBJECT", "ROLE", "SCOPE", "AGE", "CHANGED"});
  for (const v1::RoleBinding& b : bindings) {
    const std::string scope = b.tenant().empty()    ? "platform"
                              : b.project().empty() ? b.tenant()
                                                    : absl::StrCat(b.tenant(), "/", b.project());
    table.AddRow({SanitizeForTerminal(b.subject()), RoleName(b.role()), SanitizeForTerminal(scope),
                  Age(b.create_time(), now), Age(b.update_time(), now)});
  }
  table.Render(out);
}

void WriteProjectTable(const google::protobuf::RepeatedPtrField<v1::Project>& projects,
                       absl::Time now, std::ostream& out) {
  Table table({"TENANT", "NAME", "AGE"});
  for (const v1::Project& p : projects) {
    table.AddRow({p.tenant(), p.name(), Age(p.create_time(), now)});
  }
  table.Render(out);
}

}  // namespace gpufed::cli
