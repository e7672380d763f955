"""The desktop window: QtWidgets and pyqtgraph.  Talks to the engine only through workers and events."""
