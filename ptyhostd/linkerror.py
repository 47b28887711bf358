"""The errors of the service manager's link (manager.py, dbuslink.py), apart from the
link itself: the host names them before serving, the link's jeepney is imported after."""

from __future__ import annotations


class ManagerError(Exception):
    """The service manager refused a request or could not be reached."""

    def __init__(self, message: str, name: str = ""):
        super().__init__(message)
        self.name = name  # the D-Bus error name of a refusal, "" if none came


class LinkLost(ManagerError):
    """The link dropped before the reply came: the request may or may not have been done."""
