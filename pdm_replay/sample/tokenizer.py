"""A real word-level tokenizer for the sample task, built offline with ``tokenizers``.

Every integer 0..4095 is one token, so a list of numbers is one token per number and an
answer is multi-token. Saved as a transformers ``PreTrainedTokenizerFast`` (``tokenizer.json``
+ ``tokenizer_config.json``), so ``AutoTokenizer.from_pretrained(dir)`` loads it offline.

Examples
--------
>>> tok = build_tokenizer()
>>> len(tok)
4103
>>> ids = tok("sort : 12 7 ->").input_ids
>>> tok.convert_ids_to_tokens(ids)
['<bos>', 'sort', ':', '12', '7', '->']
>>> tok.decode(ids, skip_special_tokens=True)
'sort : 12 7 ->'
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
WORDS = ("sort", ":", "->")
N_NUMBERS = 4096  # vocabulary 4,103: at least the 4,096 the shipped sample promises


def vocabulary() -> dict[str, int]:
    """Token -> id: special tokens first, then the task words, then ``"0"`` .. ``"4095"``."""
    tokens = [*SPECIAL_TOKENS, *WORDS, *(str(i) for i in range(N_NUMBERS))]
    return {t: i for i, t in enumerate(tokens)}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Whitespace word-level tokenizer that prepends ``<bos>``; decodes to spaced words."""
    vocab = vocabulary()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder with an empty prefix joins words with single spaces.
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])])
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK, padding_side="right")


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, directory: Path | str) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
    directory = Path(directory)
    tokenizer.save_pretrained(str(directory))
    # transformers 5 writes its internal class name; the public alias also loads in 4.x.
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return directory
