"""Translation scores: exact match (one definition), sacreBLEU and chrF."""

import numpy as np

from tfformer.errors import InputError


def exact_match(hypotheses, references, tokenizer=None):
    """Share of `hypotheses` equal to their reference.

    With `tokenizer` (the target tokenizer), references are compared as the
    model could write them: after a tokenize/detokenize round trip, so the
    tokenizer's spacing of punctuation is not counted as an error.
    Hypotheses are compared as given.

    Returns:
        A float in [0, 1]; 0.0 for no pairs.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise InputError(
            f"{len(hypotheses)} hypotheses for {len(references)} references."
        )
    if not references:
        return 0.0
    if tokenizer is not None:
        references = [
            r.decode("utf-8", "replace")
            for r in tokenizer.detokenize(tokenizer.tokenize(references)).numpy()
        ]
    return float(np.mean([h == r for h, r in zip(hypotheses, references, strict=True)]))


def score_translations(hypotheses, references):
    """sacreBLEU BLEU and chrF, cased and lowercased, with their signatures."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise InputError(
            f"{len(hypotheses)} hypotheses for {len(references)} references."
        )
    scores = {}
    for cased, lowercase in (("cased", False), ("lowercased", True)):
        bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
        chrf = sacrebleu.metrics.CHRF(lowercase=lowercase)
        b = bleu.corpus_score(hypotheses, [references])
        c = chrf.corpus_score(hypotheses, [references])
        scores[f"bleu_{cased}"] = round(b.score, 2)
        scores[f"bleu_{cased}_signature"] = str(bleu.get_signature())
        scores[f"chrf_{cased}"] = round(c.score, 2)
        scores[f"chrf_{cased}_signature"] = str(chrf.get_signature())
    scores["bleu_cased_detail"] = str(
        sacrebleu.metrics.BLEU().corpus_score(hypotheses, [references])
    )
    # Word-level BLEU is 0 when the references are single words (the
    # number-words task writes German numbers as one compound word), so the
    # character-level BLEU is reported next to it.
    char_bleu = sacrebleu.metrics.BLEU(tokenize="char")
    scores["bleu_char"] = round(
        char_bleu.corpus_score(hypotheses, [references]).score, 2
    )
    scores["bleu_char_signature"] = str(char_bleu.get_signature())
    return scores
