"""The evaluator on a Ray cluster: one actor per GPU, each a whole local evaluator.

Owns `RayEvaluator` (`ray_evaluator.py`) and the routing of a job to an actor (`routing.py`, plain
Python so it is testable without Ray). May import `host` and the rooms below it but `worker`. Called by
the entry points that build an evaluator (`cli`, `server`), through the door (`kernelcraft.engine`).
"""
