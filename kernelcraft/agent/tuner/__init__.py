"""The offline tuner: the launch parameters read from a kernel's source (`source`, `params`,
`axes`), the kernel's family and the axes that matter for it (`family`) and the deterministic
pattern search over them (`search`). No LLM, no server."""
