"""A hermes-style chat template that renders tool schemas, assistant tool calls and tool results.

The shipped tiny model's template ignores ``tools`` and the ``tool`` role. This one keeps its turn format
(``<|role|>content<eos>``) and adds, in the fewest tokens a small model has to learn:

* ``tools`` -> one system turn ``<|system|>Tools: name(arg, ...); name(arg, ...)<eos>`` before the messages
  (a leading system message's content comes first, on its own line);
* an assistant message's ``tool_calls`` -> ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  after its content, one per call, JSON as ``json.dumps`` writes it;
* a ``tool`` message -> ``<|user|><tool_response>content</tool_response><eos>``.

Its output is a contract: the tool-using tiny model is trained on it and agent-loop tests check masks
against it, so change it only together with both.
"""

from __future__ import annotations

TOOL_CHAT_TEMPLATE = (
    "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
    "{%- if tools -%}"
    "{{ '<|system|>' }}{% if system %}{{ system + '\n' }}{% endif %}{{ 'Tools: ' }}"
    "{%- for t in tools -%}"
    "{%- set f = t['function'] if t['function'] is defined else t -%}"
    "{%- set props = f['parameters']['properties'] if f['parameters'] is defined"
    " and f['parameters']['properties'] is defined else {} -%}"
    "{{ f['name'] + '(' + (props | list | join(', ')) + ')' }}{% if not loop.last %}{{ '; ' }}{% endif %}"
    "{%- endfor -%}"
    "{{ eos_token }}"
    "{%- elif system -%}"
    "{{ '<|system|>' + system + eos_token }}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' and loop.first -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{{ '<|assistant|>' + (m['content'] or '') }}"
    "{%- for tc in (m['tool_calls'] or []) -%}"
    "{%- set f = tc['function'] if tc['function'] is defined else tc -%}"
    "{{ '<tool_call>{\"name\": ' + (f['name'] | tojson) + ', \"arguments\": ' }}"
    "{%- if f['arguments'] is string -%}{{ f['arguments'] }}{%- else -%}{{ f['arguments'] | tojson }}{%- endif -%}"
    "{{ '}</tool_call>' }}"
    "{%- endfor -%}"
    "{{ eos_token }}"
    "{%- elif m['role'] == 'tool' -%}"
    "{{ '<|user|><tool_response>' + m['content'] + '</tool_response>' + eos_token }}"
    "{%- else -%}"
    "{{ '<|' + m['role'] + '|>' + m['content'] + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)
