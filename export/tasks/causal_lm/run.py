"""A causal-LM run as its export reads it: the model, the context, the
tokenizer (trained WordPiece or bytes, or a converted decoder's token ids or
GPT-2 byte-level BPE) and the start and end ids the generator uses."""

import dataclasses

from tfformer.export.exporter import ExportRun
from tfformer.export.tasks.text import make_tokenizer
from tfformer.preprocessing.text import END_ID, PAD_ID, START_ID, UNK_ID

# A converted decoder's tokenizers (token ids; GPT-2's byte-level BPE), in
# core ops for its SavedModel, in plain Python (`tokenizer.py`) next to its
# TFLite model.
CONVERTED_KINDS = ("ids", "bpe", "sentencepiece")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CausalLMRun(ExportRun):
    """What export needs from a causal-LM run directory."""

    text: object  # TokenizerSpec
    context: int  # the training window: the caches' length
    vocabulary_size: int
    # The generator's start and end ids: the reserved ones, or a converted
    # checkpoint's (shifted by one).
    start_id: int = START_ID
    end_id: int = END_ID
    # Every id that ends generation, `end_id` first (`CausalLMManifest.ends`);
    # empty: `end_id` alone.
    end_ids: tuple = ()

    @property
    def ends(self):
        """Every id that ends generation, `end_id` first."""
        return list(self.end_ids) or [self.end_id]

    @property
    def converted(self):
        """A converted checkpoint's tokenizer (token ids, GPT-2's BPE)."""
        return self.text.kind in CONVERTED_KINDS


def converted_tokenizer(spec):
    """The core-op tokenizer of a converted decoder's `TokenizerSpec`."""
    from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer
    from tfformer.preprocessing.sentencepiece_tokenizer import SentencePieceTokenizer
    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer

    kinds = {"bpe": ByteLevelBPETokenizer, "sentencepiece": SentencePieceTokenizer}
    return kinds.get(spec.kind, TokenIdTokenizer).load(spec.path)


def core_tokenizer(run, character_classes=None):
    """The core-op tokenizer of `run`, trained or converted."""
    if run.converted:
        return converted_tokenizer(run.text)
    return make_tokenizer(run.text, character_classes)


def stray_id(run):
    """What the device models read an id outside the vocabulary as: [UNK],
    or padding for a converted checkpoint (which has no [UNK]: the model's
    id 1 is the checkpoint's id 0)."""
    return PAD_ID if run.converted else UNK_ID
