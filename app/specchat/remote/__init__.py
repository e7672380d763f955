"""Qt-free clients for inference servers (llama-server, vLLM, SGLang, any OpenAI-compatible one).

They yield the engine's own event types, so a chat's backend is local or remote and
nothing above notices.  SpecChat is a client of those engines; it distributes nothing.
"""
