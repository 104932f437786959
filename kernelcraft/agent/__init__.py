"""The driver agent: it speaks MCP to a kernelcraft server and writes the candidates.

Four rooms, each above what it may import (`pyproject.toml`'s agent contract):

- `batch/`: runs over a folder of tasks: `adapt` (learning rules) and a whole level's run
  (`levelplan`, `levelrun`, `levelsummary`: `kernelcraft optimize FOLDER`).
- `loop/`: one task's run: the options, `explore.optimize` starting or resuming the tree,
  `runloop.Explorer` stepping it, the proposers (LLM, tuner) and their edits, the run directory
  and its report, the MCP session and the cookbook seed.
- `llm/`: the language model: its interface and usage (`core`), the flags and the backend they
  build (`config`), the Anthropic and OpenAI-compatible backends, the logging and dry-run
  wrappers, the prompts and the duplicate judge.
- `tuner/`: the offline tuner, no LLM: reading the launch parameters from the source (`source`,
  `params`, `axes`) and the pattern search over them (`search`).

`llm` and `tuner` import neither each other nor anything above them.
"""
