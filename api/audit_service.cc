#include "api/audit_service.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "api/workload_service.h"
#include "federation/status_macros.h"

namespace gpufed::api {
namespace {

v1::AuditEvent AuditEventToProto(const AuditEvent& e) {
  v1::AuditEvent out;
  out.set_id(e.id);
  *out.mutable_time() = ToProto(e.time);
  out.set_actor(e.actor);
  out.set_tenant(e.tenant);
  out.set_project(e.project);
  out.set_action(e.action);
  out.set_object(e.object);
  out.set_outcome(e.outcome);
  out.set_reason(e.reason);
  out.set_detail(e.detail);
  out.set_prev_hash(e.prev_hash);
  out.set_hash(e.hash);
  return out;
}

v1::AuditBreakKind BreakKindToProto(AuditBreak::Kind kind) {
  switch (kind) {
    case AuditBreak::Kind::kEdited:
      return v1::AUDIT_BREAK_KIND_EDITED;
    case AuditBreak::Kind::kDeleted:
      return v1::AUDIT_BREAK_KIND_DELETED;
    case AuditBreak::Kind::kInserted:
      return v1::AUDIT_BREAK_KIND_INSERTED;
  }
  return v1::AUDIT_BREAK_KIND_UNSPECIFIED;
}

}  // namespace

grpc::ServerUnaryReactor* AuditServiceImpl::ListAuditEvents(
    grpc::CallbackServerContext* context, const v1::ListAuditEventsRequest* request,
    v1::ListAuditEventsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 AuditFilter filter;
                 if (!request->tenant().empty()) filter.tenant = request->tenant();
                 filter.actor = request->actor();
                 filter.object = request->object();
                 if (filter.actor.size() > kMaxAuditFieldBytes) {
                   return absl::InvalidArgumentError("actor: at most 256 bytes");
                 }
                 if (filter.object.size() > kMaxAuditFieldBytes) {
                   return absl::InvalidArgumentError("object: at most 256 bytes");
                 }
                 if (request->has_since()) {
                   ASSIGN_OR_RETURN(filter.since, CheckedFromProto("since", request->since()));
                 }
                 if (request->has_until()) {
                   ASSIGN_OR_RETURN(filter.until, CheckedFromProto("until", request->until()));
                 }
                 filter.page_size = request->page_size();
                 if (!request->page_token().empty() &&
                     (!absl::SimpleAtoi(request->page_token(), &filter.before_id) ||
                      filter.before_id <= 0)) {
                   return absl::InvalidArgumentError("page_token: not a token this server issued");
                 }
                 ASSIGN_OR_RETURN(AuditListing page,
                                  ctx_.plane->ListAuditEvents(who, std::move(filter)));
                 for (const AuditEvent& e : page.events) {
                   *response->add_events() = AuditEventToProto(e);
                 }
                 if (page.next_before_id > 0) {
                   response->set_next_page_token(absl::StrCat(page.next_before_id));
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* AuditServiceImpl::VerifyAudit(grpc::CallbackServerContext* context,
                                                        const v1::VerifyAuditRequest* request,
                                                        v1::VerifyAuditResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(AuditVerification v, ctx_.plane->VerifyAudit(who));
                 response->set_rows(v.rows);
                 for (const AuditBreak& b : v.breaks) {
                   v1::AuditBreak* out = response->add_breaks();
                   out->set_id(b.id);
                   out->set_kind(BreakKindToProto(b.kind));
                 }
                 response->set_head_id(v.head_id);
                 response->set_head_hash(v.head_hash);
                 return absl::OkStatus();
               });
}

}  // namespace gpufed::api
