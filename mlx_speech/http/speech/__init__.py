"""The speech routes: OpenAI's, vLLM-Omni's batch, Kokoro-FastAPI's
dialogue and captioned speech; each request's parser, schema and response."""
