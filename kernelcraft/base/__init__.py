"""The vocabulary every layer shares: errors, settings, failure classes, targets and the wire
models a client sees. Imports nothing else of kernelcraft."""
