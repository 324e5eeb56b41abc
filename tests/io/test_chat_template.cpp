// Chat templates against transformers' apply_chat_template: renderings, {% generation %} spans and
// raise_exception messages from tools/gen_chat_template_fixtures.py, compared byte for byte; and
// the loader, syntax errors and limits.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "core/error.h"
#include "core/json_file.h"
#include "io/chat_template.h"
#include "io_test_helpers.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::TempDir;
using io_test::write_bytes;
using Json = nlohmann::ordered_json;

std::string fixture(const std::string& name) {
  return str_cat(HEADROOM_FIXTURES_DIR, "/chat_template/", name);
}

Json load_fixture(const std::string& name) {
  return parse_ordered_json(read_text_file(fixture(name)), fixture(name));
}

std::vector<std::pair<size_t, size_t>> spans_of(const Json& j) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& s : j) out.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
  return out;
}

// One golden case: the rendering and spans, or the error transformers raised (for
// raise_exception, its message).
void check_case(const ChatTemplate& t, const ChatTemplateInputs& inputs, const Json& c,
                const std::string& label) {
  SCOPED_TRACE(label);
  if (c.contains("text")) {
    ChatTemplateRendering r;
    try {
      r = apply_chat_template(t, inputs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
      return;
    }
    EXPECT_EQ(r.text, c["text"].get<std::string>());
    EXPECT_EQ(r.generation_spans, spans_of(c["generation_spans"]));
    return;
  }
  const std::string expected = c["error"].get<std::string>();
  try {
    apply_chat_template(t, inputs);
    ADD_FAILURE() << "rendered, but transformers raised: " << expected;
  } catch (const ChatTemplateRaised& e) {
    EXPECT_EQ(c["error_kind"], "raise") << e.what();
    EXPECT_EQ(e.message(), expected);
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(c["error_kind"], "other") << e.what() << " (transformers: " << expected << ")";
  }
}

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, RendersAsTransformers) {
  const Json doc = load_fixture(GetParam() + ".json");
  const Json conversations = load_fixture("conversations.json");
  const ChatTemplate t(doc["template"].get<std::string>(), GetParam() + ".jinja");
  size_t rendered = 0;
  for (const Json& c : doc["cases"]) {
    const Json& conv = conversations[c["conversation"].get<std::string>()];
    ChatTemplateInputs inputs;
    inputs.messages = conv["messages"];
    if (conv.contains("tools")) inputs.tools = conv["tools"];
    inputs.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    inputs.special_tokens = doc["special_tokens"];
    inputs.kwargs = doc["kwargs"];
    check_case(t, inputs, c,
               str_cat(GetParam(), " / ", c["conversation"].get<std::string>(),
                       " / add_generation_prompt=", inputs.add_generation_prompt));
    rendered += c.contains("text");
  }
  EXPECT_GT(rendered, 0u);
}

INSTANTIATE_TEST_SUITE_P(Styles, ChatTemplateGolden,
                         ::testing::Values("llama3", "qwen2_5", "qwen3", "mistral", "gemma2",
                                           "gemma3", "phi3", "hermes", "features"));

TEST(ChatTemplate, SnippetsRenderAsJinja2) {
  const Json doc = load_fixture("snippets.json");
  Json vars = doc["variables"];
  ChatTemplateInputs inputs;
  inputs.messages = vars["messages"];
  inputs.add_generation_prompt = vars["add_generation_prompt"].get<bool>();
  inputs.special_tokens = doc["special_tokens"];
  for (const auto& [k, v] : vars.items())
    if (k != "messages" && k != "add_generation_prompt" && k != "tools") inputs.kwargs[k] = v;
  for (const Json& c : doc["cases"]) {
    const std::string name = c["name"].get<std::string>();
    try {
      const ChatTemplate t(c["template"].get<std::string>(), name);
      check_case(t, inputs, c, name);
    } catch (const ChatTemplateError& e) {
      ADD_FAILURE() << name << ": does not parse: " << e.what();
    }
  }
}

TEST(ChatTemplate, SyntaxErrorsNameOriginLineColumnAndExpectation) {
  expect_error<ChatTemplateError>(
      [] { ChatTemplate("line one\n  {% if %}x{% endif %}", "t.jinja"); },
      {"t.jinja:2:", "expected an expression"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{% for x in y %}", "t.jinja"); },
                                  {"t.jinja:1:", "unexpected end of template", "'endfor'"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{{ x | nosuchfilter }}", "t.jinja"); },
                                  {"no filter named 'nosuchfilter'"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{{ x is nosuchtest }}", "t.jinja"); },
                                  {"no test named 'nosuchtest'"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{% include 'x' %}", "t.jinja"); },
                                  {"'include' tag is not supported"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{% break %}", "t.jinja"); },
                                  {"outside of a loop"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{{ 'open", "t.jinja"); },
                                  {"unterminated string"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{# open", "t.jinja"); },
                                  {"missing end of comment"});
  expect_error<ChatTemplateError>([] { ChatTemplate("{{ (1 }}", "t.jinja"); }, {"t.jinja:1:"});
  expect_error<ChatTemplateError>([] { ChatTemplate("ok\n{{ 1 ]] }}", "t.jinja"); },
                                  {"t.jinja:2:", "unexpected ']'"});
  expect_error<ChatTemplateError>([] { ChatTemplate(std::string("\xff"), "t.jinja"); }, {"UTF-8"});
}

TEST(ChatTemplate, RuntimeErrorsNameLineAndOperation) {
  const ChatTemplate t("a\nb\n{{ 'x' + 1 }}", "t.jinja");
  expect_error<ChatTemplateError>([&] { t.render(Json::object()); }, {"t.jinja:3:", "concatenate"});
  const ChatTemplate raise("\n{{ raise_exception('no system role') }}", "r.jinja");
  try {
    raise.render(Json::object());
    ADD_FAILURE() << "did not throw";
  } catch (const ChatTemplateRaised& e) {
    EXPECT_EQ(e.message(), "no system role");
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("r.jinja:2:"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, LimitsBoundUntrustedTemplates) {
  ChatTemplateLimits small;
  small.max_loop_iterations = 1000;
  small.max_output_bytes = 4096;
  small.max_nesting = 16;
  small.max_macro_depth = 8;
  small.max_items = 100;
  small.max_value_depth = 8;
  auto fails = [&](const std::string& source, const std::string& piece) {
    SCOPED_TRACE(source);
    expect_error<ChatTemplateError>(
        [&] { ChatTemplate(source, "t.jinja", small).render(Json::object()); }, {piece});
  };
  fails("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
        "1000 iterations");
  fails("{% for i in range(90) %}{{ 'x' * 50 }}{% endfor %}", "4096 bytes");
  fails("{{ 'x' * 5000 }}", "4096 bytes");
  fails(
      "{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}",
      "4096 bytes");
  fails("{{ " + std::string(40, '(') + "1" + std::string(40, ')') + " }}", "nesting deeper");
  fails("{{ 1 " + std::string(100, '+') + " 1 }}", "nesting deeper");
  std::string chain = "{{ 0";
  for (int i = 0; i < 100; ++i) chain += " + 1";
  fails(chain + " }}", "nests deeper");
  fails("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "macro calls nest deeper");
  fails("{{ range(200) | list }}", "over the limit of 100");
  fails("{% set ns = namespace(v=[]) %}{% for i in range(20) %}{% set ns.v = [ns.v] %}{% endfor %}",
        "nest deeper");
  fails("{{ range(100001) }}", "Range too big");
}

TEST(ChatTemplate, NamespacesCannotHoldNamespaces) {
  const ChatTemplate t("{% set a = namespace(x=1) %}{% set b = namespace() %}{% set b.y = [a] %}",
                       "t.jinja");
  expect_error<ChatTemplateError>([&] { t.render(Json::object()); }, {"cannot hold a namespace"});
}

TEST(ChatTemplate, StrftimeNowIsLocalTime) {
  const ChatTemplate t("{{ strftime_now('%Y') }}", "t.jinja");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char year[16];
  std::strftime(year, sizeof(year), "%Y", &local);
  EXPECT_EQ(t.render(Json::object()).text, year);
}

TEST(ChatTemplate, ApplyDropsNullKeysAndAliasesReasoning) {
  const ChatTemplate t("{% for m in messages %}{{ m | tojson }}\n{% endfor %}", "t.jinja");
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(
      R"([{"role": "user", "content": "a", "name": null},
          {"role": "assistant", "content": "b", "reasoning": "r"}])");
  EXPECT_EQ(
      apply_chat_template(t, inputs).text,
      "{\"role\": \"user\", \"content\": \"a\"}\n"
      "{\"thinking\": \"r\", \"role\": \"assistant\", \"content\": \"b\", \"reasoning\": \"r\", "
      "\"reasoning_content\": \"r\"}\n");
  inputs.messages = Json::array();
  expect_error<ValueError>([&] { apply_chat_template(t, inputs); }, {"empty conversation"});
  inputs.messages = Json::parse(R"(["not an object"])");
  expect_error<ValueError>([&] { apply_chat_template(t, inputs); }, {"messages[0]"});
}

TEST(ChatTemplate, LoaderPrefersTheJinjaFile) {
  TempDir dir;
  write_bytes(dir.file("tokenizer_config.json"),
              R"({"chat_template": "from config", "bos_token": "<s>",
                  "eos_token": {"content": "</s>", "special": true}, "pad_token": null})");
  ChatTemplateSource s = load_chat_template(dir.str());
  EXPECT_EQ(s.text, "from config");
  EXPECT_EQ(s.origin, dir.file("tokenizer_config.json"));
  write_bytes(dir.file("chat_template.jinja"), "from file");
  s = load_chat_template(dir.str());
  EXPECT_EQ(s.text, "from file");
  EXPECT_EQ(s.origin, dir.file("chat_template.jinja"));
  write_bytes(dir.file("override.jinja"), "override");
  EXPECT_EQ(load_chat_template(dir.str(), std::nullopt, false, dir.file("override.jinja")).text,
            "override");
  const Json tokens = read_special_tokens(dir.str());
  EXPECT_EQ(tokens.dump(), R"({"bos_token":"<s>","eos_token":"</s>"})");
}

TEST(ChatTemplate, LoaderPicksANamedTemplate) {
  TempDir dir;
  write_bytes(dir.file("tokenizer_config.json"),
              R"({"chat_template": [{"name": "default", "template": "D"},
                                    {"name": "tool_use", "template": "T"},
                                    {"name": "rag", "template": "R"}]})");
  EXPECT_EQ(load_chat_template(dir.str()).text, "D");
  EXPECT_EQ(load_chat_template(dir.str(), std::nullopt, true).text, "T");
  EXPECT_EQ(load_chat_template(dir.str(), std::string("rag")).text, "R");
  EXPECT_EQ(load_chat_template(dir.str(), std::string("rag")).origin,
            dir.file("tokenizer_config.json") + ":chat_template[rag]");
  expect_error<ValueError>([&] { load_chat_template(dir.str(), std::string("nope")); },
                           {"tokenizer_config.json", "no chat template named 'nope'", "'rag'"});
  write_bytes(dir.file("tokenizer_config.json"),
              R"({"chat_template": [{"name": "a", "template": "A"}]})");
  expect_error<ValueError>([&] { load_chat_template(dir.str()); },
                           {"tokenizer_config.json", "none named 'default'", "'a'"});
  write_bytes(dir.file("tokenizer_config.json"), R"({"chat_template": 3})");
  expect_error<ValueError>([&] { load_chat_template(dir.str()); },
                           {"tokenizer_config.json", "number 3"});
  write_bytes(dir.file("tokenizer_config.json"), R"({})");
  expect_error<ValueError>([&] { load_chat_template(dir.str()); },
                           {"tokenizer_config.json", "no \"chat_template\""});
  std::filesystem::create_directories(dir.file("additional_chat_templates"));
  write_bytes(dir.file("additional_chat_templates/tool_use.jinja"), "TU");
  write_bytes(dir.file("chat_template.jinja"), "DF");
  EXPECT_EQ(load_chat_template(dir.str()).text, "DF");
  EXPECT_EQ(load_chat_template(dir.str(), std::nullopt, true).text, "TU");
}

}  // namespace
}  // namespace headroom
