"""The offline tuner: the launch parameters read from a kernel's source (`source`, `params`,
`axes`) and the deterministic pattern search over them (`search`). No LLM, no server."""
