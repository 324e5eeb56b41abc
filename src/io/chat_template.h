// Chat templates as transformers' apply_chat_template renders them: a Jinja2 engine (the subset
// real templates use, in the sandbox transformers builds), the variables apply_chat_template
// passes, the {% generation %} spans, and loading a model directory's template.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace headroom {

// A template that does not parse, or fails while rendering (a type error, an undefined value
// used, a sandbox refusal, a limit): "<origin>:<line>:<column>: <what>" (column 0 when unknown).
class ChatTemplateError : public ValueError {
 public:
  ChatTemplateError(std::string origin, int line, int column, const std::string& what);
  const std::string& origin() const { return origin_; }
  int line() const { return line_; }

 private:
  std::string origin_;
  int line_;
};

// The template called raise_exception(message): message() is the template's own text.
class ChatTemplateRaised : public ChatTemplateError {
 public:
  ChatTemplateRaised(std::string origin, int line, std::string message);
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Note [Chat template limits]
// Templates come from strangers (any model repository), so everything a template can make grow
// is bounded, each limit with its own error naming it: how deep expressions and blocks nest
// (the parser and the renderer recurse), how deep macros call each other, how long the output
// and any one string get, how many items a list or dict holds, how deep values nest, and how
// many loop iterations one rendering runs. jinja2 bounds ranges (100000) and, through Python's
// recursion limit, nesting; the rest it leaves to the process.
struct ChatTemplateLimits {
  int max_nesting = 128;      // blocks inside blocks, parentheses inside parentheses
  int max_macro_depth = 128;  // macros calling macros
  int max_value_depth = 256;  // lists and dicts inside each other
  size_t max_output_bytes = size_t{64} << 20;  // the rendering, and any string made on the way
  size_t max_items = size_t{1} << 22;          // items of one list or dict
  int64_t max_loop_iterations = 10'000'000;    // all loops of one rendering together
};

struct ChatTemplateRendering {
  std::string text;
  // [start, end) byte offsets into text of what each {% generation %} block rendered, in the
  // order the blocks finished (transformers' AssistantTracker counts characters; these count
  // UTF-8 bytes, what tokenizers' offsets count).
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

// A parsed template. Rendering is const and keeps no state between calls.
class ChatTemplate {
 public:
  // Parses `source`; `origin` (a file name) stands for it in errors. ChatTemplateError on a
  // syntax error, naming the line, column and what was expected.
  ChatTemplate(std::string source, std::string origin, ChatTemplateLimits limits = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  const std::string& origin() const;
  const std::string& source() const;

  // Renders with exactly `variables` (a JSON object) as the template's context, jinja2's
  // template.render(**variables).
  ChatTemplateRendering render(const nlohmann::ordered_json& variables) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What apply_chat_template(conversation, tools=..., documents=..., add_generation_prompt=...,
// **kwargs) gets.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // a list of objects
  nlohmann::ordered_json tools;      // null when not given, else a list of JSON schemas
  nlohmann::ordered_json documents;  // null when not given, else a list of objects
  bool add_generation_prompt = false;
  // The tokenizer's special_tokens_map (bos_token, eos_token, ...: read_special_tokens).
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  // Further template variables (date_string, enable_thinking, ...); they win over special tokens.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// apply_chat_template(..., tokenize=False) with the spans return_assistant_tokens_mask tracks:
// as transformers 5 does, each message's keys holding null are dropped and a reasoning field
// (reasoning_content, thinking or reasoning) is copied to "thinking" (first) and
// "reasoning_content" (last). ValueError for an empty conversation or a message that is not an
// object.
ChatTemplateRendering apply_chat_template(const ChatTemplate& chat_template,
                                          const ChatTemplateInputs& inputs);

// The chat template of a model directory, as transformers picks it: `override_path` when given
// (a --chat_template file); else additional_chat_templates/<name>.jinja for a requested name;
// else chat_template.jinja; else tokenizer_config.json's "chat_template", a string or a list of
// {"name", "template"}: with a list, the requested name, else "tool_use" when tools are given,
// else "default", else a ValueError naming the file and the names it has. No template is a
// ValueError naming the directory.
struct ChatTemplateSource {
  std::string text;
  std::string origin;  // the file, or "<file>:chat_template[<name>]"
};
ChatTemplateSource load_chat_template(
    const std::string& model_dir, const std::optional<std::string>& name = std::nullopt,
    bool has_tools = false, const std::optional<std::string>& override_path = std::nullopt);

// The tokenizer's special_tokens_map as templates see it: bos_token, eos_token, unk_token,
// sep_token, pad_token, cls_token, mask_token from tokenizer_config.json (a string or an
// AddedToken object's "content"), those it lacks from special_tokens_map.json; unset ones left
// out. An empty object when the directory has neither file.
nlohmann::ordered_json read_special_tokens(const std::string& model_dir);

}  // namespace headroom
