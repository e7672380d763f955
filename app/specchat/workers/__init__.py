"""QtCore-only workers: the generation thread and the download thread.

They turn the core's generators and callbacks into Qt signals carrying the
core's immutable event objects; widgets never own threads, they talk to these.
"""
