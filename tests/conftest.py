"""Test-wide setup: quiet TensorFlow, deterministic seeds, float32 by default."""

import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    # Two logical CPUs, so MirroredStrategy can be tested with 2 replicas. This
    # must happen before TensorFlow initializes its devices; it changes nothing
    # for code that does not ask for /cpu:1.
    # Under pytest-xdist, each worker gets one intra-op thread: the workers
    # already fill the cores, and TensorFlow's default (one thread per core
    # in every worker) only adds contention.
    threads = os.environ.get(
        "TFFORMER_TEST_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else ""
    )
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    try:
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * 2,
        )
    except RuntimeError:  # devices were initialized already
        pass


# The files that take longest, heaviest first (worker seconds of one default
# run on the 2-core machine, from `python3 -m pytest --durations=0`,
# summed per file). xdist hands files to workers in collection order
# (pyproject.toml turns off its own reordering by test count), so starting
# these first keeps one long file from running alone at the end while the
# other workers idle. A file missing from the list keeps its place after them.
HEAVIEST_FIRST = (
    # Integration: the main job on the default config, the longest test.
    "tests/training/test_main_job.py",
    # First: it builds the shared tiny GPT that three other files wait for.
    "tests/export/test_causal_lm_export.py",  # 163 s
    "tests/training/test_trainer.py",  # 177 s
    "tests/training/test_masked_lm.py",  # 89 s
    "tests/export/test_litertlm.py",  # 88 s
    "tests/training/convert/huggingface/test_llama.py",  # 84 s
    "tests/tfformer/decoding/test_generator.py",  # 81 s
    "tests/tfformer/test_api.py",  # 70 s
    "tests/training/test_generate_cli.py",  # 67 s
    "tests/export/test_saved_model.py",  # 63 s
    "tests/export/test_tflite.py",  # 57 s
    "tests/export/test_classification_export.py",  # 56 s
    "tests/test_packaging.py",  # 54 s
    "tests/training/convert/huggingface/test_bert.py",  # 52 s
    "tests/training/convert/huggingface/test_gpt2.py",  # 49 s
    "tests/export/test_image_export.py",  # 47 s
    "tests/training/convert/huggingface/test_chat.py",  # 44 s
)


def pytest_collection_modifyitems(items):
    """Moves the files of `HEAVIEST_FIRST` to the front, in its order; the
    tests inside a file and the other files keep their order."""
    rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@contextlib.contextmanager
def _tensorflow_caches_kept():
    """A context in which TensorFlow's eager kernel and function caches are
    not cleared.

    `keras.utils.set_random_seed` (through `tf.random.set_seed`) and
    `keras.backend.clear_session` both clear them, so a test that calls a
    SavedModel, a `tf.function` or a model a module-scoped fixture built paid
    to instantiate its functions again: 1.5-5 s a test, a sixth of the export
    files' time. The clear exists to restart stateful random kernels
    (`tf.random.uniform` and kin); tfformer draws with stateless ops and
    explicit seeds, so keeping the caches within a test file changes no
    figure. `_file_state` still clears them between files. A private
    TensorFlow function, checked by name so a release that moves it fails
    here and not in silence.
    """
    from tensorflow.python import pywrap_tfe

    name = "TFE_ContextClearCaches"
    clear = getattr(pywrap_tfe, name, None)
    if not callable(clear):
        raise RuntimeError(
            f"tensorflow {tf.__version__} has no pywrap_tfe.{name}: update "
            "tests/conftest.py's _tensorflow_caches_kept"
        )
    setattr(pywrap_tfe, name, lambda handle: None)
    try:
        yield
    finally:
        setattr(pywrap_tfe, name, clear)


def _fresh_keras_state(keep_tensorflow_caches):
    """float32, seed 1234 and a fresh Keras session (without Keras's forced
    full garbage collection: with a worker's heap full of traced graphs that
    took a third of a second per test; Python's own collector still runs)."""
    keep = (
        _tensorflow_caches_kept()
        if keep_tensorflow_caches and keras.backend.backend() == "tensorflow"
        else contextlib.nullcontext()
    )
    with keep:
        # In this order: the session holds the policy and Keras's seed.
        keras.backend.clear_session(free_memory=False)
        keras.config.set_dtype_policy("float32")
        keras.utils.set_random_seed(1234)


@pytest.fixture(autouse=True, scope="module")
def _file_state():
    """Each test file ends with TensorFlow's caches cleared (see
    `_tensorflow_caches_kept`), so a worker's caches hold one file's
    functions at most."""
    yield
    _fresh_keras_state(keep_tensorflow_caches=False)


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts and ends with float32, a fixed seed and a fresh Keras
    session (its end, for the module fixtures a later test sets up);
    TensorFlow's caches stay, within a file (see `_tensorflow_caches_kept`)."""
    _fresh_keras_state(keep_tensorflow_caches=True)
    yield
    _fresh_keras_state(keep_tensorflow_caches=True)


@pytest.fixture(autouse=True, scope="session")
def _learned_vocabularies_once(tmp_path_factory):
    """Learns each WordPiece vocabulary once per test session.

    Dozens of tests train tiny runs on the same seeded data, and
    tensorflow-text's learner takes seconds each time (about a quarter of a
    tiny translator run). `WordPieceTokenizer.learn` is deterministic in its
    arguments, so the first call with a given set of arguments learns for
    real and keeps the vocabulary in a folder the xdist workers share; a
    later call with the same arguments reads it back.
    """
    if keras.backend.backend() != "tensorflow":
        yield
        return
    import functools
    import hashlib
    import json

    from tfformer.runs.files import atomic_write_text
    from tfformer.training.text.wordpiece import WordPieceTokenizer

    # Each worker's base temporary folder sits in the session's shared one.
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    cache = root / "learned_vocabularies"
    cache.mkdir(exist_ok=True)
    learn = WordPieceTokenizer.learn.__func__

    @functools.wraps(learn)
    def learn_once(
        cls, sentences, vocabulary_size, *, lower_case=False, extra_tokens=()
    ):
        sentences = list(sentences)
        key = json.dumps(
            [sentences, vocabulary_size, lower_case, list(extra_tokens)],
            ensure_ascii=False,
        )
        path = cache / (hashlib.sha256(key.encode("utf-8")).hexdigest() + ".json")
        if path.is_file():
            return cls(json.loads(path.read_text("utf-8")), lower_case=lower_case)
        tokenizer = learn(
            cls,
            sentences,
            vocabulary_size,
            lower_case=lower_case,
            extra_tokens=extra_tokens,
        )
        atomic_write_text(str(path), json.dumps(list(tokenizer.vocabulary)))
        return tokenizer

    WordPieceTokenizer.learn = classmethod(learn_once)
    yield
    WordPieceTokenizer.learn = classmethod(learn)


def _claim(path):
    """True for the one process whose mkdir of `path` succeeds."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return False
    return True


def shared_build(tmp_path_factory, name, build, timeout=900):
    """The folder `build(path)` fills, built once per test session.

    Under pytest-xdist the workers share the session's temporary folder:
    the first worker to ask builds into a staging folder and renames it to
    `name` when `build` returns; a worker that asks meanwhile waits for the
    rename and uses the same folder. Callers must not write into it (copy it
    with `shutil.copytree` first); a build that failed fails every asker.
    """
    import shutil
    import time

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    done, failed = root / "shared" / name, root / "shared" / f"{name}.failed"
    done.parent.mkdir(exist_ok=True)
    if not _claim(root / "shared" / f"{name}.lock"):
        deadline = time.monotonic() + timeout
        while not done.is_dir():
            if failed.exists():
                raise RuntimeError(f"building the shared {name!r} failed elsewhere")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the shared {name!r} took over {timeout} s")
            time.sleep(0.5)
        return str(done)
    staging = root / "shared" / f"{name}.staging"
    try:
        build(staging)
    except BaseException:
        failed.touch()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    os.rename(staging, done)
    return str(done)


@pytest.fixture(scope="session")
def tiny_translator_run(tmp_path_factory):
    """A number-words translator trained for 30 steps (`tests/training/tiny.py`),
    shared by every test that needs a finished run and does not write into it."""
    from tests.training.tiny import train_tiny_translator

    return shared_build(
        tmp_path_factory,
        "tiny_translator",
        lambda path: train_tiny_translator(path, steps=30),
    )


def _shared_run_with_data(tmp_path_factory, name, train):
    """`shared_build` of `train(data_root, path)`: the run's data files (its
    config points at them) go to a folder of their own beside the shared
    one."""
    data_root = tmp_path_factory.mktemp(f"{name}_data")
    return shared_build(tmp_path_factory, name, lambda path: train(data_root, path))


@pytest.fixture(scope="session")
def tiny_gpt_run(tmp_path_factory):
    """A two-layer byte-level GPT trained for 120 steps on one repeated line
    (`tests/training/tiny.py`), shared like `tiny_translator_run`."""
    from tests.training.tiny import train_shared_gpt

    return _shared_run_with_data(tmp_path_factory, "tiny_gpt", train_shared_gpt)


@pytest.fixture(scope="session")
def tiny_classifier_run(tmp_path_factory):
    """A one-layer BERT classifier of two classes trained for 48 steps
    (`tests/training/tiny.py`), shared like `tiny_translator_run`."""
    from tests.training.tiny import train_tiny_classifier

    return _shared_run_with_data(
        tmp_path_factory, "tiny_classifier", train_tiny_classifier
    )


def pytest_collection_finish(session):
    """Once a worker has imported everything, its imported objects leave the
    garbage collector's view (`gc.freeze`), and a full collection waits for
    100 younger ones instead of CPython 3.11's 10: a worker's heap of modules
    and traced graphs made each full collection cost about half a second.
    On test_generator.py and
    test_trainer.py in one process: 7.7 CPU-seconds of collection (6.1 of
    them in 12 full ones) before, 3.7 after (2.2 of them pytest's own at the
    session's end), peak memory 1.40 GB and 1.48 GB."""
    import gc

    gc.freeze()
    generation0, generation1, _ = gc.get_threshold()
    gc.set_threshold(generation0, generation1, 100)
