"""`tfformer-convert --from DIR --out RUN`: a Hugging Face checkpoint
directory (config.json, model.safetensors, tokenizer files) into a tfformer
run directory that tfformer-predict, tfformer-evaluate, tfformer-export and
`model.init_from` accept. Nothing is downloaded; nothing is written unless
the conversion succeeds."""

import argparse
import sys

from tfformer.errors import InputError


def main(argv=None, prog="tfformer-convert"):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="DIR",
        help="the Hugging Face checkpoint directory",
    )
    parser.add_argument(
        "--out", required=True, metavar="RUN", help="the run directory to write"
    )
    args = parser.parse_args(argv)
    from tfformer.training.convert import convert

    try:
        convert(args.source, args.out, progress=print)
    except InputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
