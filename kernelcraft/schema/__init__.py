"""The pydantic models a client sees: what crosses the protocol (MCP structured content, the
command line's `--json`) and the files a run writes.

`evaluation` (a job and its compile, verify and profile results), `tree` (the search tree, its
steps and the results of start/submit/status), `rules` (a rule, its scope, what record_failure
did), `docs` (hardware-manual sections), `cookbook` (cookbook entries), `level` and `levelrun` (a
whole level's evaluation and optimisation), `presets` (the search's configuration) and
`kernelwords` (a compiled kernel's resource use in words). Imports only `kernelcraft.base`; every
other package may import it.
"""
