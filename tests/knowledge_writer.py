"""A writer process for the store tests: records failures through its own connection and prints
each failure id after its transaction committed. Usage: python knowledge_writer.py DB WRITER N."""

from __future__ import annotations

import asyncio
import sys

from kernelcraft.base.failures import FailureClass
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.store import Store


async def main(db: str, writer: int, n: int) -> None:
    store = await Store.open(db)
    rulebook = Rulebook(store)
    try:
        for i in range(n):
            rec = await rulebook.record_failure(
                f"# writer {writer} candidate {i}\n",
                f"writer {writer} failure {i}",
                arch="sm_90a",
                rule=f"You cannot write kernel number w{writer}x{i} without a mask.",
                failure_class=FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS,
                client=f"writer-{writer}",
            )
            print(rec.failure_id, flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
