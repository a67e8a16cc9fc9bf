"""cached: a directory-service client cache daemon speaking SSSD's NSS protocol."""

__version__ = "0.1.0"
