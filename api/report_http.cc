#include "api/report_http.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "api/convert.h"
#include "api/report_csv.h"
#include "federation/status_macros.h"
#include "federation/usage_report.h"

namespace gpufed::api {
namespace {

// The longest value a parameter may have (names, dates, a list of seven dimensions).
constexpr size_t kMaxParamBytes = 256;

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return 503;
    default:
      return 500;
  }
}

HttpAnswer Refusal(const absl::Status& status) {
  return HttpAnswer{HttpStatusOf(status), "text/plain; charset=utf-8",
                    std::string(status.message()) + "\n"};
}

}  // namespace

absl::StatusOr<google::protobuf::Timestamp> ReportTimeFromText(absl::string_view field,
                                                               absl::string_view text) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error) &&
      !absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected a date (2026-11-01) or RFC 3339 (2026-11-01T00:00:00Z)"));
  }
  google::protobuf::Timestamp out;
  out.set_seconds(absl::ToUnixSeconds(t));
  out.set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(absl::ToUnixSeconds(t)))));
  return out;
}

absl::StatusOr<v1::GetUsageReportRequest> UsageRequestFromParams(
    const std::multimap<std::string, std::string>& params) {
  std::map<std::string, std::string> one;
  for (const auto& [key, value] : params) {
    if (key != "from" && key != "to" && key != "period" && key != "by" && key != "tenant" &&
        key != "project" && key != "cluster") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter (known: from, to, period, "
                       "by, tenant, project, cluster)"));
    }
    if (value.size() > kMaxParamBytes) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": at most ", kMaxParamBytes, " bytes"));
    }
    if (!one.emplace(key, value).second) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": given twice"));
    }
  }
  v1::GetUsageReportRequest request;
  if (!one.contains("from")) return absl::InvalidArgumentError("from: required");
  if (!one.contains("to")) return absl::InvalidArgumentError("to: required");
  ASSIGN_OR_RETURN(*request.mutable_start_time(), ReportTimeFromText("from", one["from"]));
  ASSIGN_OR_RETURN(*request.mutable_end_time(), ReportTimeFromText("to", one["to"]));
  const std::string period = one.contains("period") ? one["period"] : "day";
  const std::optional<ReportPeriod> p = ParseReportPeriod(period);
  if (!p) return absl::InvalidArgumentError("period: whole, day, week or month");
  request.set_period(static_cast<v1::ReportPeriod>(static_cast<int>(*p)));
  if (one.contains("by") && !one["by"].empty()) {
    for (absl::string_view name : absl::StrSplit(one["by"], ',')) {
      const std::optional<ReportDimension> d = ParseReportDimension(name);
      if (!d) {
        return absl::InvalidArgumentError(
            "by: tenant, project, cluster, gpu_model, mig_profile, workload_class or capacity");
      }
      request.add_group_by(static_cast<v1::ReportDimension>(static_cast<int>(*d) + 1));
    }
  }
  request.set_tenant(one["tenant"]);
  request.set_project(one["project"]);
  request.set_cluster(one["cluster"]);
  return request;
}

HttpAnswer UsageCsvOverHttp(const ApiContext& ctx, absl::string_view authorization,
                            const std::multimap<std::string, std::string>& params) {
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(authorization, kBearer)) {
    return Refusal(absl::UnauthenticatedError("Authorization: Bearer token required"));
  }
  absl::StatusOr<auth::Principal> who =
      ctx.authn->AuthenticateToken(authorization.substr(kBearer.size()));
  if (!who.ok()) return Refusal(who.status());
  // `view`: the usage lines (the default) or the idle guarantees of the same report.
  std::multimap<std::string, std::string> rest = params;
  bool guarantees = false;
  if (rest.count("view") > 1) return Refusal(absl::InvalidArgumentError("view: given twice"));
  if (auto it = rest.find("view"); it != rest.end()) {
    if (it->second != "usage" && it->second != "guarantees") {
      return Refusal(absl::InvalidArgumentError("view: usage or guarantees"));
    }
    guarantees = it->second == "guarantees";
    rest.erase(it);
  }
  absl::StatusOr<v1::GetUsageReportRequest> request = UsageRequestFromParams(rest);
  if (!request.ok()) return Refusal(request.status());
  absl::StatusOr<UsageQuery> query = UsageQueryFromProto(*request);
  if (!query.ok()) return Refusal(query.status());
  absl::StatusOr<UsageReportResult> report = ctx.plane->UsageReport(*who, *std::move(query));
  if (!report.ok()) return Refusal(report.status());
  const v1::GetUsageReportResponse response = UsageReportToProto(*report);
  return HttpAnswer{200, "text/csv; charset=utf-8",
                    guarantees ? IdleGuaranteeCsv(response) : UsageReportCsv(*request, response)};
}

}  // namespace gpufed::api
