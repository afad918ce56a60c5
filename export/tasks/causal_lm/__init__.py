"""Export of causal language-model (GPT) runs.

SavedModel (TF Serving), core ops only, loadable with TensorFlow alone:
- `generate` (also `serving_default`): per prompt a string and its own
  `max_new_tokens`, `temperature`, `top_k` (0: none), `top_p` (1: none) and
  `seed`, each `(batch,)`, any batch size (0 too). The prompt is read as
  UTF-8 (invalid bytes become U+FFFD), its last 16 KiB tokenized in the graph
  and cut from the left to leave `max_new_tokens` of the context (an empty
  prompt starts from the start token). Sampling is
  `tfformer.decoding.Generator`'s (inverse transform on the portable
  stream): `top_k=1` is greedy. Returns the continuation's `text`, its
  `token_ids` and `log_probs` (each token's log-probability under the
  model, before temperature and filters) `(batch, longest)` padded with 0,
  `num_tokens` and `prompt_tokens` `(batch,)`. A bad setting fails the call
  with an InvalidArgumentError naming it.
- `score`: texts `(batch,)` -> `log_likelihood` (the sum of log P of every
  token after the first, each given the tokens before it in its window:
  windows of `context` + 1 tokens overlapping by one, as training and
  `tfformer-evaluate` cut the stream, except that a text's last partial
  window is scored too, where evaluation drops it), `num_tokens` (scored
  tokens) and `token_log_probs` `(batch, tokens)` (0 at the first). Texts
  are cut to their first 16 KiB.
- `logits`: `token_ids (batch, T<=context)` -> `logits (batch, T, vocab)`.
- `tokenize` / `detokenize`.

TFLite (LiteRT), builtin ops only, in the shape of ai-edge-torch's
generative models (but for the caches' layout, which is LiteRT-LM's) so
that an app owns the loop and the sampling:
- `model.tflite` (or `model_<quantize>.tflite`) with two signatures:
  `prefill` (`tokens` int32 `(1, N)`, `input_pos` int32 `(N,)`, the caches)
  -> the caches, and `decode` (`tokens` `(1, 1)`, `input_pos` `(1,)`, the
  caches) -> `logits` `(1, 1, vocab)` and the caches. The caches are
  `kv_cache_k_{i}` / `kv_cache_v_{i}`, float32 `(1, kv_heads, context,
  head_dim)` per layer (the layout LiteRT-LM reads the cache length from),
  the same names in and out; positions must be contiguous from
  `input_pos[0]`. Like ai-edge-torch, `prefill` returns no logits: the app
  prefills the prompt and then decodes its last token again. With
  `prefill_lengths` of more than one length the signatures are
  `prefill_{N}`, as ai-edge-torch names them.
- `model_loop.tflite`: the convenience form, `token_ids` `(1, context)` (the
  prompt, right-padded with 0) and `max_new_tokens` `(1,)` in, `token_ids`
  `(1, context)` out, the greedy KV-cached loop inside (one WHILE op, which
  the GPU delegate cannot run). The app cuts the prompt: the model reads its
  first context - 1 ids (leave room for the new tokens: at most context -
  max_new_tokens; a prompt that starts with the start token, as Llama 3's
  tokenizer makes it, keeps it first when cut), clips `max_new_tokens` into [0,
  context - 1] and generates until [END] or the context ends. An empty
  prompt (all 0) starts from [START]. (A converted checkpoint's start and
  end ids are its own, in `text.json`'s `special_ids`, and it ends at each
  id of `end_ids` there.)
- `text.json`, the vocabulary (a converted run's tokenizer file,
  `text_tokenizer.json`), `tokenizer.py` (the translator's reference
  tokenizer, reused; GPT-2's and Llama 3's byte-level BPE and token ids
  for converted runs) and `generate.py` (`export/runtimes/generate.py`, the
  reference runtime that drives prefill/decode and samples exactly as the
  Keras generator does).

The package: `run` (the run and its tokenizers), `serving` (the SavedModel's
graph), `litert` (the LiteRT signatures, the loop model, calibration
samples) and `exporter` (the `Exporter` that ties them together).
"""

from tfformer.export.tasks.causal_lm.exporter import EXPORTER
from tfformer.export.tasks.causal_lm.run import CausalLMRun

# A causal-LM run as a `CausalLMRun`, for scripts and tests.

__all__ = ["EXPORTER", "CausalLMRun"]
