"""Beam search by prefix recompute: an independent reference for `Generator`.

No key/value cache and no batching across examples: for one example at a
time, every step runs the model's full teacher-forced forward pass on each
alive hypothesis and reads the last position's logits. Written from the
documented semantics of `Generator(search="beam")`, not from its code:

- A hypothesis is the start token (seq2seq) or the prompt (GPT), then
  generated tokens. `max_length` counts the whole row, so at most
  `max_length - prompt_length` tokens are generated.
- Each step extends the alive hypotheses (one at first) by every token but
  padding (documented as never generated; the models mask id 0) and
  takes the 2W best extensions by total log P (W = beam width). Those ending
  with `end_id` are finished, ranked by log P / ((5 + n) / 6) ** alpha where n
  counts the generated tokens, end token included; the best W of the others
  stay alive.
- The result is the best finished hypothesis and its normalized score. An
  example where nothing finished returns its best alive hypothesis, which then
  has max_length - prompt_length generated tokens, scored the same way.
- Early stopping ("when no alive beam can still beat the worst finished
  one") must not change the result, so the reference never stops early: it
  runs every step and checks that claim too.
- Ties are not resolved: the reference records the smallest gap at every
  decision (the 2W cut, the alive cut, the best finished), and the caller
  checks that no decision was closer than float32 noise between a cached and
  an uncached forward pass, so that any disagreement is a real one.
"""

import dataclasses

import numpy as np


def log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def gnmt_penalty(generated, alpha):
    """((5 + n) / 6) ** alpha, GNMT (Wu et al. 2016) eq. 14, in float64."""
    return ((5.0 + generated) / 6.0) ** alpha


class PrefixScorer:
    """Next-token log-probabilities of one example's prefixes, each from a
    full forward pass of `model` over the whole prefix (no cache).

    The log-probabilities of a prefix are kept once computed: a sweep over
    widths and penalties revisits the same prefixes many times.

    Args:
        model: a `gpt_decoder` model, or a `transformer_seq2seq` model with
            `source`, the example's unpadded source ids.
    """

    def __init__(self, model, source=None):
        self.model = model
        self.source = None if source is None else np.asarray(source, "int32")
        self.known = {}
        self.forward_passes = 0

    def forward(self, tokens):
        """Log-softmax `(n, length, vocab)` of the model on `(n, length)` ids."""
        tokens = np.asarray(tokens, "int32")
        if self.source is None:
            inputs = {"token_ids": tokens}
        else:
            encoder = np.repeat(self.source[None], len(tokens), axis=0)
            inputs = {"encoder_token_ids": encoder, "decoder_token_ids": tokens}
        self.forward_passes += 1
        # predict_on_batch: the same forward pass as model(inputs), compiled
        # once for all prefix lengths (Keras relaxes the shapes it traces).
        return log_softmax(self.model.predict_on_batch(inputs))

    def next_token(self, prefixes):
        """log P(next token | prefix) `(n, vocab)` for n prefixes of one length."""
        missing = sorted({p for p in prefixes if p not in self.known})
        if missing:
            # Prefixes of one length share a call; each row is its own pass.
            for prefix, row in zip(missing, self.forward(missing)[:, -1], strict=True):
                self.known[prefix] = row
        return np.stack([self.known[p] for p in prefixes])

    def sequence(self, tokens, prompt_length):
        """Teacher-forced log P of `tokens[prompt_length:]`, each token given
        all before it: one forward pass, sum of the chosen log-softmax."""
        tokens = np.asarray(tokens, "int32")
        log_probs = self.forward(tokens[None])[0]
        positions = np.arange(prompt_length, len(tokens))
        return float(log_probs[positions - 1, tokens[positions]].sum())


@dataclasses.dataclass
class BeamResult:
    """One example's beam search outcome."""

    tokens: list  # prefix and generated tokens, no padding
    score: float  # log P / ((5 + generated) / 6) ** alpha
    finished: bool  # ends with end_id (else the best alive at max_length)
    margin: float  # the closest decision: smallest gap at any cut


def beam_search(scorer, prefix, *, max_length, width, alpha, end_id, pad_id=0):
    """Beam search for one example by re-running the model on every prefix.

    Args:
        scorer: the example's `PrefixScorer`.
        prefix: the start token `[start_id]` or the unpadded prompt.
        max_length: length of the whole row, prefix included.
        width: beam width W.
        alpha: GNMT length penalty; 0 ranks by log P.
        end_id: the token that finishes a hypothesis.
        pad_id: the padding id, never generated.

    Returns:
        A `BeamResult`.
    """
    prefix = tuple(int(t) for t in prefix)
    prompt_length = len(prefix)
    alive = [(prefix, 0.0)]
    finished = []  # (normalized score, tokens), in the order found
    margin = np.inf

    def gap(ranked, cut):
        """Distance between the last kept and the first dropped value."""
        if len(ranked) <= cut:
            return np.inf
        return ranked[cut - 1] - ranked[cut]

    for _ in range(prompt_length, max_length):
        log_probs = scorer.next_token([tokens for tokens, _ in alive])
        extensions = [
            (score + log_probs[beam, word], (*tokens, word))
            for beam, (tokens, score) in enumerate(alive)
            for word in range(log_probs.shape[1])
            if word != pad_id
        ]
        extensions.sort(key=lambda e: -e[0])
        margin = min(margin, gap([e[0] for e in extensions], 2 * width))
        top = extensions[: 2 * width]
        for score, tokens in top:
            if tokens[-1] == end_id:
                generated = len(tokens) - prompt_length
                finished.append((score / gnmt_penalty(generated, alpha), tokens))
        survivors = [(tokens, score) for score, tokens in top if tokens[-1] != end_id]
        margin = min(margin, gap([score for _, score in survivors], width))
        alive = survivors[:width]

    if finished:
        ranked = sorted(finished, key=lambda f: -f[0])
        margin = min(margin, gap([f[0] for f in ranked], 1))
        score, tokens = ranked[0]
        return BeamResult(list(tokens), score, True, margin)
    tokens, score = alive[0]
    margin = min(margin, gap([s for _, s in alive], 1))
    generated = max_length - prompt_length
    return BeamResult(
        list(tokens), score / gnmt_penalty(generated, alpha), False, margin
    )
