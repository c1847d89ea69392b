#ifndef GPUFED_API_REVOCATIONS_H_
#define GPUFED_API_REVOCATIONS_H_

#include <cstdint>

#include "api/authn.h"
#include "api/watch_hub.h"
#include "federation/ports.h"

namespace gpufed::api {

// What the transport holds of a revoked API token: the authenticator's remembered answer (its
// next use asks the store, which refuses it) and its Watch streams (ended, UNAUTHENTICATED).
// Agent connections are the control plane's own to close. Thread-safe; never blocks.
class Revocations final : public CredentialSink {
 public:
  Revocations(Authenticator* authn, WatchHub* watch) : authn_(authn), watch_(watch) {}

  void Revoked(int64_t token_id) override {
    authn_->Forget(token_id);
    watch_->EndCredential(token_id);
  }

 private:
  Authenticator* const authn_;
  WatchHub* const watch_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_REVOCATIONS_H_
