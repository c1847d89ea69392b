#include "api/authn.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "auth/cluster_ca.h"
#include "auth/token.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"

namespace gpufed::api {

absl::StatusOr<absl::string_view> Authenticator::BearerToken(
    const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWithIgnoreCase(value, kBearer)) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  return value.substr(kBearer.size());
}

absl::StatusOr<auth::Principal> Authenticator::Authenticate(
    const grpc::ServerContextBase& context) {
  absl::StatusOr<absl::string_view> token = BearerToken(context);
  if (!token.ok()) return token.status();
  return AuthenticateToken(*token);
}

bool Authenticator::HasClientCertificate(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && !auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty();
}

absl::StatusOr<auth::Principal> Authenticator::AuthenticateAgent(
    const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth_context = context.auth_context();
  const std::vector<grpc::string_ref> pems =
      auth_context != nullptr ? auth_context->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)
                              : std::vector<grpc::string_ref>{};
  if (pems.empty()) {
    if (require_agent_certificates_) {
      return absl::UnauthenticatedError("agents must present a cluster certificate");
    }
    return Authenticate(context);
  }
  // One answer for every refusal: a caller learns nothing of which certificates are on record.
  const absl::Status refused = absl::UnauthenticatedError("client certificate not accepted");
  if (certificates_ == nullptr) return refused;
  absl::StatusOr<auth::ClusterCertificateInfo> info =
      auth::ReadClusterCertificate(absl::string_view(pems.front().data(), pems.front().size()));
  if (!info.ok()) return refused;
  absl::StatusOr<ClusterCertificate> recorded =
      certificates_->LookupClusterCertificate(info->serial, info->cluster);
  if (absl::IsNotFound(recorded.status())) return refused;
  if (!recorded.ok()) return recorded.status();
  auth::Principal who;
  who.subject = absl::StrCat("cluster-certificate:", info->cluster);
  who.role = auth::Role::kAgent;
  who.cluster = info->cluster;
  who.certificate_serial = info->serial;
  return who;
}

std::optional<auth::Principal> Authenticator::Cached(const grpc::ServerContextBase& context) {
  absl::StatusOr<absl::string_view> token = BearerToken(context);
  if (!token.ok() || token->empty() || token->size() > 512) return std::nullopt;
  const std::string hash = auth::HashToken(*token);
  const MonotonicTime now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(hash);
  if (it == cache_.end() || it->second.expires <= now) return std::nullopt;
  return it->second.principal;  // nullopt for a known bad token: Authenticate says why
}

absl::StatusOr<auth::Principal> Authenticator::AuthenticateToken(absl::string_view token) {
  if (token.empty() || token.size() > 512) return absl::UnauthenticatedError("invalid token");
  const std::string hash = auth::HashToken(token);
  const MonotonicTime now = clock_->Monotonic();
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(hash);
    if (it != cache_.end() && it->second.expires > now) {
      if (!it->second.principal) return absl::UnauthenticatedError("invalid token");
      return *it->second.principal;
    }
  }
  absl::StatusOr<TokenRecord> record = store_->LookupToken(hash);
  Entry entry;
  if (record.ok()) {
    entry.principal = auth::Principal{record->subject, record->role,    record->tenant,
                                      record->project, record->cluster, record->id};
    entry.expires = now + kCacheTtl;
    // A token about to expire is not remembered past its expiry.
    if (record->expire_time) {
      const auto left = *record->expire_time - clock_->Now();
      if (left < kCacheTtl) {
        entry.expires = now + std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0));
      }
    }
  } else if (absl::IsNotFound(record.status())) {
    entry.expires = now + std::chrono::seconds(1);  // bad tokens: brief negative cache
  } else {
    return record.status();
  }
  absl::MutexLock lock(&mu_);
  if (cache_.size() > 100000) cache_.clear();  // bound memory under a flood of bad tokens
  cache_[hash] = entry;
  if (!entry.principal) return absl::UnauthenticatedError("invalid token");
  return *entry.principal;
}

void Authenticator::Forget(int64_t token_id) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(cache_, [token_id](const auto& entry) {
    return entry.second.principal && entry.second.principal->token_id == token_id;
  });
}

}  // namespace gpufed::api
