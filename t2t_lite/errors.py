"""The one base class of errors that a user can fix: a bad flag, file, data set, checkpoint or
hparams value. The programs print these as one `error:` line and exit with status 2; every other
exception is a bug and keeps its traceback (tensor2tensor printed tracebacks for both, which
hid the user's mistakes among the library's)."""


class UserError(Exception):
    """An error whose message tells the user what to change (it names the flag, file, line or
    value); subclasses say which kind."""


class FlagError(UserError, ValueError):
    """A flag value, or a combination of flags, that a program cannot run with."""
