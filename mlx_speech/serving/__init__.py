"""The serving core: what every protocol adapter (HTTP with its WebSocket,
Wyoming) stands on. One typed server state (``state``), the model slot,
admission and its neutral refusal, the graceful stop, metrics, the book
jobs, and how a connection's utterances wait and are read. Adapters render
a ``Refusal`` their own way; nothing here knows a protocol."""
