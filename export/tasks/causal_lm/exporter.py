"""The causal-LM task's exporter: the SavedModel of `serving`, the two
LiteRT models of `litert`, and `text.json`, the vocabulary (or a converted
run's tokenizer file), `tokenizer.py` and `generate.py` beside them."""

import os

from tfformer.errors import InputError
from tfformer.export import runtimes
from tfformer.export.exporter import CALIBRATED, Exporter, TFLiteSource
from tfformer.export.lora_file import write_lora_file
from tfformer.export.quality import NATS
from tfformer.export.tasks.causal_lm import lora as lora_inputs
from tfformer.export.tasks.causal_lm.litert import (
    calibration_samples,
    check_decode_batch,
    check_prefill_lengths,
    write_device_saved_model,
    write_loop_saved_model,
)
from tfformer.export.tasks.causal_lm.run import (
    CONVERTED_KINDS,
    CausalLMRun,
    converted_tokenizer,
)
from tfformer.export.tasks.causal_lm.serving import GeneratorGraph
from tfformer.export.tasks.text import device_text_settings
from tfformer.export.wordpiece import probe_character_classes
from tfformer.preprocessing.text import PAD_ID
from tfformer.runs.files import atomic_copy

VOCABULARY_FILE = "text_vocab.txt"
# A converted decoder's tokenizer file (GPT-2's BPE, token ids) on device.
CONVERTED_TOKENIZER = "text_tokenizer.json"


class CausalLMExporter(Exporter):
    """The causal-LM task's exporter."""

    task = "causal_lm"
    run_type = CausalLMRun
    quality_metric = NATS

    def add_arguments(self, parser):
        parser.add_argument(
            "--jit-compile",
            action="store_true",
            help="saved_model: XLA-compile the generation loop (the server needs XLA)",
        )
        parser.add_argument(
            "--prefill-lengths",
            help="tflite: comma-separated prompt lengths of the prefill "
            "signatures (default: the context; several give prefill_N)",
        )
        parser.add_argument(
            "--decode-batch",
            type=int,
            help="tflite: also a decode_batch signature that steps this many "
            "sequences at once, each at its own position (generate.py's "
            "BatchedGenerator)",
        )
        parser.add_argument(
            "--lora",
            choices=["merge", "file"],
            default="merge",
            help="tflite, litertlm: a LoRA run's adapters merged into the weights "
            "(default) or kept apart in lora.tflite, a LiteRT-LM LoRA file for "
            "the model the run started from",
        )

    def saved_model_options(self, args):
        return {"jit_compile": args.jit_compile}

    def tflite_options(self, args):
        options = {"decode_batch": args.decode_batch, "lora": args.lora}
        if not args.prefill_lengths:
            return {"prefill_lengths": None, **options}
        try:
            lengths = [int(x) for x in args.prefill_lengths.split(",")]
        except ValueError:
            raise InputError(
                "--prefill-lengths must be comma-separated ints. Received: "
                f"{args.prefill_lengths!r}"
            ) from None
        return {"prefill_lengths": lengths, **options}

    def task_run(self, run, model, tokenizers):
        spec = tokenizers["text"]
        special = {}
        if spec.kind in CONVERTED_KINDS:
            # A converted checkpoint's own start and end ids.
            tokenizer = converted_tokenizer(spec)
            special = {
                "start_id": tokenizer.start_id,
                "end_id": tokenizer.end_id,
                "end_ids": tuple(run.manifest.ends(tokenizer.end_id)),
            }
        return CausalLMRun(
            directory=run.path,
            model=model,
            text=spec,
            context=run.manifest.max_length,
            vocabulary_size=int(model.backbone.token_embedding.vocabulary_size),
            **special,
        )

    def saved_model(self, run, path, **options):
        graph = GeneratorGraph(run, **options)
        graph.write(path)
        return graph.settings

    def check_tflite_options(
        self, quantize, prefill_lengths=None, decode_batch=None, lora="merge"
    ):
        super().check_tflite_options(quantize)
        check_decode_batch(decode_batch)
        if lora_inputs.check_lora_option(lora) == "file" and (
            decode_batch or quantize in CALIBRATED
        ):
            raise InputError(
                "--lora file adds LoRA inputs to prefill and decode only: it "
                "takes no --decode-batch and no calibrated quantization. "
                f"Received: --decode-batch {decode_batch}, --quantize {quantize}"
            )

    def tflite_sources(
        self,
        run,
        staging,
        quantize,
        prefill_lengths=None,
        decode_batch=None,
        lora="merge",
    ):
        """`model` (prefill/decode, and decode_batch when asked) and
        `model_loop` (the run's model, adapters merged), for every
        quantization."""
        del quantize
        device = os.path.join(staging, "device")
        keys = write_device_saved_model(
            run, device, prefill_lengths, decode_batch, lora
        )
        loop = os.path.join(staging, "loop")
        write_loop_saved_model(run, loop)
        return [
            TFLiteSource("model", device, signature_keys=keys),
            TFLiteSource("model_loop", loop),
        ]

    def calibration(
        self,
        run,
        texts,
        quantize,
        prefill_lengths=None,
        decode_batch=None,
        lora="merge",
        limit=64,
    ):
        """Full-int8 samples: caches and tokens of real text for `decode`
        and each `prefill`, and prompts for the loop model."""
        del quantize  # the same samples for both
        texts = [t for t in texts if t.strip()][:limit]
        if not texts:
            raise InputError(
                "representative_sentences is empty; full-int8 calibration needs "
                "real text (for example lines of the training file)."
            )
        lengths = check_prefill_lengths(prefill_lengths, run.context)
        return calibration_samples(run, texts, lengths, decode_batch)

    def device_files(
        self, run, out_dir, prefill_lengths=None, decode_batch=None, lora="merge"
    ):
        """The vocabulary (a converted run's tokenizer file), `text.json`,
        `tokenizer.py` and `generate.py` (and with `lora` "file",
        `lora.tflite` and `lora_none.tflite`)."""
        del decode_batch  # the runtime reads it from the model
        if lora == "merge":
            lora_inputs.remove_stale_files(out_dir)
        else:
            adapters, rank = lora_inputs.run_adapters(run)
            blocks = run.model.backbone.decoder_blocks
            path = os.path.join(out_dir, lora_inputs.LORA_FILE)
            weights = lora_inputs.file_weights(blocks, adapters, rank)
            write_lora_file(path, weights, rank)
            none = os.path.join(out_dir, lora_inputs.NO_LORA_FILE)
            write_lora_file(none, {}, rank)
            runtimes.record_digests(out_dir, [path, none])
        lengths = list(check_prefill_lengths(prefill_lengths, run.context))
        if run.converted:
            atomic_copy(run.text.path, os.path.join(out_dir, CONVERTED_TOKENIZER))
            settings = {
                "tokenizer": run.text.kind,
                "tokenizer_file": CONVERTED_TOKENIZER,
                "special_ids": {
                    "pad": PAD_ID,
                    "start": run.start_id,
                    "end": run.end_id,
                },
                # Every id that ends generation (several: a checkpoint
                # whose eos_token_id lists them).
                "end_ids": run.ends,
                "source_length": run.context,
                "context": run.context,
                "prefill_lengths": lengths,
            }
        else:
            vocabulary = {}
            if run.text.kind == "wordpiece":
                atomic_copy(run.text.path, os.path.join(out_dir, VOCABULARY_FILE))
                vocabulary = {
                    "source_vocabulary": VOCABULARY_FILE,
                    "target_vocabulary": VOCABULARY_FILE,
                }
            classes = (
                probe_character_classes() if run.text.kind == "wordpiece" else None
            )
            settings = device_text_settings(
                run.text.kind,
                run.text.lower_case,
                classes,
                source_length=run.context,
                context=run.context,
                prefill_lengths=lengths,
                **vocabulary,
            )
        runtimes.write_settings(out_dir, "text.json", settings)
        runtimes.ship(out_dir, "tokenizer.py", "generate.py")

    def quality_samples(self, run, path):
        from tfformer.export.tasks.causal_lm.quality import heldout_text

        return heldout_text(run, path)

    def quality(self, run, float32_path, quantized_path, samples):
        from tfformer.export.tasks.causal_lm import quality

        ids = quality.heldout_ids(run, samples, "the held-out text")
        return quality.measure(float32_path, quantized_path, ids, run.context)


EXPORTER = CausalLMExporter()
