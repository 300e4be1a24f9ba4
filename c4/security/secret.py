"""Where a client's bearer token may come from: the ``C4_TOKEN`` variable or a file
(``--token-file``), never the command line, where every local user reads it (``ps``,
``/proc/PID/cmdline``) for as long as the process runs."""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path

from c4.security.errors import SecurityError

log = logging.getLogger(__name__)

ON_COMMAND_LINE = ("--token on the command line is visible to every local user (ps, "
                   "/proc/PID/cmdline): set C4_TOKEN, or put the token in a file only you can "
                   "read and pass --token-file FILE (C4_TOKEN_FILE)")


def given_on_command_line(flag: str = "--token") -> bool:
    """Whether this process's command line (what /proc/PID/cmdline shows) holds ``flag``."""
    return any(arg == flag or arg.startswith(f"{flag}=") for arg in sys.argv[1:])


def read_token(token: str, token_file: str) -> str:
    """The token to use: from ``token_file`` if given, else ``token`` (C4_TOKEN); raises
    ValueError when the token was typed on the command line, or the file cannot be read."""
    if token and given_on_command_line():
        raise SecurityError(ON_COMMAND_LINE)
    if not token_file:
        return token
    # the file, named for this process, wins over a C4_TOKEN it inherited
    path = Path(token_file)
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise SecurityError(f"cannot read the token file {token_file}: {exc.strerror}") from None
    if mode & (stat.S_IRGRP | stat.S_IROTH) and os.name == "posix":
        log.warning("the token file %s is readable by other users: chmod 600 it", token_file)
    value = text.strip()
    if not value:
        raise SecurityError(f"the token file {token_file} is empty")
    return value
