"""Text <-> ids, tensor2tensor's TextEncoder contract: `encode(str) -> ids`, `decode(ids) -> str`.

Ids 0 and 1 are reserved for PAD and EOS in every vocabulary, as in tensor2tensor.
"""
PAD_ID = 0
EOS_ID = 1
NUM_RESERVED_IDS = 2


class SymbolVocabulary:
    """Space-separated integer symbols 1..num_symbols, as in t2t's algorithmic problems.

    Symbol k has id k - 1 + NUM_RESERVED_IDS, so "3 7 1" encodes to [4, 8, 2]. Decoding stops at
    the first EOS and drops padding.
    """

    def __init__(self, num_symbols: int):
        self.num_symbols = num_symbols

    @property
    def vocab_size(self) -> int:
        return self.num_symbols + NUM_RESERVED_IDS

    def encode(self, text: str) -> list:
        ids = []
        for token in text.split():
            if not token.isdigit() or not 1 <= int(token) <= self.num_symbols:
                raise ValueError(f"{token!r} is not a symbol: expected integers 1 to "
                                 f"{self.num_symbols} separated by spaces")
            ids.append(int(token) - 1 + NUM_RESERVED_IDS)
        return ids

    def decode(self, ids) -> str:
        symbols = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == EOS_ID:
                break
            if token_id != PAD_ID:
                symbols.append(str(token_id - NUM_RESERVED_IDS + 1))
        return " ".join(symbols)
