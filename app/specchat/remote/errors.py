"""The one error type of the remote layer: :class:`ServerError`, a :class:`~specchat.errors.UserError`.

Every way a server can fail a user (unreachable, a refused key, an unknown model, a
malformed or cut-off answer, a managed server that will not start) is one line that
names the server and says what to do.
"""

from __future__ import annotations

from specchat.errors import UserError


class ServerError(UserError):
    """A server could not be used; ``str()`` is one line naming it."""
