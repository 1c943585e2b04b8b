"""The OpenAI-compatible API: any OpenAI client (Open WebUI, LibreChat, the openai SDK) talks to Herald
as a model, at ``/v1/chat/completions`` and ``/v1/models`` on the gateway's HTTP server.

- :mod:`~gateway.openai_api.keys`: API keys (``api.keys``) and the person each acts for;
- :mod:`~gateway.openai_api.wire`: the Chat Completions format, read strictly and written as OpenAI does;
- :mod:`~gateway.openai_api.transcript`: a request's messages as a conversation, and its digest;
- :mod:`~gateway.openai_api.conversations`: where each conversation stands (the repository);
- :mod:`~gateway.openai_api.answering`: one request's turn, under its session's lease;
- :mod:`~gateway.openai_api.server`: the aiohttp application, streaming and the watch on the client.

docs/openai-api.md says how to set it up and what works.
"""
