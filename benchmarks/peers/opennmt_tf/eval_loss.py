"""`onmt-main ... eval` for the loss alone, run by OpenNMT-tf's own Python.

    python eval_loss.py ONMT_MAIN_ARGS... eval

OpenNMT-tf 2.32's evaluation of a sequence-to-sequence model calls the model on each dev batch
with training=False, which computes the decoder outputs for the reference (from which
`compute_loss(..., training=False)` gives the loss) and also translates the batch with beam
search (`SequenceToSequence._dynamic_decode`). The translations serve only its scorers and
`eval.save_eval_predictions`, neither of which run.py configures. They are costly for a barely
trained model, whose outputs run to `maximum_decoding_length`: after 1 update, the dev split
took 6.5 and 7.4 minutes in two runs on 2 busy CPU cores, and 27 s without them. Here
`_dynamic_decode` returns no predictions, so the evaluator sums the same loss over the same
batches and prints its usual line
    Evaluation result for step N: loss = L ; perplexity = P
(cross entropy per target token, without label smoothing) without translating anything.
This file imports only OpenNMT-tf and the standard library (it runs in the peer's environment).
"""
import sys


def main():
    from opennmt.bin import main as onmt_main
    from opennmt.models import sequence_to_sequence

    def no_translations(self, *args, **kwargs):
        return None

    sequence_to_sequence.SequenceToSequence._dynamic_decode = no_translations
    sys.argv = ["onmt-main"] + sys.argv[1:]
    onmt_main.main()


if __name__ == "__main__":
    main()
