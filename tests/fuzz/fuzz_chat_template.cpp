// Chat templates from strangers: the input is a template (and, after a "\n#vars\n" line, the JSON
// object of its variables), parsed and rendered under small limits; rejections must be typed
// errors (syntax, runtime, raise_exception, a limit), never a crash or a hang.
#include "core/json_file.h"
#include "fuzz_support.h"
#include "io/chat_template.h"

namespace {

const nlohmann::ordered_json& default_variables() {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Zürich? 😀"},
      {"role": "assistant", "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
      {"role": "tool", "content": "21.5", "tool_call_id": "call12345"},
      {"role": "assistant", "content": [{"type": "text", "text": "Warm."}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "documents": null, "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>"})");
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto [source, vars_text] = headroom::fuzz::split_input(input, "\n#vars\n");
  headroom::fuzz::expect_typed_errors([&, source = source, vars_text = vars_text] {
    headroom::ChatTemplateLimits limits;
    // Small enough that the worst a template can do (a loop copying the longest string each
    // time) stays well inside libFuzzer's timeout.
    limits.max_loop_iterations = 20000;
    limits.max_output_bytes = size_t{1} << 16;
    limits.max_items = 1 << 12;
    const headroom::ChatTemplate t(std::string(source), "fuzz.jinja", limits);
    if (vars_text.empty()) {
      (void)t.render(default_variables());
    } else {
      (void)t.render(headroom::parse_ordered_json(vars_text, "vars.json"));
    }
  });
  return 0;
}
