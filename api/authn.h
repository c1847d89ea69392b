#ifndef GPUFED_API_AUTHN_H_
#define GPUFED_API_AUTHN_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/jwt.h"
#include "auth/principal.h"
#include "federation/clock.h"
#include "federation/store.h"
#include "grpcpp/server_context.h"

namespace gpufed::api {

// The principal of a verified JWT (docs/security.md#jwts-from-an-identity-provider), given the
// bindings of its subject (TenantStore::ListSubjectRoleBindings). The scope is the token's
// tenant (and project) claim when it carries one, else the scope of the subject's only binding.
// The role is the role claim, capped by the narrowest binding that covers the scope (that
// scope's, its tenant's, the platform's), or without a role claim that binding's role. Refused,
// UNAUTHENTICATED "invalid token": a subject that is no valid subject; a role claim that is no
// role, or agent; no role claim and no binding covering the scope; no scope claimed and no or
// several bindings; a role from a claim at the platform with no platform binding; and any role
// and scope no binding could hold (platform-admin at a tenant, a project without its tenant).
// token_id is 0.
absl::StatusOr<auth::Principal> PrincipalFromJwt(const auth::JwtClaims& claims,
                                                 const std::vector<RoleBinding>& bindings);

// Establishes who is calling from the `authorization: Bearer <token>` metadata. Tokens are looked
// up by hash in the store; answers are cached briefly so a busy client does not cost a query per
// call (a revoked token stops working within kCacheTtl). With a JWT verifier, a bearer value
// shaped like a JWT (auth::LooksLikeJwt) is verified by it instead and mapped by
// PrincipalFromJwt; its principal is cached until min(exp, kCacheTtl). Thread-safe.
class Authenticator {
 public:
  static constexpr std::chrono::seconds kCacheTtl{10};

  // With `certificates`, agents may authenticate with a cluster certificate (AuthenticateAgent).
  Authenticator(TenantStore* store, const Clock* clock,
                ClusterCertificateStore* certificates = nullptr)
      : store_(store), clock_(clock), certificates_(certificates) {}

  // UNAUTHENTICATED without a valid token; UNAVAILABLE if the store cannot be asked. May block on
  // the store: call it from an executor thread.
  absl::StatusOr<auth::Principal> Authenticate(const grpc::ServerContextBase& context);
  absl::StatusOr<auth::Principal> AuthenticateToken(absl::string_view token);
  // The caller, if its token is in the cache and valid; never blocks. nullopt: ask
  // Authenticate (on an executor thread).
  std::optional<auth::Principal> Cached(const grpc::ServerContextBase& context);
  // Drops what is remembered of token `token_id` (it was revoked): its next use asks the store.
  void Forget(int64_t token_id);
  // From now on, bearer values shaped like JWTs are verified by `verifier`; nullptr: they are
  // refused like any unknown token. Tokens verified by a previous verifier stay cached (at most
  // kCacheTtl).
  void SetJwtVerifier(std::shared_ptr<const auth::JwtVerifier> verifier);

  // Whether the caller presented a client certificate (the TLS handshake verified it against the
  // cluster CA: the listener asks for none otherwise). Never blocks.
  static bool HasClientCertificate(const grpc::ServerContextBase& context);
  // The agent stream's caller: with a client certificate, the agent of the cluster it names,
  // when the store has that certificate for that cluster, unrevoked and unexpired (asked every
  // time, never cached: a stream authenticates once, and a revocation must hold at once);
  // Principal::certificate_serial is set. Without one, Authenticate (the bearer token).
  // UNAUTHENTICATED "client certificate not accepted", whatever the reason, for a certificate
  // that names no cluster or is not on record; UNAVAILABLE if the store cannot be asked. May
  // block on the store: call it from an executor thread.
  absl::StatusOr<auth::Principal> AuthenticateAgent(const grpc::ServerContextBase& context);
  // From now on AuthenticateAgent refuses a caller without a client certificate
  // (UNAUTHENTICATED), whatever its token. Call before serving.
  void RequireAgentCertificates() { require_agent_certificates_ = true; }

 private:
  // The token of the `authorization: Bearer` metadata; UNAUTHENTICATED without one.
  static absl::StatusOr<absl::string_view> BearerToken(const grpc::ServerContextBase& context);
  std::shared_ptr<const auth::JwtVerifier> jwt_verifier() const;

  struct Entry {
    std::optional<auth::Principal> principal;  // nullopt: known bad
    MonotonicTime expires;
  };
  TenantStore* const store_;
  const Clock* const clock_;
  ClusterCertificateStore* const certificates_;
  bool require_agent_certificates_ = false;  // set before serving, read-only after
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> cache_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const auth::JwtVerifier> jwt_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed::api

#endif  // GPUFED_API_AUTHN_H_
