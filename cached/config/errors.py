"""The error the configuration reports to the administrator."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration problem the administrator must fix; the message names the file,
    section, option and value at fault and says how."""
