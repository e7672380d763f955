"""The backend wing: what answers a chat, in one package.  Qt-free.

- :mod:`.protocol`: the one :class:`~.protocol.Backend` protocol and what it shows (:class:`~.protocol.PairInfo`);
  the request and the first event of an answer are the engine's (:mod:`specchat.engine.answer`);
- :mod:`.choose`: a chat's settings, or the command line, to the config of one backend;
- :mod:`.factory`: that config to an open backend (:func:`~.factory.open_backend`);
- :mod:`.local`: a pair of GGUF models loaded here; :mod:`.pairs`: which files and how to load them;
- :mod:`.remote`: a server, or a llama-server SpecChat starts for a chat's pair.

A new backend is a module here, one line in :data:`.factory.OPENERS` and a branch of
:func:`.choose.choose`; nothing above this package asks which kind it holds.  The
modules are imported by name (this file re-exports nothing), so the window's import of
:mod:`.choose` does not load llama.cpp.
"""
