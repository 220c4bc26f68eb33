"""The one base class of errors that a user can fix: a bad flag, file, data set, checkpoint or
hparams value. The programs print these as one `error:` line and exit with status 2; every other
exception is a bug and keeps its traceback (tensor2tensor printed tracebacks for both, which
hid the user's mistakes among the library's)."""
import difflib


class UserError(Exception):
    """An error whose message tells the user what to change (it names the flag, file, line or
    value); subclasses say which kind."""


class FlagError(UserError, ValueError):
    """A flag value, or a combination of flags, that a program cannot run with."""


class DataError(UserError, ValueError):
    """Data files that are missing, mismatched or malformed; the message names them."""


def unknown_name_message(kind: str, name: str, known, listing: str) -> str:
    """The message for a `name` that is none of `known`, with a suggestion when one is close:
    "unknown {kind} 'nmae'. Did you mean 'name'? {listing}: a, name, z" (the registry's and the
    hparams overrides' message)."""
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} {listing}: {', '.join(sorted(known)) or '(none)'}"
