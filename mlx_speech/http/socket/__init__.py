"""The WebSocket route: vLLM-Omni's streaming protocol, text in as it is
written, audio out sentence by sentence."""
