"""Run reports: one self-contained HTML page for a search tree and the run that drove it.

A leaf package: it imports only `kernelcraft.schema` and `kernelcraft.base`. `model` holds the data (`RunReport`), `build`
fills it from the tree's models or a run directory, `figures` and `html` draw it
(`render_html`); `level` draws a level run's figures and page. The CLI (`kernelcraft report RUN_DIR`), the agent (report.html at the end of
`optimize`) and the server (the `trees://{tree_id}/report` resource) use it. Nothing is imported
here, so that the server, which needs only `build`, does not load plotly.
"""
