"""The vocabulary every layer shares: errors, settings, failure classes and their classifier,
targets, op names, occupancy arithmetic, the bytecode cache. Imports nothing else of kernelcraft;
the pydantic models a client sees are `kernelcraft.schema`'s."""
