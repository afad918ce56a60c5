"""`tfformer-evaluate`: translate a test set, report sacreBLEU, chrF and speed."""

import argparse
import json
import os
import sys

from training.atomic import atomic_write_text
from training.translate import add_translator_arguments, translator_from_args


def score_translations(hypotheses, references):
    """sacreBLEU BLEU and chrF, cased and lowercased, with their signatures."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(
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
    return scores


def evaluate(translator, pairs, *, progress=print):
    """Translates the sources of `pairs`; returns scores, speed and examples."""
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    translator.stats = {"sentences": 0, "tokens": 0, "seconds": 0.0}
    translator.translate(sources[: translator.batch_size])  # compile once
    translator.stats = {"sentences": 0, "tokens": 0, "seconds": 0.0}
    hypotheses = []
    for start in range(0, len(sources), 256):
        hypotheses += translator.translate(sources[start : start + 256])
        progress(f"translated {len(hypotheses)}/{len(sources)}")
    stats = translator.stats
    results = score_translations(hypotheses, references)
    results.update(
        sentences=len(pairs),
        exact_match=sum(h == r for h, r in zip(hypotheses, references, strict=True))
        / max(len(pairs), 1),
        decode_seconds=round(stats["seconds"], 3),
        sentences_per_second=round(stats["sentences"] / max(stats["seconds"], 1e-9), 2),
        tokens_per_second=round(stats["tokens"] / max(stats["seconds"], 1e-9), 1),
        search=translator.generator.search,
        beam_width=translator.generator.beam_width,
        length_penalty=translator.generator.length_penalty,
        examples=[
            {"source": s, "reference": r, "translation": h}
            for s, r, h in list(zip(sources, references, hypotheses, strict=True))[:5]
        ],
    )
    return results


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfformer-evaluate",
        description="Translate a test set with a trained run; report BLEU and chrF.",
    )
    add_translator_arguments(parser)
    parser.add_argument(
        "--source", help="test source file (default: the run's test split)"
    )
    parser.add_argument("--target", help="test reference file")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only")
    parser.add_argument("--output", help="JSON file for the results")
    parser.add_argument(
        "--attention-plot",
        metavar="PNG",
        help="also plot the cross-attention of the first test sentence to PNG",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from training.data import raw_splits
    from training.text_files import read_parallel_text

    try:
        if bool(args.source) != bool(args.target):
            raise ValueError("--source and --target go together.")
        translator = translator_from_args(args, batch_size=args.batch_size)
        if args.source:
            pairs = read_parallel_text(args.source, args.target)
        else:
            pairs = raw_splits(translator.config.data)["test"]
    except (ValueError, TypeError) as e:
        print(f"tfformer-evaluate: error: {e}", file=sys.stderr)
        return 2
    if args.limit:
        pairs = pairs[: args.limit]
    results = evaluate(translator, pairs, progress=lambda m: print(m, file=sys.stderr))
    if args.attention_plot:
        from training.attention_maps import attention_map_for

        attention_map_for(translator, pairs[0][0], args.attention_plot)
        results["attention_plot"] = os.path.abspath(args.attention_plot)
    text = json.dumps(results, indent=2, ensure_ascii=False)
    if args.output:
        atomic_write_text(args.output, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
