"""Runs over a folder of tasks: `adapt` (AdaExplore's Adapt, learning rules) and a whole level's
run (`levelplan` decides, `levelrun` runs, `levelsummary` reads the figures back)."""
