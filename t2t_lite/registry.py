"""Names -> problems, models and hparams sets, as tensor2tensor's `registry` did.

A user adds a problem, model or hparams set in one file with a decorator and selects it by name
with a flag. The built-in ones live in the packages `t2t_lite.problems` and `t2t_lite.hparams`
(the top-level folders `problems/` and `hparams/`) and are imported once, on the first lookup.
"""
import importlib

from t2t_lite.errors import UserError, unknown_name_message

BUILT_IN_PACKAGES = ("t2t_lite.problems", "t2t_lite.hparams", "t2t_lite.models")

_PROBLEMS = {}
_MODELS = {}
_HPARAMS = {}
_built_ins_loaded = False


class RegistryError(UserError, KeyError):
    """An unknown or duplicate name; the message lists what is registered."""

    def __str__(self):
        return self.args[0]


def _load_built_ins():
    global _built_ins_loaded
    if not _built_ins_loaded:
        _built_ins_loaded = True
        for package in BUILT_IN_PACKAGES:
            importlib.import_module(package)


def _register(table, kind, name, value):
    if name in table and table[name] is not value:
        raise RegistryError(f"{kind} {name!r} is already registered")
    table[name] = value
    if table is _PROBLEMS:
        value.name = name
    return value


def _lookup(table, kind, name):
    _load_built_ins()
    if name not in table:
        raise RegistryError(unknown_name_message(kind, name, table, f"Registered {kind}s"))
    return table[name]


def _decorator(table, kind):
    def register(name_or_object=None):
        """Use as @register_x or @register_x("name"); the default name is the object's __name__,
        converted to snake_case for classes."""
        def wrap(obj, name=None):
            return _register(table, kind, name or _default_name(obj), obj)
        if callable(name_or_object):
            return wrap(name_or_object)
        return lambda obj: wrap(obj, name_or_object)
    return register


def _default_name(obj):
    name = obj.__name__
    if isinstance(obj, type):
        return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return name


register_problem = _decorator(_PROBLEMS, "problem")
register_model = _decorator(_MODELS, "model")
register_hparams = _decorator(_HPARAMS, "hparams set")


def problem(name):
    """A new instance of the registered Problem `name`."""
    return _lookup(_PROBLEMS, "problem", name)()


def model(name):
    """The registered model class `name` (a keras.Model taking (hparams, vocab_size))."""
    return _lookup(_MODELS, "model", name)


def hparams(name):
    """The HParams of the registered set `name`."""
    return _lookup(_HPARAMS, "hparams set", name)()


def list_problems():
    _load_built_ins()
    return sorted(_PROBLEMS)


def list_models():
    _load_built_ins()
    return sorted(_MODELS)


def list_hparams():
    _load_built_ins()
    return sorted(_HPARAMS)
