"""Qt-free: measuring and predicting the engine: bench (the interleaved run and its table), suite
(the prompts), trace (agreement traces) and simulate (a trace replayed on a cost profile with the
real controller), and the shipped cost profiles. The engine never imports it."""
