"""The documents a newcomer reads hold together: every relative link in
README.md, BENCHMARKS.md and docs/*.md reaches a file (and a heading of it,
by GitHub's anchor rules), every bench/results JSON they name exists, the
README and BENCHMARKS stay within their sizes, and the README opens with the
two set-up commands, the second being what CI runs. Reads text only."""

import glob
import os
import re
import unicodedata
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BENCHMARKS = os.path.join(ROOT, "BENCHMARKS.md")
CI = os.path.join(ROOT, ".ci", "run")
INSTALL_AND_RUN = "python3 -m pip install -e . && tfformer"
MAX_LINES = {"README.md": 300, "BENCHMARKS.md": 800}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.*?)\1")
# [text](target) and ![alt](target), with an optional "title".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
RESULT_JSON = re.compile(r"bench/results/([A-Za-z0-9_.-]+\.json)")


def documents():
    paths = [README, BENCHMARKS, *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
    return [p for p in paths if os.path.isfile(p)]


def relative(path):
    return os.path.relpath(path, ROOT)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def split_fences(text):
    """(prose, code blocks): the numbered lines outside fenced code blocks, as
    (line number, line), and each block as (info string, body)."""
    prose, blocks = [], []
    fence = None
    for number, line in enumerate(text.split("\n"), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence, info, body = match.group(1), match.group(2), []
            else:
                prose.append((number, line))
        elif (
            match
            and match.group(1)[0] == fence[0]
            and len(match.group(1)) >= len(fence)
        ):
            blocks.append((info, "\n".join(body)))
            fence = None
        else:
            body.append(line)
    return prose, blocks


def slug(heading):
    """GitHub's anchor of a heading (github-slugger): the rendered text,
    lower-cased, without punctuation and symbols, spaces made hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    kept = (
        c
        for c in text.lower()
        if c in " -" or unicodedata.category(c)[0] in "LMN" or c == "_"
    )
    return "".join(kept).replace(" ", "-")


def anchors(path):
    """The anchors of every heading of a Markdown file, duplicates numbered
    as GitHub numbers them (`x`, `x-1`, `x-2`)."""
    prose, _ = split_fences(read(path))
    seen, out = {}, set()
    for _, line in prose:
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        anchor = base if base not in seen else f"{base}-{seen[base]}"
        seen[base] = seen.get(base, 0) + 1
        out.add(anchor)
    return out


def links(path):
    """(line number, target) of every Markdown link outside code."""
    prose, _ = split_fences(read(path))
    return [
        (number, target)
        for number, line in prose
        for target in LINK.findall(INLINE_CODE.sub("", line))
    ]


def broken_links(path):
    """Each relative link of `path` whose file or heading does not exist, as
    'line N: target (why)'."""
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto:, ...
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part)
        where = (
            os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if file_part
            else path
        )
        if not os.path.exists(where):
            problems.append(f"line {number}: {target} (no such file)")
        elif anchor and where.endswith(".md"):
            if urllib.parse.unquote(anchor) not in anchors(where):
                problems.append(
                    f"line {number}: {target} (no heading with that anchor in "
                    f"{relative(where)})"
                )
    return problems


def test_slugs_follow_github():
    assert slug("Translation: Multi30k De→En") == "translation-multi30k-deen"
    assert (
        slug("Library against library: ViT on CIFAR-10, keras-hub's `ViTBackbone`")
        == "library-against-library-vit-on-cifar-10-keras-hubs-vitbackbone"
    )
    assert slug("`data` (text tasks)") == "data-text-tasks"
    assert slug("What users do today — a recipe") == "what-users-do-today--a-recipe"
    assert slug("snake_case and [a link](x.md)") == "snake_case-and-a-link"


def test_duplicate_headings_are_numbered(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n## Same\n```\n## Not a heading\n```\n## Same\n## Same\n")
    assert anchors(str(page)) == {"top", "same", "same-1", "same-2"}


def test_links_skip_code_and_see_images(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](a.md) `[b](b.md)` ![c](c.png)\n```\n[d](d.md)\n```\n[e](https://x.org)\n"
    )
    assert [t for _, t in links(str(page))] == ["a.md", "c.png", "https://x.org"]


@pytest.mark.parametrize("path", documents(), ids=relative)
def test_every_relative_link_resolves(path):
    problems = broken_links(path)
    assert not problems, f"{relative(path)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", documents(), ids=relative)
def test_every_named_result_json_exists(path):
    missing = sorted(
        {
            name
            for name in RESULT_JSON.findall(read(path))
            if not os.path.isfile(os.path.join(ROOT, "bench", "results", name))
        }
    )
    assert not missing, f"{relative(path)} names missing bench/results files: {missing}"


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_size(name):
    lines = read(os.path.join(ROOT, name)).count("\n")
    assert lines <= MAX_LINES[name], f"{name} has {lines} lines"


def ci_command():
    """The command `.ci/run` runs: its one line that is not the shebang, a
    comment, `set` or `cd`."""
    commands = [
        line.strip()
        for line in read(CI).split("\n")
        if line.strip()
        and not line.lstrip().startswith("#")
        and not re.match(r"\s*(set|cd)\s", line)
    ]
    assert len(commands) == 1, commands
    return commands[0]


def test_readme_opens_with_the_two_set_up_commands():
    _, blocks = split_fences(read(README))
    assert [info for info, _ in blocks[:2]] == ["bash", "bash"]
    assert blocks[0][1] == INSTALL_AND_RUN
    assert blocks[1][1] == ci_command()


NEW_TOKENS = re.compile(r"max[-_]new[-_]tokens[ =](\d+)")
RUN = re.compile(r"runs/([a-z0-9_]+)")


def config_context(name):
    """data.max_length of training/configs/<name>.json or .yaml, or None."""
    import json

    import yaml

    for extension, parse in ((".json", json.loads), (".yaml", yaml.safe_load)):
        path = os.path.join(ROOT, "training", "configs", name + extension)
        if os.path.isfile(path):
            return parse(read(path)).get("data", {}).get("max_length")
    return None


@pytest.mark.parametrize("path", documents(), ids=relative)
def test_generation_examples_fit_the_runs_context(path):
    """A code block that generates from a run a shipped config writes asks
    for fewer new tokens than that run's context (more is refused)."""
    too_many = []
    for _, body in split_fences(read(path))[1]:
        contexts = {
            name: config_context(name)
            for name in RUN.findall(body)
            if config_context(name) is not None
        }
        for count in map(int, NEW_TOKENS.findall(body)):
            too_many += [
                (name, count, context)
                for name, context in contexts.items()
                if count >= context
            ]
    assert not too_many, f"{relative(path)}: (run, new tokens, context) {too_many}"
