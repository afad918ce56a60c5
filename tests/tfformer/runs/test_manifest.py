"""One typed manifest per task: every schema round-trips through run.json's
layout, the manifests written by earlier tfformers parse unchanged, and a
manifest with a wrong key, type or tokenizer is refused naming it."""

import glob
import json
import os

import pytest

from tfformer.runs.manifest import (
    MANIFESTS,
    CausalLMManifest,
    ImageClassificationManifest,
    MaskedLMManifest,
    RunManifest,
    SentenceEmbeddingManifest,
    TextClassificationManifest,
    TokenizerEntry,
    TranslationManifest,
)

LEGACY = os.path.join(os.path.dirname(__file__), "..", "..", "data", "legacy_runs")
TEXT = {"text": TokenizerEntry("wordpiece")}
EXAMPLES = [
    TranslationManifest(
        tokenizers={"source": TokenizerEntry("byte"), "target": TokenizerEntry("byte")},
        max_length=40,
    ),
    CausalLMManifest(
        tokenizers={"text": TokenizerEntry("ids")}, max_length=1024, end_ids=(3, 10)
    ),
    TextClassificationManifest(
        tokenizers=TEXT, max_length=128, labels=("neg", "pos"), pairs=True
    ),
    MaskedLMManifest(tokenizers=TEXT, max_length=64),
    SentenceEmbeddingManifest(
        tokenizers={
            "text": TokenizerEntry(
                "wordpiece",
                lower_case=True,
                special_tokens={
                    "pad": "[PAD]",
                    "unk": "[UNK]",
                    "start": "[CLS]",
                    "end": "[SEP]",
                },
                normalizer="bert",
                strip_accents=True,
            )
        },
        max_length=256,
        pooling="cls",
        normalize=False,
    ),
    ImageClassificationManifest(
        tokenizers={}, image_size=32, labels=("cat", "dog"), test_split_fingerprint="ab"
    ),
]


def test_every_task_has_a_schema_and_an_example():
    assert sorted(MANIFESTS) == sorted(m.task for m in EXAMPLES)


@pytest.mark.parametrize("manifest", EXAMPLES, ids=lambda m: m.task)
def test_round_trip_through_json(manifest):
    text = json.dumps(manifest.to_manifest())
    assert RunManifest.from_manifest(json.loads(text)) == manifest
    assert type(manifest).from_manifest(json.loads(text)) == manifest


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(LEGACY, "*", "run.json")))
)
def test_manifests_written_by_earlier_tfformers_parse_unchanged(path):
    with open(path) as f:
        written = json.load(f)
    manifest = RunManifest.from_manifest(written, path)
    assert manifest.task == written["task"]
    # Written back, the layout is the old one (a default left out then is
    # left out now).
    back = manifest.to_manifest()
    assert back["settings"] == written["settings"]
    for role, entry in written["tokenizers"].items():
        assert {k: v for k, v in entry.items() if v is not False} == {
            k: v for k, v in back["tokenizers"][role].items() if v is not False
        }


def test_defaults_fill_what_older_runs_lack():
    manifest = RunManifest.from_manifest(
        {
            "format_version": 1,
            "task": "text_classification",
            "tokenizers": {"text": {"kind": "wordpiece"}},
            "settings": {"max_length": 12, "labels": ["a", "b"]},
        }
    )
    assert manifest.pairs is False and manifest.labels == ("a", "b")
    assert manifest.tokenizers["text"].lower_case is False


def manifest_with(**changes):
    base = {
        "format_version": 1,
        "task": "text_classification",
        "tokenizers": {"text": {"kind": "wordpiece", "lower_case": False}},
        "settings": {"max_length": 12, "labels": ["a", "b"], "pairs": False},
    }
    for key, value in changes.items():
        section, _, name = key.partition(".")
        if name:
            base[section][name] = value
        else:
            base[key] = value
    return base


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"task": "summarization"}, r"task must be one of .*'translation'"),
        ({"settings.max_length": "12"}, r"settings\.max_length must be a int"),
        ({"settings.max_length": True}, r"settings\.max_length must be a int"),
        ({"settings.labels": "ab"}, r"settings\.labels must be a list of str"),
        ({"settings.labels": [1, 2]}, r"settings\.labels must be a list of str"),
        ({"settings.pairs": "yes"}, r"settings\.pairs must be a bool"),
        ({"settings.epochs": 3}, r"settings \['epochs'\] are not part of a"),
        ({"settings": {"labels": ["a"]}}, "settings lack 'max_length'"),
        ({"tokenizers": {}}, r"tokenizers \['text'\]"),
        ({"tokenizers.text": {"kind": "unigram"}}, "must name a kind in"),
        (
            {"tokenizers.text": {"kind": "byte", "normalizer": "bert"}},
            "apply to wordpiece vocabularies only",
        ),
        (
            {"tokenizers.text": {"kind": "wordpiece", "special_tokens": {"pad": "x"}}},
            "special_tokens must name pad, unk, start and end",
        ),
        (
            {"tokenizers.text": {"kind": "wordpiece", "casing": "upper"}},
            r"unknown keys \['casing'\]",
        ),
    ],
)
def test_bad_manifests_are_refused_naming_the_key(changes, message):
    with pytest.raises(ValueError, match=message):
        RunManifest.from_manifest(manifest_with(**changes), "run.json")


@pytest.mark.parametrize("end_ids", [[], [3, 0], [3, True], [3, "4"]])
def test_a_causal_lm_runs_end_ids_must_be_ids_above_padding(end_ids):
    manifest = {
        "format_version": 1,
        "task": "causal_lm",
        "tokenizers": {"text": {"kind": "ids"}},
        "settings": {"max_length": 12, "end_ids": end_ids},
    }
    with pytest.raises(ValueError, match=r"run.json: .*end_ids must be"):
        RunManifest.from_manifest(manifest, "run.json")


def test_a_schema_checks_its_own_task_and_roles():
    with pytest.raises(ValueError, match=r"task must be one of \['causal_lm'\]"):
        CausalLMManifest.from_manifest(manifest_with())
    with pytest.raises(ValueError, match=r"has the tokenizers \['text'\]"):
        CausalLMManifest(tokenizers={}, max_length=8)
    with pytest.raises(TypeError, match="must be a TokenizerEntry"):
        CausalLMManifest(tokenizers={"text": {"kind": "byte"}}, max_length=8)
