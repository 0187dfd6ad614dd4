// libFuzzer target: the YAML search configuration (parse, defaults, KBMOD keys, validation) and
// their conversion into a SearchConfig.
#include <cstdint>
#include <string>

#include "shiftstack/error.hpp"
#include "shiftstack/io/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const shiftstack::io::SearchConfig config = shiftstack::io::parse_config(text, "fuzz.yaml");
    (void)config;
  } catch (const shiftstack::Error&) {
  }
  return 0;
}
