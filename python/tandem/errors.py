"""Tandem's exceptions: every error the C++ engine reports arrives as one of these."""


class Error(ValueError):
    """Bad input or a failed call: the message names the thing, what was expected and what came."""


class FileError(OSError, Error):
    """A file that could not be read or written (``errno`` is the system's error number)."""


class FileNotFoundError(FileError, FileNotFoundError):  # noqa: A001 - the built-in is a base
    """A file that does not exist."""
