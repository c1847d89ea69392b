#ifndef GPUFED_TESTS_FUZZ_RPC_HARNESS_H_
#define GPUFED_TESTS_FUZZ_RPC_HARNESS_H_

// One fuzz target per gRPC service of gpufed.v1: the first input byte chooses the RPC (its
// index in the service, modulo the method count), the rest is the request as it arrives on the
// wire. It is parsed the way the server parses it (api::ParseMessage, gRPC's deserialiser with
// the server's error wording) and then put through what the handler, and the use case before it
// touches a store, do with it: conversion (api/convert.h) and validation (federation/). Seed
// files are written the same way (make_seeds.cc).
//
// A table must name every method of its service: RpcTable aborts at start-up otherwise, so a new
// RPC without a fuzz entry fails `make fuzz` (and the short pass of `make test`).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace gpufed::fuzz {

struct Rpc {
  std::string method;  // as in the .proto, e.g. "Submit"
  std::unique_ptr<google::protobuf::Message> prototype;
  std::function<void(const google::protobuf::Message&)> run;
};

template <typename Request, typename Fn>
Rpc Unary(std::string method, Fn fn) {
  return Rpc{std::move(method), std::make_unique<Request>(),
             [fn](const google::protobuf::Message& m) { fn(static_cast<const Request&>(m)); }};
}

class RpcTable {
 public:
  // Aborts unless `rpcs` has exactly one entry per method of the service named `service` (e.g.
  // "gpufed.v1.WorkloadService", as the generated descriptor pool knows it), each taking the
  // method's input type. Entries are kept in the service's method order.
  RpcTable(const std::string& service, std::vector<Rpc> rpcs);

  // Runs one input: selector byte, then the serialised request.
  void Run(const uint8_t* data, size_t size) const;

  // Runs `bytes` as a request of the method at `index` (no selector byte).
  void RunRequest(size_t index, const uint8_t* data, size_t size) const;

 private:
  std::vector<Rpc> rpcs_;
};

}  // namespace gpufed::fuzz

#endif  // GPUFED_TESTS_FUZZ_RPC_HARNESS_H_
