"""The tools env (`env=tools`): Read, Edit, Write and Bash over an in-memory repo, as Claude Code has them.

Read from the model's side in: `syntax_compact` / `syntax_json` (turn text -> calls), `calls` (call and
result types, schemas, failure kinds), `env` (turns, step budget, grading, reward), `repo` (the files;
Read, Edit, Write), `shell` (the Bash subset), `render` (results -> what the model reads), with
`code_words` (Python text <-> TinyAgent's words), `leaks` (the leak canary's hidden inputs) and
`vocabulary` (the words the TinyAgent tokenizer needs).
"""
