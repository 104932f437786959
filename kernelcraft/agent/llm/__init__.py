"""The language model: the interface the driver calls (`core`), the backends the flags build
(`config`, `anthropic_backend`, `openai_backend`), the wrappers that log or stop a call
(`wrappers`), the prompts (`prompts`) and the rulebook's duplicate judge (`judge`)."""
