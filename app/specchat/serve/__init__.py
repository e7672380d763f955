"""SpecChat as a local OpenAI-compatible server (``specchat serve``, and the window's "Serve API" switch).

- :mod:`.wire`: the OpenAI request and response objects (checked bodies, chunks, usage, errors);
- :mod:`.lane`: the line requests wait in and the thread that owns the models;
- :mod:`.http`: Starlette routes and the uvicorn thread.

Qt-free: the window plugs its own lane in (:mod:`specchat.services.api`).
"""
