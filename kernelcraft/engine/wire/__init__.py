"""The typed protocol between the evaluator and its workers, and the channel it travels on.

Owns the messages (`protocol.py`), the private channel (`channel.py`) and tensors in frames without
pickle (`tensors.py`). Imports nothing else of the engine. Called by every other room: the
evaluator's end in `host`, the worker's end in `worker`.
"""
