#include "api/limits.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"

namespace gpufed::api {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// About how many bytes `field` of `m` takes: strings and messages exactly, scalars roughly (they
// never hold a large request on their own: a repeated scalar is counted by its elements).
size_t FieldBytes(const Message& m, const FieldDescriptor* field) {
  const Reflection* r = m.GetReflection();
  if (!field->is_repeated()) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      return r->GetMessage(m, field).ByteSizeLong();
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      std::string scratch;
      return r->GetStringReference(m, field, &scratch).size();
    }
    return 8;
  }
  const int n = r->FieldSize(m, field);
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      bytes += r->GetRepeatedMessage(m, field, i).ByteSizeLong();
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      std::string scratch;
      bytes += r->GetRepeatedStringReference(m, field, i, &scratch).size();
    } else {
      bytes += 8;
    }
  }
  return bytes;
}

// The path of the field that holds most of `m`: down through singular message fields, ending
// at a string, a repeated field or a map. "" (with *unknown) when fields this server does not
// know hold the most.
std::string LargestField(const Message& m, const std::string& path, bool* unknown) {
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  const FieldDescriptor* largest = nullptr;
  size_t largest_bytes = r->GetUnknownFields(m).SpaceUsedExcludingSelfLong();
  for (const FieldDescriptor* f : fields) {
    const size_t bytes = FieldBytes(m, f);
    if (bytes > largest_bytes) {
      largest = f;
      largest_bytes = bytes;
    }
  }
  if (largest == nullptr) {
    *unknown = true;
    return path;
  }
  std::string here = path.empty() ? largest->name() : absl::StrCat(path, ".", largest->name());
  if (!largest->is_repeated() && largest->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return LargestField(r->GetMessage(m, largest), here, unknown);
  }
  return here;
}

}  // namespace

std::string CallerKey(const auth::Principal& who) {
  if (who.token_id != 0) return absl::StrCat("token:", who.token_id);
  return absl::StrCat("subject:", who.subject);
}

size_t MaxRequestBytes(const google::protobuf::Message& request) {
  if (request.GetDescriptor()->full_name() == "gpufed.v1.ApplyClustersRequest") {
    return kMaxApplyClustersRequestBytes;
  }
  return kMaxRequestBytes;
}

absl::Status CheckRequestSize(const google::protobuf::Message& request) {
  const size_t max = MaxRequestBytes(request);
  const size_t bytes = request.ByteSizeLong();
  if (bytes <= max) return absl::OkStatus();
  bool unknown = false;
  std::string path = LargestField(request, "", &unknown);
  if (path.empty()) path = "request";
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": request too large: ", bytes, " bytes, at most ", max, " for ",
                   request.GetDescriptor()->name(),
                   unknown ? " (most of it in fields this server does not know)" : ""));
}

}  // namespace gpufed::api
