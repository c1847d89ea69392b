#include "tests/fuzz/rpc_harness.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "api/parse_errors.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "tests/fuzz/fuzz_check.h"

namespace gpufed::fuzz {

RpcTable::RpcTable(const std::string& service_name, std::vector<Rpc> rpcs) {
  // Protobuf's log handler as the server installs it: an invalid UTF-8 string names its field
  // instead of writing a log line.
  api::InstallParseErrorCapture();
  const google::protobuf::ServiceDescriptor* found_service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name);
  Check(found_service != nullptr, "no service " + service_name);
  const google::protobuf::ServiceDescriptor& service = *found_service;
  for (int i = 0; i < service.method_count(); ++i) {
    const google::protobuf::MethodDescriptor& method = *service.method(i);
    bool found = false;
    for (Rpc& rpc : rpcs) {
      if (rpc.method != method.name() || rpc.prototype == nullptr) continue;
      Check(rpc.prototype->GetDescriptor() == method.input_type(),
            absl::StrCat(service.full_name(), ".", method.name(), ": the fuzz entry takes ",
                         rpc.prototype->GetDescriptor()->full_name(), ", the RPC ",
                         method.input_type()->full_name()));
      rpcs_.push_back(std::move(rpc));
      found = true;
      break;
    }
    Check(found, absl::StrCat(service.full_name(), ".", method.name(),
                              ": no fuzz entry (tests/fuzz: add it to the service's table)"));
  }
  Check(rpcs_.size() == rpcs.size(),
        absl::StrCat(service.full_name(), ": the fuzz table names a method the service lacks"));
}

void RpcTable::Run(const uint8_t* data, size_t size) const {
  if (size == 0) return;
  RunRequest(data[0] % rpcs_.size(), data + 1, size - 1);
}

void RpcTable::RunRequest(size_t index, const uint8_t* data, size_t size) const {
  const Rpc& rpc = rpcs_[index];
  std::unique_ptr<google::protobuf::Message> request(rpc.prototype->New());
  grpc::Slice slice(data, size);
  grpc::ByteBuffer buffer(&slice, 1);
  // What a client whose request does not parse is told: INVALID_ARGUMENT naming the field.
  if (!OkOrInvalid(api::ParseMessage(&buffer, request.get()), rpc.method)) return;
  rpc.run(*request);
}

}  // namespace gpufed::fuzz
