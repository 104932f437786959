"""One task's run: `explore.optimize` starts or resumes the tree from its `options`, `runloop`
steps it with the `proposers` (their `edits`), `rundir` and `runreport` keep the run directory,
`session` is the MCP client and `cookbook_seed` the first kernel from the cookbook."""
