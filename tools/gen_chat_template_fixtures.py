#!/usr/bin/env python3
"""Golden renderings of chat templates by transformers' own apply_chat_template path.

Writes tests/fixtures/chat_template/*.json: for each template (written for these tests in the
styles of Llama 3.1, Qwen 2.5, Mistral v0.3, Gemma 2 / 3 and Phi-3, plus feature tests), each
conversation and add_generation_prompt in {false, true}: the text transformers renders, the
{% generation %} spans (converted from characters to UTF-8 byte offsets) or the error it raises
(raise_exception's message). Needs jinja2 >= 3.1.6 and transformers 5.x:
    /work/venv/bin/python tools/gen_chat_template_fixtures.py
"""
import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "chat_template")

LLAMA3 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "01 Jan 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- The system turn is taken out of the list and written first. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Knowledge cutoff: December 2023\n" }}
{{- "Date today: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You can call these functions. Reply with JSON {\"name\": function name, \"parameters\": arguments}.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Tools go in the first user message, and there is none!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Answer with a function call in JSON if one of these helps.\n" }}
    {{- 'Format: {"name": function name, "parameters": {argument: value}}. No variables.\n\n' }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("Only one tool call at a time is supported.") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# The tool list of the Qwen family: one JSON object per line.
QWEN_TOOLS = r"""    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
"""

# Consecutive tool results of the Qwen family in one user turn, then the generation prompt.
QWEN_TOOL_TURNS = r"""    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
"""

QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call functions to help with the request.\n\nTheir signatures are inside <tools></tools> tags:\n<tools>" }}
""" + QWEN_TOOLS + r"""    {{- "\n</tools>\n\nTo call one, write a JSON object with its name and arguments in <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {%- if message.role == "assistant" %}
            {{- '<|im_start|>assistant\n' }}
            {%- generation %}
            {{- message.content + '<|im_end|>' }}
            {%- endgeneration %}
            {{- '\n' }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
        {%- endif %}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
""" + QWEN_TOOL_TURNS + r"""{%- endif %}
"""

MISTRAL = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- Turns other than tool calls and results must alternate user / assistant. #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("Roles must alternate user/assistant/user/assistant after an optional system message") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("A tool call id is 9 alphanumeric characters") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " }}
        {%- generation %}
        {{- message["content"]|trim + eos_token }}
        {%- endgeneration %}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("A tool call id is 9 alphanumeric characters") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user, assistant and tool roles are supported, after an optional system message") }}
    {%- endif %}
{%- endfor %}
"""

GEMMA2 = r"""{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('The system role is not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '
' }}{% if role == 'model' %}{% generation %}{{ message['content'] | trim + '<end_of_turn>' }}{% endgeneration %}{{ '
' }}{% else %}{{ message['content'] | trim + '<end_of_turn>
' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model
'}}{% endif %}"""

GEMMA3 = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Content is neither a string nor a list") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

PHI3 = r"""{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'user' %}{{'<|user|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>
'}}{% generation %}{{ message['content'] + '<|end|>' }}{% endgeneration %}{{ '
' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %}"""

# A template leaning on the less common features, in the way reasoning and tool templates use them.
FEATURES = r"""{#- Macros with defaults, namespaces, loop filters, slicing, string methods. -#}
{%- macro render_content(content, prefix='') -%}
    {%- if content is string -%}
        {{- prefix ~ content -}}
    {%- else -%}
        {%- for part in content if part.type == 'text' -%}
            {{- prefix ~ part.text -}}{{- ' | ' if not loop.last -}}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user=-1, count=0) -%}
{%- for m in messages -%}
    {%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set ns.count = ns.count + 1 -%}
    {%- if message.role == 'system' -%}
        [SYS {{ loop.index }}/{{ loop.length }}] {{ render_content(message.content) | trim }}
{% elif message.role == 'user' -%}
        [USER{{ '*' if loop.index0 == ns.last_user else '' }}] {{ render_content(message.content, prefix='> ') }}
{% elif message.role == 'assistant' -%}
        {%- set content = message.content if message.content is string else '' -%}
        {%- if '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- elif message.reasoning_content is defined -%}
            {%- set reasoning = message.reasoning_content -%}
        {%- endif -%}
        [ASSISTANT]{% if reasoning is defined %} (thought: {{ reasoning | length }} chars, {{ reasoning[:12] }}){% endif %} {% generation %}{{ content }}{% if message.tool_calls is defined %}{% for call in message.tool_calls %}<call {{ call.function.name }} {{ call.function.arguments | tojson(sort_keys=true) }}>{% endfor %}{% endif %}{% endgeneration %}
{% elif message.role == 'tool' -%}
        [TOOL {{ message.tool_call_id | default('?') }}] {{ message.content | string | upper }}
{% endif -%}
{%- endfor -%}
turns={{ ns.count }} users={{ messages | selectattr('role', 'equalto', 'user') | list | length }} roles={{ messages | map(attribute='role') | unique | join(',') }}
{%- if tools %} tools={{ tools | map(attribute='function.name') | join(',') }}{% endif %}
{%- if add_generation_prompt %}
[ASSISTANT]{% endif %}"""

# Reasoning models: the last user turn found walking backwards, <think> blocks split out of content.
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nFunction signatures are inside <tools></tools>:\n<tools>" }}
""" + QWEN_TOOLS + r"""    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
""" + QWEN_TOOL_TURNS + r"""    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

# Tool schemas rendered by a recursive macro, as function-calling fine-tunes do.
HERMES = r"""{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {"string": "str", "number": "float", "integer": "int", "boolean": "bool"} %}
{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec|items) + "]" }}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']' }}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable %}
    {{- "Union[" }}
    {%- for t in json_spec.type %}
        {{- json_to_python_type({"type": t}) }}
        {%- if not loop.last %}
            {{- "," }}
        {%- endif %}
    {%- endfor %}
    {{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}

{{- bos_token }}
{{- '<|im_start|>system\nYou call functions. Signatures in <tools></tools>: <tools> ' }}
{%- if tools is iterable and tools | length > 0 %}
    {%- for tool in tools %}
        {%- if tool.function is defined %}
            {%- set tool = tool.function %}
        {%- endif %}
        {{- '{"type": "function", "function": ' }}
        {{- '{"name": "' + tool.name + '", ' }}
        {{- '"description": "' + tool.name + '(' }}
        {%- for param_name, param_fields in tool.parameters.properties|items %}
            {{- param_name + ": " + json_to_python_type(param_fields) }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- endif %}
        {%- endfor %}
        {{- ")" }}
        {%- if tool.return is defined %}
            {{- " -> " + json_to_python_type(tool.return) }}
        {%- endif %}
        {{- " - " + tool.description + "\n\n" }}
        {%- for param_name, param_fields in tool.parameters.properties|items %}
            {%- if loop.first %}
                {{- "    Args:\n" }}
            {%- endif %}
            {{- "        " + param_name + "(" + json_to_python_type(param_fields) + "): " + param_fields.description | default("")|trim }}
        {%- endfor %}
        {{- '", "parameters": ' }}
        {%- if tool.parameters.properties | length == 0 %}
            {{- "{}" }}
        {%- else %}
            {{- tool.parameters|tojson }}
        {%- endif %}
        {{- "}" }}
        {%- if not loop.last %}
            {{- "\n" }}
        {%- endif %}
    {%- endfor %}
{%- endif %}
{{- " </tools><|im_end|>\n" }}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" or (message.role == "assistant" and message.tool_calls is not defined) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n' }}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '{' }}
            {{- '"name": "' }}
            {{- tool_call.name }}
            {{- '"' }}
            {{- ', '}}
            {%- if tool_call.arguments is defined %}
                {{- '"arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments|tojson }}
                {%- endif %}
            {%- endif %}
            {{- '}' }}
            {{- '\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>tool\n' }}
        {%- endif %}
        {{- '<tool_response>\n' }}
        {{- message.content }}
        {%- if not loop.last %}
            {{- '\n</tool_response>\n' }}
        {%- else %}
            {{- '\n</tool_response>' }}
        {%- endif %}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>' }}
        {%- elif loop.last %}
            {{- '<|im_end|>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

SPECIAL_TOKENS = {
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2_5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "gemma2": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"},
    "features": {"bos_token": "<s>", "eos_token": "</s>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "hermes": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
}
TEMPLATES = {"llama3": LLAMA3, "qwen2_5": QWEN25, "mistral": MISTRAL, "gemma2": GEMMA2, "gemma3": GEMMA3,
             "phi3": PHI3, "features": FEATURES, "qwen3": QWEN3, "hermes": HERMES}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
        "return": {"type": "number", "description": "degrees"},
    },
}
LIST_TOOL = {"type": "function", "function": {
    "name": "tag", "description": "Tags an item.",
    "parameters": {"type": "object", "properties": {
        "ids": {"type": "array", "items": {"type": "integer"}, "description": "The items"},
        "meta": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        "strict": {"type": "boolean"}}}}}
CLOCK_TOOL = {"type": "function", "function": {"name": "now", "description": "The time.",
                                                "parameters": {"type": "object", "properties": {}}}}

CONVERSATIONS = {
    "basic": {"messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"}]},
    "no_system": {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "  Why did the chicken cross the road?\n\n"}]},
    "single_user": {"messages": [{"role": "user", "content": "  Just one question, with spaces around.  \n"}]},
    "unicode": {"messages": [
        {"role": "system", "content": "Réponds en français — s'il te plaît."},
        {"role": "user", "content": "日本語で「こんにちは」は？ 😀 \"quotes\" and 'apostrophes' \\ backslash\ttab"},
        {"role": "assistant", "content": "こんにちは！ 👋🏽 Ünïcödé ß ẞ"},
        {"role": "user", "content": "Merci ✓"}]},
    "empty_content": {"messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Still there?"}]},
    "tools": {"tools": [WEATHER_TOOL, CLOCK_TOOL], "messages": [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
        {"role": "tool", "content": "21.5", "tool_call_id": "call12345", "name": "get_weather"},
        {"role": "assistant", "content": "It is 21.5 °C in Zürich."},
        {"role": "user", "content": "Thanks"}]},
    "tool_calls_two": {"tools": [WEATHER_TOOL, LIST_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "callAAAAA", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "callBBBBB", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "18", "tool_call_id": "callAAAAA"},
        {"role": "tool", "content": "25", "tool_call_id": "callBBBBB"},
        {"role": "assistant", "content": "Paris 18, Rome 25."}]},
    "content_list": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}]},
    "bad_alternation": {"messages": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"}]},
    "reasoning": {"messages": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Short wavelengths scatter more."},
        {"role": "user", "content": "And sunsets?"},
        {"role": "assistant", "content": "<think>\nLonger path through air.\n</think>\n\nRed light survives the long path."}]},
    "null_keys": {"messages": [
        {"role": "user", "content": "ping", "name": None},
        {"role": "assistant", "content": "pong", "tool_calls": None}]},
    "bad_role": {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "narrator", "content": "Meanwhile..."}]},
}

KWARGS = {"llama3": {"date_string": "07 Dec 2026"}, "qwen3": {"enable_thinking": False}}


def render(template, conv, agp, special):
    messages = _normalize_chat_messages(json.loads(json.dumps(conv["messages"])))
    kwargs = dict(special)
    kwargs.update(conv.get("kwargs", {}))
    try:
        rendered, spans = render_jinja_template(
            conversations=[messages], tools=conv.get("tools"), documents=conv.get("documents"),
            chat_template=template, return_assistant_tokens_mask=True, add_generation_prompt=agp, **kwargs)
    except jinja2.exceptions.TemplateError as e:
        kind = "raise" if type(e) is jinja2.exceptions.TemplateError else "other"
        return {"error": str(e), "error_kind": kind}
    except Exception as e:  # the template's own runtime errors (TypeError, ...)
        return {"error": f"{type(e).__name__}: {e}", "error_kind": "other"}
    text = rendered[0]
    byte_spans = [[len(text[:s].encode()), len(text[:e].encode())] for s, e in spans[0]]
    return {"text": text, "generation_spans": byte_spans}


def main():
    assert jinja2.__version__ >= "3.1.6", jinja2.__version__
    os.makedirs(OUT, exist_ok=True)
    write_doc("conversations", CONVERSATIONS)
    for name, template in TEMPLATES.items():
        cases = []
        for conv_name, conv in CONVERSATIONS.items():
            conv = dict(conv)
            if name in KWARGS:
                conv["kwargs"] = KWARGS[name]
            for agp in (False, True):
                case = {"conversation": conv_name, "add_generation_prompt": agp}
                case.update(render(template, conv, agp, SPECIAL_TOKENS[name]))
                cases.append(case)
        write_doc(name, {"template": template, "special_tokens": SPECIAL_TOKENS[name],
                         "kwargs": KWARGS.get(name, {}), "cases": cases})
    write_snippets()


def write_doc(name, doc):
    doc = {"generator": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}", **doc}
    with open(os.path.join(OUT, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


# Small templates, one feature each, rendered with the variables below.
SNIPPET_VARS = {
    "messages": CONVERSATIONS["basic"]["messages"],
    "items": [3, 1, 2], "words": ["b", "A", "c", "a"], "text": "  Hello, World  ", "n": 7, "x": 2.5,
    "d": {"b": 1, "a": [1, 2.0, "é\"\n"], "c": None, "t": True}, "empty": [], "nested": {"k": {"v": "deep"}},
    "people": [{"name": "Ann", "age": 31}, {"name": "bob", "age": 25}, {"name": "Cy"}],
    "uni": "héllo wörld 日本", "add_generation_prompt": False, "tools": None,
}
SNIPPETS = {
    "trim_blocks": "{% if true %}\nyes\n{% endif %}\nend",
    "lstrip_blocks": "a\n    {% if true %}\n    b\n    {% endif %}\nc",
    "lstrip_plus": "a\n    {%+ if true %}b{% endif %}",
    "dash_strip": "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c",
    "var_strip": "a \n {{- 'b' -}} \n c",
    "comment": "a {# a comment #}b\n  {# own line #}\nc{#- strip -#}  d",
    "raw": "{% raw %}{{ not rendered }}{% endraw %}!",
    "crlf": "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n",
    "trailing_newline": "x\n",
    "string_escapes": "{{ 'tab\\there\\nnew \\x41\\u00e9\\U0001F600 \\\\ \\' \\q' }}|{{ \"dq\\\"\" }}",
    "adjacent_strings": "{{ 'a' 'b' \"c\" }}",
    "numbers": "{{ 1_000 }} {{ 0x1F }} {{ 1.5e3 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7.0 // 2 }} {{ 1e16 }} {{ 0.0001 }} {{ 1e-5 }} {{ 1/3 }}",
    "bool_int_arith": "{{ true + 1 }} {{ 3 * 'ab' }} {{ [1] * 2 }} {{ 'x' ~ 1 ~ none ~ true ~ 2.0 }}",
    "compare_chain": "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 'a' != 'b' }}",
    "in_not_in": "{{ 'b' in 'abc' }} {{ 2 in items }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in items }}",
    "and_or": "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] }} {{ not none }} {{ none or none }}",
    "cond_expr": "{{ 'yes' if n > 5 else 'no' }}|{{ 'only' if false }}|{{ 'a' if false else 'b' if true else 'c' }}",
    "literals": "{{ [1, 'two', 3.0, none, true] }} {{ {'k': 'v', 1: [2]} }} {{ (1,) }} {{ (1, 2) }} {{ () }}",
    "repr_strings": "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'é'] }}",
    "slicing": "{{ items[::-1] }} {{ items[1:] }} {{ items[:-1] }} {{ text[2:7] }} {{ uni[-2:] }} {{ uni[::2] }} {{ items[-1] }} {{ uni[1] }} {{ items[5:9] }} {{ 'abcdef'[1:5:2] }}",
    "attr_item_access": "{{ d.b }} {{ d['a'][2] }} {{ nested.k.v }} {{ nested['k']['v'] }} {{ items.0 }} [{{ d.missing }}] [{{ items[10] }}]",
    "dict_methods": "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() | list | length }} {{ d.get('b') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
    "undefined_semantics": "[{{ nope }}] {{ nope is defined }} {{ nope is undefined }} {{ nope | default('dv') }} {{ none | default('dv') }} {{ '' | default('dv', true) }} {% for x in nope %}never{% else %}empty{% endfor %} {{ nope | length }} {{ not nope }} {{ nope == nope }}",
    "tests": "{{ 'abc' is string }} {{ 3 is number }} {{ 3 is integer }} {{ 3.0 is float }} {{ true is boolean }} {{ none is none }} {{ d is mapping }} {{ items is sequence }} {{ 'x' is iterable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ false is false }} {{ true is true }} {{ 1 is true }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 2 is in items }} {{ n is eq 7 }} {{ n is not ne 7 }} {{ 5 is gt 3 }} {{ none is sameas none }}",
    "loop_vars": "{% for i in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }};{% endfor %}",
    "loop_filter_else": "{% for i in items if i > 1 %}{{ i }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for i in items if i > 5 %}{{ i }}{% else %}none{% endfor %}",
    "loop_controls": "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "nested_loops": "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}/{{ loop.index }} {% endfor %}",
    "loop_unpack": "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}{% for k, v in d | dictsort %}{{ k }} {% endfor %}",
    "scoping": "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}",
    "namespace": "{% set ns = namespace(total=0, names=[]) %}{% for p in people %}{% set ns.total = ns.total + (p.age | default(0)) %}{% set ns.names = ns.names + [p.name] %}{% endfor %}{{ ns.total }} {{ ns.names }} {{ ns['total'] }}",
    "namespace_underscore": "{% set ns = namespace() %}{% set ns._secret = 1 %}",
    "namespace_underscore_ctor": "{% set ns = namespace(_x=1) %}",
    "set_block": "{% set block %}  inner {{ n }}  {% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}",
    "set_tuple": "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}",
    "macros": "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(punct='?', name='Cy') }} [{{ greet() }}]",
    "macro_recursion": "{% macro count(n) %}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}",
    "macro_scope": "{% set outer = 'o' %}{% macro m(x) %}{{ outer }}{{ x }}{% set outer = 'changed' %}{{ outer }}{% endmacro %}{{ m(1) }}{{ outer }}",
    "filters_string": "{{ text | trim }}|{{ text | trim(' H') }}|{{ 'hello world' | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ 'a-b c(d' | title }}|{{ uni | upper }}|{{ 'ÀÉ' | lower }}|{{ 'aXa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'ab' | replace('', '-') }}|{{ 'x' | center(5) }}|{{ '<a href=\"x\">&\\'' | e }}|{{ '<b>' | safe }}|{{ 'ab cd  ef' | wordcount }}",
    "filters_list": "{{ items | length }} {{ items | count }} {{ items | first }} {{ items | last }} {{ items | sort }} {{ items | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | unique | list }} {{ items | reverse | list }} {{ items | sum }} {{ items | max }} {{ items | min }} {{ items | join('-') }} {{ uni | list | length }} {{ 'ab' | list }} {{ [] | first }}|",
    "filters_map_select": "{{ people | map(attribute='name') | join(',') }} {{ people | map(attribute='age', default=0) | list }} {{ items | map('string') | list }} {{ people | selectattr('age') | map(attribute='name') | list }} {{ people | rejectattr('age') | list | length }} {{ people | selectattr('age', 'defined') | selectattr('age', 'gt', 26) | map(attribute='name') | first }} {{ items | select('odd') | list }} {{ items | reject('odd') | list }} {{ people | sort(attribute='name') | map(attribute='name') | join }} {{ people | sort(attribute='name', case_sensitive=true) | map(attribute='name') | join }} {{ [none, 0, 1, ''] | select | list }}",
    "filters_numbers": "{{ -3 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(-1) }} {{ '0x1A' | int(0, 16) }} {{ '2.5' | float }} {{ 'y' | float }} {{ 3 | float }} {{ 7 | string }} {{ 1.0 | string }}",
    "filters_items_dictsort": "{{ d | items | list | length }} {% for k, v in d | items %}{{ k }}{% endfor %} {{ d | dictsort | map('first') | list }} {{ {'b': 2, 'A': 1, 'a': 3} | dictsort }} {{ {'b': 2, 'a': 1} | dictsort(by='value', reverse=true) }}",
    "tojson": "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ 'é\\u2028\\x01' | tojson }}|{{ [1, 2.0, 1e20, -0.5] | tojson }}|{{ {} | tojson }}{{ [] | tojson(indent=2) }}|{{ people | tojson(indent='\\t') }}|{{ d | tojson(separators=[',', ':']) }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ (1, 'a') | tojson }}",
    "indent": "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width='> ', blank=true) }}",
    "str_methods": "{{ text.strip() }}|{{ text.lstrip() }}|{{ text.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a.b.c'.rsplit('.', 1) }}|{{ text.startswith('  He') }}|{{ text.endswith(('x', '  ')) }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'aaa'.replace('a', 'b') }}|{{ uni.find('w') }}|{{ 'abc'.find('z') }}|{{ 'abca'.count('a') }}|{{ '-'.join(['x', 'y']) }}|{{ '{} and {name}'.format(1, name='n') }}|{{ '12'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ 'pre_x'.removeprefix('pre_') }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'Ab'.islower() }}",
    "list_methods": "{{ items.index(2) }} {{ items.count(3) }} {{ words.index('c') }}",
    "list_append_refused": "{% set l = [1] %}{{ l.append(2) }}",
    "dict_update_refused": "{{ d.update({'x': 1}) }}",
    "unsafe_attribute_prints_empty": "[{{ d.pop }}][{{ ''._private }}]",
    "range_dict_globals": "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict({'m': 1}, n=2) }}",
    "range_too_big": "{{ range(100001) | length }}",
    "raise_exception": "before{{ raise_exception('Custom failure: ' ~ n) }}after",
    "filter_block": "{% filter upper %}shout {{ n }}{% endfilter %}",
    "with_block": "{% with a = 1, b = 'z' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]",
    "generation_spans": "start{% generation %}one{% endgeneration %} mid {% for i in items %}{% generation %}[{{ i }}é]{% endgeneration %}{% endfor %}{% set s %}{% generation %}in-set{% endgeneration %}{% endset %}end{{ s }}",
    "generation_in_macro": "{% macro g(x) %}<{% generation %}{{ x }}{% endgeneration %}>{% endmacro %}ab{{ g('zz') }}{{ g('y') }}",
    "whitespace_control_mix": "{%- for m in messages -%}\n  {{ m.role }}: {{- m.content | trim -}} \n{%- endfor -%}\n",
    "inline_if_output_none": "{{ none }}|{{ true }}|{{ [none] }}|{{ d.c }}",
    "string_concat_plus": "{{ 'a' + 'b' }}{{ [1] + [2] }}",
    "type_error_concat": "{{ 'a' + 1 }}",
    "undefined_attr_error": "{{ nope.attr }}",
    "undefined_arith_error": "{{ nope + 1 }}",
    "call_undefined_error": "{{ nope() }}",
    "division_by_zero": "{{ 1 / 0 }}",
    "messages_items": "{% for m in messages %}{% for k, v in m | items %}{{ k }}={{ v | length }} {% endfor %}{% endfor %}",
    "getitem_falls_back_to_method": "{{ d['items'] is defined }} {{ (d.items() | list)[0] }}",
    "print_tag": "{% print 'printed' %}",
    "round_int": "{{ 3 | round }} {{ true | round }} {{ 15 | round(-1) }} {{ 25 | round(-1) }} {{ 3 | round(1, 'ceil') }}",
    "int_of_undefined": "{{ nope | int }}",
    "slice_of_a_number": "{{ n[1:] }}",
}


def write_snippets():
    env_special = {"bos_token": "<s>", "eos_token": "</s>"}
    cases = []
    for name, template in SNIPPETS.items():
        variables = dict(SNIPPET_VARS)
        messages = variables.pop("messages")
        agp = variables.pop("add_generation_prompt")
        tools = variables.pop("tools")
        conv = {"messages": messages, "tools": tools, "kwargs": variables}
        case = {"name": name, "template": template}
        case.update(render(template, conv, agp, env_special))
        cases.append(case)
    write_doc("snippets", {"special_tokens": env_special, "variables": SNIPPET_VARS, "cases": cases})


if __name__ == "__main__":
    sys.exit(main())
