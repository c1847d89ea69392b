#include "api/authn.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "auth/cluster_ca.h"
#include "auth/policy.h"
#include "auth/token.h"
#include "federation/validation.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"

namespace gpufed::api {
namespace {

// Opaque API tokens are 43 characters; anything far longer is not one. JWTs may be longer.
constexpr size_t kMaxOpaqueTokenBytes = 512;

// The longest bearer value worth hashing for a cache lookup.
size_t MaxTokenBytes(absl::string_view token) {
  return auth::LooksLikeJwt(token) ? auth::JwtVerifier::kMaxTokenBytes : kMaxOpaqueTokenBytes;
}

// The subject's binding at `tenant`/`project`; nullptr: none.
const RoleBinding* BindingAt(const std::vector<RoleBinding>& bindings, absl::string_view tenant,
                             absl::string_view project) {
  for (const RoleBinding& b : bindings) {
    if (b.tenant == tenant && b.project == project) return &b;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<auth::Principal> PrincipalFromJwt(const auth::JwtClaims& claims,
                                                 const std::vector<RoleBinding>& bindings) {
  // One answer for every refusal, as for opaque tokens.
  const absl::Status refused = absl::UnauthenticatedError("invalid token");
  if (!ValidateSubject(claims.subject).ok()) return refused;
  std::optional<auth::Role> claimed;
  if (claims.role) {
    claimed = auth::ParseRole(*claims.role);
    // Agents are clusters, identified by their own credentials: never by an identity provider.
    if (!claimed || *claimed == auth::Role::kAgent) return refused;
  }
  auth::Principal who;
  who.subject = claims.subject;
  const RoleBinding* binding = nullptr;
  if (claims.tenant) {
    // The token names its scope: the narrowest binding covering it bounds what it may do there.
    who.tenant = *claims.tenant;
    who.project = claims.project.value_or("");
    binding = BindingAt(bindings, who.tenant, who.project);
    if (binding == nullptr && !who.project.empty()) binding = BindingAt(bindings, who.tenant, "");
    if (binding == nullptr) binding = BindingAt(bindings, "", "");
  } else {
    if (claims.project) return refused;  // a project without its tenant
    // Several bindings and no scope claimed: which one the caller meant is not ours to guess.
    if (bindings.size() != 1) return refused;
    binding = &bindings.front();
    who.tenant = binding->tenant;
    who.project = binding->project;
  }
  if (binding != nullptr) {
    who.role = claimed && !auth::Outranks(*claimed, binding->role) ? *claimed : binding->role;
  } else if (claimed && !who.tenant.empty()) {
    // No binding to bound it: the identity provider's word holds, inside one tenant only.
    who.role = *claimed;
  } else {
    return refused;
  }
  // A role and scope no binding could hold (platform-admin at a tenant, viewer of a tenant's
  // project without the tenant...) are no principal either.
  RoleBinding shape;
  shape.subject = who.subject;
  shape.role = who.role;
  shape.tenant = who.tenant;
  shape.project = who.project;
  if (!ValidateRoleBinding(shape).ok()) return refused;
  return who;
}

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
  if (!token.ok() || token->empty() || token->size() > MaxTokenBytes(*token)) return std::nullopt;
  const std::string hash = auth::HashToken(*token);
  const MonotonicTime now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(hash);
  if (it == cache_.end() || it->second.expires <= now) return std::nullopt;
  return it->second.principal;  // nullopt for a known bad token: Authenticate says why
}

void Authenticator::SetJwtVerifier(std::shared_ptr<const auth::JwtVerifier> verifier) {
  absl::MutexLock lock(&mu_);
  jwt_ = std::move(verifier);
}

std::shared_ptr<const auth::JwtVerifier> Authenticator::jwt_verifier() const {
  absl::MutexLock lock(&mu_);
  return jwt_;
}

absl::StatusOr<auth::Principal> Authenticator::AuthenticateToken(absl::string_view token) {
  const std::shared_ptr<const auth::JwtVerifier> jwt =
      auth::LooksLikeJwt(token) ? jwt_verifier() : nullptr;
  const size_t max_bytes =
      jwt != nullptr ? auth::JwtVerifier::kMaxTokenBytes : kMaxOpaqueTokenBytes;
  if (token.empty() || token.size() > max_bytes) return absl::UnauthenticatedError("invalid token");
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
  Entry entry;
  // When the token stops being valid (wall clock); nullopt: it says nothing of that.
  std::optional<Timestamp> expire_time;
  if (jwt != nullptr) {
    absl::StatusOr<auth::JwtClaims> claims = jwt->Verify(token, absl::FromChrono(clock_->Now()));
    if (claims.ok()) {
      absl::StatusOr<std::vector<RoleBinding>> bindings =
          store_->ListSubjectRoleBindings(claims->subject);
      if (!bindings.ok()) return bindings.status();
      absl::StatusOr<auth::Principal> principal = PrincipalFromJwt(*claims, *bindings);
      if (principal.ok()) entry.principal = *std::move(principal);
      expire_time = absl::ToChronoTime(claims->expire_time);
    }
  } else {
    absl::StatusOr<TokenRecord> record = store_->LookupToken(hash);
    if (record.ok()) {
      auth::Principal who;
      who.subject = record->subject;
      who.role = record->role;
      who.tenant = record->tenant;
      who.project = record->project;
      who.cluster = record->cluster;
      who.token_id = record->id;
      entry.principal = std::move(who);
      expire_time = record->expire_time;
    } else if (!absl::IsNotFound(record.status())) {
      return record.status();
    }
  }
  if (entry.principal) {
    entry.expires = now + kCacheTtl;
    // A token about to expire is not remembered past its expiry.
    if (expire_time) {
      const auto left = *expire_time - clock_->Now();
      if (left < kCacheTtl) {
        entry.expires = now + std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0));
      }
    }
  } else {
    entry.expires = now + std::chrono::seconds(1);  // bad tokens: brief negative cache
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
