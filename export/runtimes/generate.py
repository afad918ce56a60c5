"""Reference runtime of a tfformer text generator on LiteRT: drives the
`prefill` and `decode` signatures of `model.tflite` and samples by
`tfformer.decoding.Generator`'s rules, in Python with NumPy and
`ai_edge_litert` only. The reference to port to an app (Kotlin, Swift, C++).
On the float32 model it writes the Keras generator's tokens (the tests
compare them); float rounding could still flip a draw that falls within
about 1e-6 of a boundary between two tokens, and a quantized model's
logits move by more.

The loop, for prompt ids p[0..n-1] (n >= 1; an empty prompt is [START],
id 2 or `special_ids["start"]` of `text.json`):
  1. Zero caches: every `kv_cache_*` input of `decode`, float32, its shape.
  2. `prefill` p[0..n-2] at positions 0..n-2 (padded with 0 to the
     signature's length; the padding's cache rows are overwritten later).
     A prefill writes positions input_pos[0] .. input_pos[0] + N - 1, which
     must lie inside the context (past it the update is clamped and
     shifted); what does not fit a prefill goes through `decode`.
  3. `decode` p[n-1] at position n-1: logits for column n.
  4. Choose the token of column c from the logits (below); stop after
     [END] (id 3, or a converted checkpoint's: `special_ids["end"]` and
     every id of `end_ids` in `text.json`), after `max_new_tokens` tokens
     or at the context's end;
     otherwise `decode` it at position c and go on with c + 1.

Choosing (the Keras generator's rules): log-probabilities = log_softmax(
logits); [PAD] (id 0) is never chosen. Greedy: the largest, ties to the
lowest id. Sampling: divide by `temperature`, keep the `top_k` largest
(0: all) and the smallest set whose probability reaches `top_p` (1: all),
then inverse transform with u = uniform(seed, c): the first token whose
cumulative probability exceeds u times the total. uniform() is lowbias32
hashing (see `uniform`), so the same seed gives the same tokens as the
Keras generator and the SavedModel's `generate` (row r of a Keras batch
uses seed + r), up to float rounding (above).

A model exported with `--lora file` takes LoRA inputs (`lora_*`) in
`prefill` and `decode`: zeros (the model the run started from), or the
weights of a LoRA file (`lora.tflite`, `LiteRTGenerator(..., lora=PATH)`),
bound by name as LiteRT-LM binds them (a missing one is zeros).

Several sequences at once: a model exported with `--decode-batch B` has a
`decode_batch` signature (B tokens, one position each); `BatchedGenerator`
joins sequences into its rows between steps and steps them all with one
call, each choosing its tokens by the rules above.

Example:
>>> runtime = LiteRTGenerator("device/model.tflite")
>>> runtime.generate_text("ROMEO:", max_new_tokens=40, top_k=20, seed=1)
"""

import importlib.util
import os

import numpy as np

PAD, UNK, START, END = 0, 1, 2, 3
NEG_INF = -1e9
MIN_TEMPERATURE = np.float32(1e-6)  # smaller positive ones act as this


def lowbias32(x):
    """Chris Wellons' lowbias32 on a uint32 array (wrapping arithmetic)."""
    x = np.asarray(x, np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        x = x ^ (x >> np.uint32(16))
    return x


def uniform(seed, position):
    """The uniform in [0, 1) of `position` for `seed` (an int, taken mod
    2**32): lowbias32(lowbias32(lowbias32(seed) + position)) >> 8, / 2**24."""
    with np.errstate(over="ignore"):
        x = lowbias32(np.uint32(seed % 2**32)) + np.uint32(position)
    x = lowbias32(lowbias32(x)) >> np.uint32(8)
    return np.float32(x) * np.float32(2.0**-24)


def log_softmax(logits):
    logits = np.asarray(logits, np.float32)
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum(dtype=np.float32))


def filter_logits(logits, temperature=1.0, top_k=0, top_p=1.0):
    """Scaled logits `(vocab,)` with everything outside top-k/top-p at NEG_INF."""
    logits = np.asarray(logits, np.float32)
    temperature = max(np.float32(temperature), MIN_TEMPERATURE)
    with np.errstate(over="ignore"):
        logits = (logits - logits.max()) / temperature
    logits = np.maximum(logits, np.float32(NEG_INF))
    descending = -np.sort(-logits)
    vocabulary = len(logits)
    masked = np.zeros(vocabulary, bool)
    if top_k > 0:
        masked |= logits < descending[min(top_k, vocabulary) - 1]
    if top_p < 1.0:
        shifted = np.exp(descending - descending[0])
        probabilities = shifted / shifted.sum(dtype=np.float32)
        before = np.cumsum(probabilities, dtype=np.float32) - probabilities
        threshold = descending[before < np.float32(top_p)].min()
        masked |= logits < threshold
    return np.where(masked, np.float32(NEG_INF), logits)


def sample(logits, u):
    """Inverse transform: the first token whose cumulative probability
    exceeds u * total, never one of probability 0."""
    shifted = np.exp(logits - logits.max())
    probabilities = shifted / shifted.sum(dtype=np.float32)
    cumulative = np.cumsum(probabilities, dtype=np.float32)
    index = int(np.sum(cumulative <= np.float32(u) * cumulative[-1]))
    return min(index, int(np.flatnonzero(probabilities > 0)[-1]))


def choose(logits, position, *, greedy, temperature, top_k, top_p, seed):
    """(token, its log-probability) for column `position`. A row with a NaN
    (or an infinity, which log-softmax turns into NaN) gets the lowest id
    that is not padding, as the Keras generator's draw does."""
    log_probs = log_softmax(logits)
    if np.isnan(log_probs).any():
        token = 1 if PAD == 0 else 0
        return token, float(log_probs[token])
    allowed = log_probs.copy()
    allowed[PAD] = NEG_INF
    if greedy:
        token = int(np.argmax(allowed))
    else:
        filtered = filter_logits(allowed, temperature, top_k, top_p)
        token = sample(filtered, uniform(seed, position))
    return token, float(log_probs[token])


def check_settings(max_new_tokens, temperature, top_k, top_p, context):
    if not 0 <= max_new_tokens <= context - 1:
        raise ValueError(
            f"max_new_tokens must be in [0, {context - 1}] (the context is "
            f"{context} tokens). Received: max_new_tokens={max_new_tokens}"
        )
    if not temperature > 0 or not np.isfinite(temperature):
        raise ValueError(
            f"temperature must be positive and finite. Received: {temperature}"
        )
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0: none). Received: top_k={top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]. Received: top_p={top_p}")


def load_model_file():
    """`model_file.py`, shipped beside this file: it finds, checks and opens
    the model and the files beside it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_file.py")
    spec = importlib.util.spec_from_file_location("tfformer_device_model_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # FileNotFoundError naming a missing one
    return module


class LiteRTGenerator:
    """A text generator's `.tflite` (prefill/decode signatures) and its
    tokenizer files, run with the `ai_edge_litert` Interpreter.

    Args:
        path: the `.tflite` file; `text.json` (and the vocabulary) and
            `tokenizer.py` are read from its directory when text is used.
        lora: a LoRA file for a model exported with `--lora file`.
    """

    def __init__(self, path, num_threads=None, lora=None):
        model_file = load_model_file()
        self.interpreter = model_file.open_interpreter(path, num_threads)
        signatures = self.interpreter.get_signature_list()
        if "decode" not in signatures:
            raise ValueError(
                f"{path} has no 'decode' signature (signatures: "
                f"{sorted(signatures)}); is it model_loop.tflite?"
            )
        self.directory = os.path.dirname(os.path.abspath(path))
        self.decoder = self.interpreter.get_signature_runner("decode")
        details = self.decoder.get_input_details()
        self.cache_shapes = {
            name: tuple(int(d) for d in detail["shape"])
            for name, detail in details.items()
            if name.startswith("kv_cache_")
        }
        # Caches are (1, kv_heads, context, head_dim).
        self.context = next(iter(self.cache_shapes.values()))[2]
        self.lora_inputs = {
            name: np.zeros([int(d) for d in detail["shape"]], np.float32)
            for name, detail in details.items()
            if name.startswith("lora_")
        }
        if lora is not None:
            self.load_lora(model_file, path, lora)
        self.prefills = {}
        for key in signatures:
            if key == "prefill" or key.startswith("prefill_"):
                runner = self.interpreter.get_signature_runner(key)
                length = int(runner.get_input_details()["tokens"]["shape"][1])
                self.prefills[length] = runner
        self._tokenizer = None
        # A converted checkpoint's start and end ids are in text.json
        # (`end_ids`: every id that ends generation, as a Llama 3.1 Instruct
        # config.json lists three).
        self.start_id, self.end_id = START, END
        self.end_ids = {END}
        settings = os.path.join(self.directory, "text.json")
        if os.path.isfile(settings):
            written = model_file.read_settings(settings)
            special = written.get("special_ids") or {}
            self.start_id = special.get("start", START)
            self.end_id = special.get("end", END)
            self.end_ids = set(written.get("end_ids", ())) | {self.end_id}
            # A model of the older (1, context, kv_heads, head_dim) layout
            # would read its head count as the context here.
            if written.get("context", self.context) != self.context:
                raise ValueError(
                    f"{path}'s caches are {next(iter(self.cache_shapes.values()))}, "
                    f"(1, kv_heads, context, head_dim) for a context of "
                    f"{self.context}, but text.json says the context is "
                    f"{written['context']}: export the run again."
                )

    def load_lora(self, model_file, path, lora):
        if not self.lora_inputs:
            raise ValueError(
                f"{path} takes no LoRA weights (exported without --lora file); "
                f"lora={lora!r} cannot apply"
            )
        weights, _ = model_file.read_lora_file(lora)
        for name, value in weights.items():
            if name not in self.lora_inputs:
                raise ValueError(f"{lora}: {name!r} is not an input of {path}")
            if value.shape != self.lora_inputs[name].shape:
                raise ValueError(
                    f"{lora}: {name!r} must be {self.lora_inputs[name].shape}. "
                    f"Received: {value.shape}"
                )
            self.lora_inputs[name] = value

    # -- the two signatures --------------------------------------------------------

    def new_cache(self):
        return {n: np.zeros(s, np.float32) for n, s in self.cache_shapes.items()}

    def check_cache(self, cache):
        for name, shape in self.cache_shapes.items():
            if name not in cache:
                raise ValueError(f"cache lacks {name!r} {shape}.")
            value = np.asarray(cache[name])
            if value.shape != shape or value.dtype != np.float32:
                raise ValueError(
                    f"cache tensor {name!r} must be float32 {shape}. Received: "
                    f"{value.dtype} {value.shape}"
                )

    def decode(self, token, position, cache):
        """Logits `(vocab,)` after `token` at `position`, and the new cache."""
        self.check_cache(cache)
        if not 0 <= position < self.context:
            raise ValueError(
                f"position must be in [0, {self.context}). Received: {position}"
            )
        out = self.decoder(
            tokens=np.array([[token]], np.int32),
            input_pos=np.array([position], np.int32),
            **cache,
            **self.lora_inputs,
        )
        logits = out.pop("logits")[0, -1]
        return logits, out

    def prefill(self, ids, cache, start=0):
        """The cache after `ids` at positions start, start + 1, ... (in
        chunks of the prefill lengths; each chunk padded with 0)."""
        self.check_cache(cache)
        ids = [int(i) for i in ids]
        if start + len(ids) > self.context:
            raise ValueError(
                f"{len(ids)} ids from position {start} exceed the context "
                f"({self.context})."
            )
        padded = np.zeros(self.context, np.int32)
        padded[start : start + len(ids)] = ids
        done, end = start, start + len(ids)
        while done < end:
            fits = [n for n in sorted(self.prefills) if n >= end - done]
            length = fits[0] if fits else max(self.prefills)
            if done + length > self.context:
                # The update would be clamped and shifted past the cache's
                # end: the rest goes one token at a time.
                for position in range(done, end):
                    _, cache = self.decode(int(padded[position]), position, cache)
                break
            cache = self.prefills[length](
                tokens=padded[None, done : done + length],
                input_pos=np.arange(done, done + length, dtype=np.int32),
                **cache,
                **self.lora_inputs,
            )
            done += length
        return cache

    # -- generation ------------------------------------------------------------------

    def cut_prompt(self, prompt_ids, max_new_tokens):
        """The ids `generate` reads of `prompt_ids` (see there); [start] for
        an empty prompt."""
        keep = min(self.context - max_new_tokens, self.context - 1)
        ids = [int(i) for i in prompt_ids]
        if len(ids) > keep and ids[0] == self.start_id:
            ids = ids[:1] + ids[len(ids) - keep + 1 :]
        return ids[-keep:] or [self.start_id]

    def generate(
        self,
        prompt_ids,
        max_new_tokens=32,
        *,
        greedy=False,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        seed=0,
    ):
        """(generated ids, their log-probabilities) after `prompt_ids`
        (its last context - max_new_tokens ids, at most context - 1; a first
        id that is the start token stays first, as Llama 3's tokenizer puts
        it there and a prompt of ids may)."""
        check_settings(max_new_tokens, temperature, top_k, top_p, self.context)
        ids = self.cut_prompt(prompt_ids, max_new_tokens)
        cache = self.prefill(ids[:-1], self.new_cache())
        logits, cache = self.decode(ids[-1], len(ids) - 1, cache)
        new, log_probs = [], []
        for column in range(len(ids), min(len(ids) + max_new_tokens, self.context)):
            token, log_p = choose(
                logits,
                column,
                greedy=greedy,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed,
            )
            new.append(token)
            log_probs.append(log_p)
            if token in self.end_ids or column + 1 == self.context:
                break
            if len(new) < max_new_tokens:
                logits, cache = self.decode(token, column, cache)
        return new, log_probs

    @property
    def tokenizer(self):
        """`DeviceTokenizer` of `tokenizer.py` next to the model."""
        if self._tokenizer is None:
            model_file = load_model_file()
            model_file.neighbour(self.directory, "text.json")
            module = model_file.load_module(self.directory, "tokenizer")
            self._tokenizer = module.DeviceTokenizer(self.directory)
        return self._tokenizer

    def generate_text(self, prompt, max_new_tokens=32, **settings):
        """The continuation of `prompt` (str or bytes; invalid UTF-8 becomes
        U+FFFD, as in the SavedModel)."""
        if isinstance(prompt, bytes):
            prompt = prompt.decode("utf-8", "replace")
        ids = self.tokenizer.ids(prompt)
        new, _ = self.generate(ids, max_new_tokens, **settings)
        if new and new[-1] in self.end_ids:
            new = new[:-1]  # an end token is not text
        converted = self.tokenizer.converted
        if getattr(converted, "STARTS_TEXT_DIFFERENTLY", False):
            # The whole text less the prompt's, as the SavedModel and
            # tfformer-predict write it: SentencePiece drops a first piece's
            # leading space only at the start of a text.
            before, whole = converted.text(ids), converted.text(ids + new)
            if whole.startswith(before):
                return whole[len(before) :]
        return self.tokenizer.detokenize(new)


class BatchedGenerator:
    """Several sequences decoded together (continuous batching): up to B
    live sequences in one batched cache, stepped by one `decode_batch` call
    per step, each at its own position; a sequence joins (its prompt is
    prefilled alone, then copied into a free row) and leaves between steps.
    Each sequence gets the tokens `LiteRTGenerator.generate` gives it alone,
    with the same settings and seed (up to float rounding: the batched
    kernels may round differently).

    The model is `model*.tflite` exported with `--decode-batch B`.

    Example:
    >>> batch = BatchedGenerator("device/model.tflite")
    >>> a = batch.join(ids_a, 40, greedy=True)
    >>> b = batch.join(ids_b, 40, top_k=20, seed=1)
    >>> while batch.live: batch.step()
    >>> batch.tokens(a), batch.tokens(b)
    """

    def __init__(self, path, num_threads=None):
        self.single = LiteRTGenerator(path, num_threads)
        signatures = self.single.interpreter.get_signature_list()
        if "decode_batch" not in signatures:
            raise ValueError(
                f"{path} has no 'decode_batch' signature (signatures: "
                f"{sorted(signatures)}): export it with --decode-batch B."
            )
        self.runner = self.single.interpreter.get_signature_runner("decode_batch")
        details = self.runner.get_input_details()
        self.batch = int(details["tokens"]["shape"][0])
        self.context = self.single.context
        self.cache = {
            name: np.zeros(tuple(int(d) for d in details[name]["shape"]), np.float32)
            for name in self.single.cache_shapes
        }
        self.rows = [None] * self.batch  # the live sequence in each row
        self.sequences = {}  # id -> its state
        self.next_id = 0

    @property
    def live(self):
        """The ids of the sequences still generating."""
        return [s["id"] for s in self.rows if s is not None]

    def decode_batch(self, tokens, positions, cache):
        """Logits `(B, vocab)` after `tokens[r]` at `positions[r]` of each
        row r, and the new cache (one call)."""
        positions = np.asarray(positions, np.int32).reshape(-1)
        tokens = np.asarray(tokens, np.int32).reshape(-1, 1)
        if positions.shape != (self.batch,) or tokens.shape != (self.batch, 1):
            raise ValueError(
                f"tokens and input_pos must hold {self.batch} rows. Received: "
                f"tokens {tokens.shape}, input_pos {positions.shape}"
            )
        if positions.min() < 0 or positions.max() >= self.context:
            raise ValueError(
                f"input_pos must lie in [0, {self.context}) (the context). "
                f"Received: {positions.tolist()}"
            )
        out = self.runner(tokens=tokens, input_pos=positions, **cache)
        return out.pop("logits")[:, -1], out

    def join(self, prompt_ids, max_new_tokens=32, **settings):
        """Starts a sequence after `prompt_ids` (cut as `generate` cuts it)
        in a free row; returns its id. `settings`: `generate`'s (greedy,
        temperature, top_k, top_p, seed). ValueError when every row is
        live."""
        defaults = {
            "greedy": False,
            "temperature": 1.0,
            "top_k": 0,
            "top_p": 1.0,
            "seed": 0,
        }
        unknown = sorted(set(settings) - set(defaults))
        if unknown:
            raise ValueError(
                f"join() takes {sorted(defaults)} as settings. Received: {unknown}"
            )
        settings = {**defaults, **settings}
        check_settings(
            max_new_tokens,
            settings["temperature"],
            settings["top_k"],
            settings["top_p"],
            self.context,
        )
        single = self.single
        state = {
            "id": self.next_id,
            "left": max_new_tokens,
            "settings": settings,
            "tokens": [],
            "log_probs": [],
        }
        self.next_id += 1
        self.sequences[state["id"]] = state
        if max_new_tokens == 0:  # done at once, as `generate` is
            state["row"] = None
            return state["id"]
        if None not in self.rows:
            del self.sequences[state["id"]]
            raise ValueError(
                f"all {self.batch} rows are live (sequences {self.live}): "
                "step until one ends, or leave one."
            )
        ids = single.cut_prompt(prompt_ids, max_new_tokens)
        alone = single.prefill(ids[:-1], single.new_cache())
        row = self.rows.index(None)
        for name, value in alone.items():
            self.cache[name][row] = value[0]
        state.update(row=row, token=ids[-1], position=len(ids) - 1)
        self.rows[row] = state
        return state["id"]

    def step(self):
        """One `decode_batch` call for every live sequence; returns {id: the
        token it chose}. A sequence that chose an end id, reached its
        `max_new_tokens` or the context leaves its row."""
        states = [s for s in self.rows if s is not None]
        if not states:
            return {}
        # A free row steps padding at position 0: its own slot, which the
        # next join overwrites.
        tokens = [PAD if s is None else s["token"] for s in self.rows]
        positions = [0 if s is None else s["position"] for s in self.rows]
        logits, self.cache = self.decode_batch(tokens, positions, self.cache)
        chosen = {}
        for state in states:
            column = state["position"] + 1
            token, log_p = choose(logits[state["row"]], column, **state["settings"])
            state["tokens"].append(token)
            state["log_probs"].append(log_p)
            state["left"] -= 1
            chosen[state["id"]] = token
            ended = token in self.single.end_ids or column + 1 == self.context
            if ended or state["left"] == 0:
                self.rows[state["row"]] = None
            else:
                state["token"], state["position"] = token, column
        return chosen

    def leave(self, sequence):
        """Ends the live sequence `sequence` now, freeing its row."""
        state = self.sequences.get(sequence)
        if (
            state is None
            or state["row"] is None
            or self.rows[state["row"]] is not state
        ):
            raise ValueError(f"sequence {sequence!r} is not live (live: {self.live}).")
        self.rows[state["row"]] = None

    def tokens(self, sequence):
        """(the ids `sequence` generated so far, their log-probabilities)."""
        if sequence not in self.sequences:
            raise ValueError(f"no sequence {sequence!r} joined this batch.")
        state = self.sequences[sequence]
        return list(state["tokens"]), list(state["log_probs"])


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="model.tflite (or a quantized variant)")
    p.add_argument("prompt")
    p.add_argument(
        "--max-new-tokens", type=int, help="default: up to the end of the context"
    )
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lora", help="a LoRA file (a model exported with --lora file)")
    args = p.parse_args(argv)
    # Bytes that are not UTF-8 arrive as lone surrogates; U+FFFD instead.
    prompt = os.fsencode(args.prompt).decode("utf-8", "replace")
    try:
        runtime = LiteRTGenerator(args.model, lora=args.lora)
        new = (
            runtime.context - 1 if args.max_new_tokens is None else args.max_new_tokens
        )
        text = runtime.generate_text(
            prompt,
            new,
            greedy=args.greedy,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
        )
    except (OSError, ValueError, ImportError) as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    except RuntimeError as e:  # LiteRT failed on a model SHA256SUMS does not list
        p.exit(2, f"{p.prog}: error: LiteRT could not run {args.model} ({e})\n")
    print(prompt + text)


if __name__ == "__main__":
    main()
