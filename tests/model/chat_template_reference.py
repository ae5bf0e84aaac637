#!/usr/bin/env python3
"""Renders the reference Hugging Face chat templates with Jinja (as transformers'
apply_chat_template does: trim_blocks, lstrip_blocks) and prints C++ string literals for
chat_template_test.cpp. Run: python3 tests/model/chat_template_reference.py"""
import json
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = {
    # meta-llama/Llama-2-7b-chat-hf
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    # meta-llama/Meta-Llama-3-8B-Instruct
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    # ChatML (teknium/OpenHermes-2.5-Mistral-7B; Qwen's without its default system message)
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    # mistralai/Mistral-7B-Instruct-v0.2 (revised template with an optional system message)
    "mistral": "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n",
    # HuggingFaceH4/zephyr-7b-beta
    "zephyr": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
    # google/gemma-7b-it, with Gemma 2/3's first_user_prefix for a system message
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
}
TOKENS = {"llama2": ("<s>", "</s>"), "llama3": ("<|begin_of_text|>", "<|eot_id|>"), "chatml": ("", ""),
          "mistral": ("<s>", "</s>"), "zephyr": ("<s>", "</s>"), "gemma": ("<bos>", "<eos>")}
CONVERSATIONS = {
    "full": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello!"},
             {"role": "assistant", "content": " Hi there. "}, {"role": "user", "content": "  What is 2+2?\n"}],
    "single": [{"role": "user", "content": "Tell me a story."}],
    "answered": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
}

def raise_exception(message):
    raise ValueError(message)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.globals["raise_exception"] = raise_exception
for family, source in TEMPLATES.items():
    bos, eos = TOKENS[family]
    for name, messages in CONVERSATIONS.items():
        for gen in (True, False):
            text = env.from_string(source).render(messages=messages, bos_token=bos, eos_token=eos,
                                                  add_generation_prompt=gen)
            print(f'    {{"{family}", "{name}", {str(gen).lower()}, {json.dumps(text)}}},')
