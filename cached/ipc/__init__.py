"""The private RPC between cached's processes: ``framing`` (frames, socket paths, the
tools' blocking client; no asyncio, so ``cached cache`` starts fast), ``aio`` (the
daemons' asyncio server and client) and ``ops`` (the contract: every op and its
messages)."""
