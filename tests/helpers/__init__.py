"""What tests share: fakes (a model and pair without files), fake servers (hub, OpenAI-style,
llama-server), GGUF samples, the window driver and the inner loop's places. Imported as
``helpers.X`` (tests/ is on sys.path through tests/conftest.py)."""
