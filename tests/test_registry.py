import pytest

from t2t_lite import registry


def test_built_ins_are_listed():
    assert {"algorithmic_copy", "algorithmic_reverse"} <= set(registry.list_problems())
    assert {"transformer_base_v1", "transformer_base_v2", "transformer_base", "transformer_big",
            "transformer_small", "transformer_tiny"} <= set(registry.list_hparams())
    assert "transformer" in registry.list_models()


def test_lookups_return_usable_objects():
    assert registry.problem("algorithmic_copy").name == "algorithmic_copy"
    assert registry.hparams("transformer_tiny").hidden_size == 128
    assert registry.model("transformer").__name__ == "Transformer"


@pytest.mark.parametrize("lookup, kind", [(registry.problem, "problem"),
                                          (registry.hparams, "hparams set"),
                                          (registry.model, "model")])
def test_unknown_name_lists_what_is_registered(lookup, kind):
    with pytest.raises(registry.RegistryError) as error:
        lookup("no_such_thing")
    message = str(error.value)
    assert f"unknown {kind} 'no_such_thing'" in message
    listing = {registry.problem: registry.list_problems, registry.hparams: registry.list_hparams,
               registry.model: registry.list_models}[lookup]()
    assert all(name in message for name in listing)


def test_misspelled_name_gets_a_suggestion():
    with pytest.raises(registry.RegistryError, match="Did you mean 'algorithmic_copy'"):
        registry.problem("algorithmic_cpy")


def test_registering_a_different_object_under_a_taken_name_fails():
    with pytest.raises(registry.RegistryError, match="already registered"):
        registry.register_hparams("transformer_tiny")(lambda: None)
