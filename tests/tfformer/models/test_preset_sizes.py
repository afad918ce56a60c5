"""The large presets' parameter counts: exact against a hand count of the
architecture, and close to the figure the paper published.

The models are built for real (the functional graph, every layer, every
variable's shape), but inside a `keras.StatelessScope` that leaves the
variables uninitialized: drawing ~530M random numbers would take most of a
minute on a 2-core machine and 2 GB of memory, and a count needs only shapes.
The hand counts read no sizes from `PRESETS`, so a change to a preset's size
fails here.
"""

import keras
import pytest

from tfformer.models import from_preset


def attention(d):
    """Q, K, V and output projections: a d x d kernel and d biases each."""
    return 4 * d * d + 4 * d


def feed_forward(d, f):
    """W1 (d x f) + b1, W2 (f x d) + b2."""
    return 2 * d * f + f + d


def layer_norm(d):
    return 2 * d  # gamma, beta


def encoder_layer(d, f):
    return attention(d) + feed_forward(d, f) + 2 * layer_norm(d)


def decoder_layer(d, f):
    """Self-attention, cross-attention, FFN, a LayerNorm after each."""
    return 2 * attention(d) + feed_forward(d, f) + 3 * layer_norm(d)


def transformer_big(vocabulary=37_000, d=1024, f=4096, layers=6):
    # One vocabulary shared by source, target and the output projection, as
    # the paper's EN-DE model (tie_embeddings="all"); sinusoidal positions
    # have no weights; post-norm, so no final LayerNorms.
    return vocabulary * d + layers * (encoder_layer(d, f) + decoder_layer(d, f))


def bert_base(vocabulary=30_522, d=768, f=3072, layers=12, positions=512):
    embeddings = vocabulary * d + positions * d + 2 * d + layer_norm(d)  # 2 segments
    pooler = d * d + d
    return embeddings + layers * encoder_layer(d, f) + pooler


def gpt2_small(vocabulary=50_257, d=768, f=3072, layers=12, positions=1024):
    # Tied output projection; pre-norm, so one final LayerNorm.
    embeddings = vocabulary * d + positions * d
    return embeddings + layers * encoder_layer(d, f) + layer_norm(d)


def vit_base(image=224, patch=16, classes=1000, d=768, f=3072, layers=12):
    patches = (image // patch) ** 2
    embedding = patch * patch * 3 * d + d  # the patch projection (a conv)
    embedding += d + (patches + 1) * d  # class token, learned positions
    head = d * classes + classes
    return embedding + layers * encoder_layer(d, f) + layer_norm(d) + head


# name, from_preset arguments, hand count, published count, why they differ.
CASES = [
    (
        "transformer_big",
        ((37_000, 37_000), dict(tie_embeddings="all")),
        transformer_big(),
        213e6,
        # Vaswani et al. 2017, Table 3 ("big": 213M). The paper's vocabulary
        # is "about 37000" shared BPE tokens; with exactly 37,000 the count
        # is 214.2M. The preset alone ties only the decoder's embedding.
    ),
    (
        "bert_base",
        ((30_522,), {}),
        bert_base(),
        110e6,
        # Devlin et al. 2019, section 3 (110M), WordPiece vocabulary of
        # 30,522. bert_encoder has the pooler but not the pretraining heads
        # (MLM transform and output bias, NSP classifier).
    ),
    (
        "gpt2_small",
        ((50_257,), {}),
        gpt2_small(),
        124e6,
        # Radford et al. 2019 print 117M; openai/gpt-2's README says the
        # paper's counts were wrong and the released small model is 124M
        # (50,257 BPE tokens, 1,024 positions, tied output projection).
    ),
    (
        "vit_base",
        ((), dict(image_size=224, num_classes=1000)),
        vit_base(),
        86e6,
        # Dosovitskiy et al. 2021, Table 1 (ViT-Base: 86M) at 224 x 224 with
        # a linear 1000-class head (the fine-tuning head; pretraining used
        # an MLP head with one hidden layer).
    ),
]


@pytest.mark.parametrize(
    "name, arguments, hand_count, published", CASES, ids=[c[0] for c in CASES]
)
def test_large_preset_parameter_counts(name, arguments, hand_count, published):
    args, kwargs = arguments
    with keras.StatelessScope(initialize_variables=False):
        model = from_preset(name, *args, **kwargs)
        count = model.count_params()
    assert count == hand_count
    # The papers round to the million (and transformer_big's vocabulary is
    # approximate): within 1%.
    assert abs(count - published) / published < 0.01, (count, published)


def test_hand_counts_match_the_released_checkpoints():
    # The formulas against the exact counts of the released models (Hugging
    # Face's BertModel for bert-base-uncased and GPT2Model for gpt2, timm's
    # and torchvision's ViT-B/16), so a wrong formula cannot agree with a
    # wrong model by accident. The big Transformer has no released checkpoint.
    assert bert_base() == 109_482_240
    assert gpt2_small() == 124_439_808
    assert vit_base() == 86_567_656
