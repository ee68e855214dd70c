"""Qwen3's chat template (the `chat_template` of Qwen/Qwen3-0.6B's tokenizer_config.json), written out
for the stand-in tokenizer (`recipes/tiny_qwen.py`); a real checkpoint brings its own copy.

What the token path relies on (`policy/chat_template.py`):
- with tools, the system block lists each schema as JSON inside <tools></tools>;
- consecutive `tool` messages become ONE user block, each as `\\n<tool_response>\\n...\\n</tool_response>`;
- `add_generation_prompt` with `enable_thinking=False` ends in `<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n`;
- earlier assistant turns lose an empty think block when re-rendered (only the last assistant turn after
  the user's query, or one with reasoning, gets `<think>...</think>`), so the template is not
  prefix-stable across turns; see docs/QWEN.md for how token-in/token-out handles it.
"""

QWEN3_CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
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
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

# Qwen3's added tokens in id order (151643-151668 in Qwen/Qwen3-0.6B's tokenizer_config.json), each with
# its `special` flag: True ones are skipped by decode(skip_special_tokens=True) and split by
# split_special_tokens; the others (tool calls, think blocks, fill-in-the-middle) are parsed either way.
QWEN3_ADDED_TOKENS = {
    "<|endoftext|>": True, "<|im_start|>": True, "<|im_end|>": True, "<|object_ref_start|>": True,
    "<|object_ref_end|>": True, "<|box_start|>": True, "<|box_end|>": True, "<|quad_start|>": True,
    "<|quad_end|>": True, "<|vision_start|>": True, "<|vision_end|>": True, "<|vision_pad|>": True,
    "<|image_pad|>": True, "<|video_pad|>": True, "<tool_call>": False, "</tool_call>": False,
    "<|fim_prefix|>": False, "<|fim_middle|>": False, "<|fim_suffix|>": False, "<|fim_pad|>": False,
    "<|repo_name|>": False, "<|file_sep|>": False, "<tool_response>": False, "</tool_response>": False,
    "<think>": False, "</think>": False,
}
# Qwen2/Qwen3's pre-tokenizer split (tokenizer.json), before byte-level BPE.
PRETOKENIZE_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                       r"|\s*[\r\n]+|\s+(?!\S)|\s+")
