// gpufedctl sim run's scenario file (cli/scenario_yaml.h).

#include <cstddef>
#include <cstdint>
#include <string>

#include "cli/scenario_yaml.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  gpufed::fuzz::OkOrInvalid(gpufed::cli::ParseScenario("fuzz.yaml", text).status(),
                            "ParseScenario");
  return 0;
}
