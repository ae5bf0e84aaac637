#!/usr/bin/env python3
"""Renders conversations with tools through the reference Hugging Face templates that llama.cpp's
sources ship (models/templates/ in the clone bench/peer/build_native.sh makes: Qwen3-0.6B,
Llama-3.1-8B-Instruct, DeepSeek-V3.1), with Jinja as transformers' apply_chat_template does, and prints the JSON
chat_template_tools_test.cpp compares with. Run:
  python3 tests/model/chat_tools_reference.py [CLONE] > tests/data/chat_tools_reference.json"""
import datetime
import json
import sys
from jinja2.sandbox import ImmutableSandboxedEnvironment

CLONE = sys.argv[1] if len(sys.argv) > 1 else "/work/cache/llama.cpp"
TEMPLATES = {"hermes": "Qwen-Qwen3-0.6B.jinja", "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja",
             "deepseek": "deepseek-ai-DeepSeek-V3.1.jinja"}
TOKENS = {"hermes": ("", "<|im_end|>"), "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
          "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")}

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city, now.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "e.g. \"Paris\""},
                                          "unit": {"type": "string", "enum": ["c", "f"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "integer", "default": 2.0}}}}},
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}}
CONVERSATIONS = {
    "offer": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Zürich?"}], TOOLS),
    "nosystem": ([{"role": "user", "content": "Weather in Zürich?"}], TOOLS),
    "loop": ([{"role": "user", "content": "Weather in Zürich?"},
              {"role": "assistant", "content": "", "tool_calls": [CALL]},
              {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 3}"}], TOOLS),
    "twocalls": ([{"role": "user", "content": "Both?"},
                  {"role": "assistant", "content": "Checking.", "tool_calls": [CALL, {"id": "call_2", "type": "function",
                   "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "3 C"},
                  {"role": "tool", "tool_call_id": "call_2", "content": "3"}], TOOLS),
}

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def raise_exception(message):
    raise ValueError(message)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 7, 26).strftime(fmt)

def deepseek_tools_system(messages, tools):
    """DeepSeek-V3.1's template renders no tools: its model card's "## Tools" section goes after
    the system prompt, which the template then prints first."""
    section = "## Tools\nYou have access to the following tools:\n"
    for t in tools:
        f = t["function"]
        section += (f"\n### {f['name']}\nDescription: {f.get('description', '')}\n\n"
                    f"Parameters: {json.dumps(f.get('parameters', {}), ensure_ascii=False)}\n")
    section += ("\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
                "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
                "- `tool_call_name` must be an exact match to one of the available tools\n"
                "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
                "- For multiple tool calls, chain them directly without separators or spaces\n")
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [m for m in messages if m["role"] != "system"]
    return [{"role": "system", "content": (system + "\n\n" if system else "") + section}] + rest

out = {}
for family, name in TEMPLATES.items():
    template = env.from_string(open(f"{CLONE}/models/templates/{name}").read())
    bos, eos = TOKENS[family]
    for conv, (messages, tools) in CONVERSATIONS.items():
        if family == "llama3" and conv == "twocalls":
            continue  # its template takes one call per message
        if family == "deepseek":
            messages, tools = deepseek_tools_system(messages, tools), None
        out[f"{family}/{conv}"] = template.render(messages=messages, tools=tools, bos_token=bos, eos_token=eos,
                                                 add_generation_prompt=True)
    if family == "hermes":
        out["hermes/nothink"] = template.render(messages=CONVERSATIONS["nosystem"][0], bos_token=bos, eos_token=eos,
                                                add_generation_prompt=True, enable_thinking=False)
    if family == "deepseek":
        out["deepseek/think"] = template.render(messages=CONVERSATIONS["nosystem"][0], bos_token=bos, eos_token=eos,
                                                add_generation_prompt=True, thinking=True)
        answered = CONVERSATIONS["loop"][0] + [{"role": "assistant", "content": "3 degrees."},
                                               {"role": "user", "content": "Thanks."},
                                               {"role": "assistant", "content": "<think>ok</think>You're welcome."},
                                               {"role": "user", "content": "Bye."}]
        out["deepseek/turns"] = template.render(messages=answered, bos_token=bos, eos_token=eos,
                                                add_generation_prompt=True)
print(json.dumps(out, indent=1, ensure_ascii=False))
