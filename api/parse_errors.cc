#include "api/parse_errors.h"

#include <deque>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "api/status.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace gpufed::api {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The field whose invalid UTF-8 failed the last parse on this thread; "" when none.
thread_local std::string utf8_failure;

google::protobuf::LogHandler* previous_handler = nullptr;

void CaptureUtf8Failures(google::protobuf::LogLevel level, const char* filename, int line,
                         const std::string& message) {
  constexpr absl::string_view kPrefix = "String field '";
  constexpr absl::string_view kParsing = "' contains invalid UTF-8 data when parsing";
  if (level == google::protobuf::LOGLEVEL_ERROR && absl::StartsWith(message, kPrefix)) {
    const size_t end = message.find(kParsing.data(), 0, kParsing.size());
    if (end != std::string::npos) {
      utf8_failure = message.substr(kPrefix.size(), end - kPrefix.size());
      return;
    }
  }
  if (previous_handler != nullptr) previous_handler(level, filename, line, message);
}

// What a client is told about a message of type `type` that did not parse; `field` is the full
// name of the string field that held invalid UTF-8, "" when not known.
absl::Status Unparsable(const google::protobuf::Descriptor& type, const std::string& field) {
  const std::string path = field.empty() ? "" : FieldPath(type, field);
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("request: not a valid ", type.full_name()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not valid UTF-8 (string fields must be UTF-8)"));
}

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(const google::protobuf::Descriptor* request) : request_(request) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      failed_ = true;
      field_ = std::exchange(utf8_failure, "");
    }
    if (failed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      methods->ModifySendStatus(ToGrpcStatus(Unparsable(*request_, field_)));
    }
    methods->Proceed();
  }

 private:
  const google::protobuf::Descriptor* request_;
  bool failed_ = false;
  std::string field_;
};

}  // namespace

void InstallParseErrorCapture() {
  static std::once_flag once;
  std::call_once(once,
                 [] { previous_handler = google::protobuf::SetLogHandler(CaptureUtf8Failures); });
}

grpc::experimental::Interceptor* ParseErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
  // "/gpufed.v1.WorkloadService/Submit" -> "gpufed.v1.WorkloadService.Submit"
  absl::string_view method = info->method();
  if (!absl::ConsumePrefix(&method, "/")) return nullptr;
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
          absl::StrReplaceAll(method, {{"/", "."}}));
  if (descriptor == nullptr) return nullptr;
  // The request is parsed after this, on this thread: a failure noted for an earlier parse
  // (a stream's message, say) must not be blamed on this one.
  utf8_failure.clear();
  return new ParseErrorInterceptor(descriptor->input_type());
}

absl::Status ParseMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message) {
  // A failure noted for an earlier parse on this thread must not be blamed on this one.
  utf8_failure.clear();
  const grpc::Status parsed =
      grpc::SerializationTraits<google::protobuf::Message>::Deserialize(buffer, message);
  if (parsed.ok()) return absl::OkStatus();
  return Unparsable(*message->GetDescriptor(), std::exchange(utf8_failure, ""));
}

std::string FieldPath(const google::protobuf::Descriptor& request, absl::string_view full_name) {
  struct Step {
    const google::protobuf::Descriptor* type;
    std::string path;
  };
  std::deque<Step> queue{{&request, ""}};
  std::set<const google::protobuf::Descriptor*> seen{&request};
  while (!queue.empty()) {
    Step step = std::move(queue.front());
    queue.pop_front();
    for (int i = 0; i < step.type->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* field = step.type->field(i);
      std::string path =
          step.path.empty() ? field->name() : absl::StrCat(step.path, ".", field->name());
      if (field->full_name() == full_name) return path;
      const google::protobuf::Descriptor* type = field->message_type();
      if (type == nullptr) continue;
      if (field->is_map()) {
        // The key and value of a map are named by the map.
        for (int k = 0; k < type->field_count(); ++k) {
          if (type->field(k)->full_name() == full_name) return path;
        }
      }
      if (seen.insert(type).second) queue.push_back({type, path});
    }
  }
  return "";
}

}  // namespace gpufed::api
