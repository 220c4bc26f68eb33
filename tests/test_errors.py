from t2t_lite.errors import unknown_name_message


def test_unknown_name_suggests_the_closest_and_lists_the_known_sorted():
    message = unknown_name_message("problem", "algorithmic_cpy",
                                   ["algorithmic_reverse", "algorithmic_copy"],
                                   "Registered problems")
    assert message == ("unknown problem 'algorithmic_cpy'. Did you mean 'algorithmic_copy'? "
                       "Registered problems: algorithmic_copy, algorithmic_reverse")


def test_unknown_name_without_a_close_one_or_any_known():
    assert unknown_name_message("hparam", "zzz", ["hidden_size"], "Known hparams") == (
        "unknown hparam 'zzz'. Known hparams: hidden_size")
    assert unknown_name_message("model", "x", {}, "Registered models") == (
        "unknown model 'x'. Registered models: (none)")
