"""QtCore only, on the GUI thread: what owns the work and state of the app between the window and the
workers: the answer line (answers), the settings in force (settings), downloads, hub calls and
server checks over task runners, and the download flow. Neither a thread nor a widget."""
