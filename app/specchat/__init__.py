"""SpecChat: local GGUF chat with visible, lossless speculative decoding."""

__version__ = "0.1.0"
