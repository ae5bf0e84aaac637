#!/usr/bin/env python3
"""Renders conversations with tools through the reference Hugging Face templates that llama.cpp's
sources ship (models/templates/ in the clone bench/peer/build_native.sh makes: Qwen3-0.6B,
Llama-3.1-8B-Instruct), with Jinja as transformers' apply_chat_template does, and prints the JSON
chat_template_tools_test.cpp compares with. Run:
  python3 tests/model/chat_tools_reference.py [CLONE] > tests/data/chat_tools_reference.json"""
import datetime
import json
import sys
from jinja2.sandbox import ImmutableSandboxedEnvironment

CLONE = sys.argv[1] if len(sys.argv) > 1 else "/work/cache/llama.cpp"
TEMPLATES = {"hermes": "Qwen-Qwen3-0.6B.jinja", "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja"}
TOKENS = {"hermes": ("", "<|im_end|>"), "llama3": ("<|begin_of_text|>", "<|eot_id|>")}

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
out = {}
for family, name in TEMPLATES.items():
    template = env.from_string(open(f"{CLONE}/models/templates/{name}").read())
    bos, eos = TOKENS[family]
    for conv, (messages, tools) in CONVERSATIONS.items():
        if family == "llama3" and conv == "twocalls":
            continue  # its template takes one call per message
        out[f"{family}/{conv}"] = template.render(messages=messages, tools=tools, bos_token=bos, eos_token=eos,
                                                 add_generation_prompt=True)
    if family == "hermes":
        out["hermes/nothink"] = template.render(messages=CONVERSATIONS["nosystem"][0], bos_token=bos, eos_token=eos,
                                                add_generation_prompt=True, enable_thinking=False)
print(json.dumps(out, indent=1, ensure_ascii=False))
