#ifndef GPUFED_API_PARSE_ERRORS_H_
#define GPUFED_API_PARSE_ERRORS_H_

// A unary request the server cannot parse gets, from gRPC's callback API, UNIMPLEMENTED with an
// empty message: the handler never runs. Proto3 refuses a string field holding invalid UTF-8
// while parsing, so that is what a client sending such a string sees. ParseErrorInterceptors
// turn that answer into INVALID_ARGUMENT naming the field, by its path in the request:
//   spec.name: not valid UTF-8 (string fields must be UTF-8; send bytes fields for raw data)
// and any other unparsable request into INVALID_ARGUMENT "request: not a valid <type>".
// Streams are not intercepted: gRPC reports a stream message that does not parse as a failed
// read, just like the client closing its side. A stream that must tell the two apart reads raw
// bytes (a raw callback method) and parses them with ParseMessage, which answers the same way.
//
// How the field is known: protobuf 3.21 logs "String field 'gpufed.v1.WorkloadSpec.name'
// contains invalid UTF-8 data when parsing ..." through its log handler, on the thread that
// parses, just before gRPC runs the interceptors on that thread. InstallParseErrorCapture()
// replaces the handler to note that field in a thread-local and drop the line (a hostile client
// would otherwise write one log line per request); every other message goes to the previous
// handler. protobuf 22+ logs through Abseil instead; there the field is not known and the answer
// is the "request: not a valid ..." form.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_interceptor.h"

namespace gpufed::api {

// Installs the protobuf log handler described above. Idempotent; call before the server starts
// (protobuf's SetLogHandler is not thread-safe).
void InstallParseErrorCapture();

// For grpc::ServerBuilder::experimental().SetInterceptorCreators. Acts on unary methods whose
// request type the generated descriptor pool knows; returns no interceptor for others.
class ParseErrorInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// Parses `buffer` into `message`, consuming the buffer. INVALID_ARGUMENT when it does not parse,
// in the interceptors' words: the path of the string field that is not valid UTF-8 when the
// capture names it, else "request: not a valid <type>". Call on the thread that owns `message`.
absl::Status ParseMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message);

// The path of the field named `full_name` (e.g. "gpufed.v1.WorkloadSpec.name") inside
// `request`, e.g. "spec.name"; a map's key or value is named by the map ("spec.run.env"). The
// first path breadth-first when the type occurs more than once; "" when it does not occur.
std::string FieldPath(const google::protobuf::Descriptor& request, absl::string_view full_name);

}  // namespace gpufed::api

#endif  // GPUFED_API_PARSE_ERRORS_H_
