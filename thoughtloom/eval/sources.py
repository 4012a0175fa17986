"""Where benchmark data comes from: the public originals, their pinned SHA-256, the standard splits.

`loom data fetch NAME` downloads a set's upstream file, refuses it unless its checksum is the
pinned one, applies the set's standard split (Game of 24: the ToT paper's test slice, ranks
901-1000, is kept out of the dev file and is a set of its own, `game24_test`) and writes the result
into the user's cache directory ($XDG_CACHE_HOME/thoughtloom/data), where `loom bench` finds it. A mirror holding the
data
directory's own layout (`--from URL` or $THOUGHTLOOM_DATA_URL) replaces the upstream hosts;
its files are checked against the same pinned checksums, so a mirror cannot change the data.

Blocksworld has no single upstream file: it is assembled from llm-reasoners' step lists and the
PlanBench instances they name (BlocksworldAssembly), and the assembled file is what is pinned.

Every checksum here is of bytes someone can reproduce: the upstream file as its repository
holds it, or the file the split (or the assembly) writes from it. What is written is always checked; an original is
checked too where its bytes could be pinned (for MBPP and HotpotQA they could not be proven here, so
only their splits, which rewrite the JSON in one canonical layout, are).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..llm.download import UNPINNED_MAX_BYTES, DownloadError, default_deadline, stream
from ..tasks.blocksworld import COLORS, action_text, fact_text, statement_of, statement_prompt
from ..tasks.datadir import cache_data_dir

#: A base URL replacing the upstream hosts: it serves the data directory's layout (game24/24_dev.csv ...).
DATA_URL_ENV = "THOUGHTLOOM_DATA_URL"

#: The ToT paper's Game of 24 test slice (ranks 901-1000), kept out of the dev file.
GAME24_TEST_RANKS = range(901, 1001)
#: MBPP's standard test split: the sanitized set's task ids 11-510.
MBPP_TEST_IDS = range(11, 511)
#: How many HotpotQA dev (distractor) questions the dev file holds: the first 50 of the official file.
HOTPOTQA_DEV_FIRST = 50

_TOT = "https://raw.githubusercontent.com/princeton-nlp/tree-of-thought-llm/ab400345c5ea39d28ea6d7d3be0e417b11113c87"
_GOT = "https://raw.githubusercontent.com/spcl/graph-of-thoughts/363421c61c7bc11edf32845a697ae2aaccd75463"
_GSM = "https://raw.githubusercontent.com/openai/grade-school-math/3101c7d5072418e28b9008a6636bde82a006892c"
_MBPP = "https://raw.githubusercontent.com/google-research/google-research/30adf0ec5f35f9609c2f1d896005e184195d9146"
_RAP = "https://raw.githubusercontent.com/maitrix-org/llm-reasoners/f94e5ac2cb9788c3d7d7dbf2173884ed4088e4b2"
# The LLMs-Planning commit _RAP's checkout pins as its submodule: the PlanBench instances its step lists name.
_PLANBENCH = "https://raw.githubusercontent.com/karthikv792/LLMs-Planning/34e6841f81ca7708f2f8b8241504bfe8a908e40b"


#: The size of the ToT 24.csv at _TOT's commit (its git object; the split of it reproduces both pinned files).
_GAME24_ORIGINAL_SIZE = 48_235


class FetchError(ValueError):
    """A data set that cannot be downloaded or does not match its pinned checksum; one line."""


def game24_dev(original: bytes) -> bytes:
    """The ToT 24.csv without the paper's test slice (ranks 901-1000), written as csv writes it."""
    return _game24_rows(original, lambda rank: rank not in GAME24_TEST_RANKS)


def game24_test(original: bytes) -> bytes:
    """The ToT paper's test slice of 24.csv (ranks 901-1000, its run.py indices 900-999), written as csv writes it."""
    return _game24_rows(original, lambda rank: rank in GAME24_TEST_RANKS)


def _game24_rows(original: bytes, keep: Callable[[int], bool]) -> bytes:
    """The header and the rows of 24.csv whose rank `keep` accepts, in the original order."""
    rows = list(csv.reader(io.StringIO(original.decode("utf-8"))))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(rows[0])
    writer.writerows(r for r in rows[1:] if r and keep(int(r[0])))
    return out.getvalue().encode("utf-8")


def mbpp_nontest(original: bytes) -> bytes:
    """The sanitized MBPP list without its standard test split (task ids 11-510), as one JSON line."""
    rows = json.loads(original.decode("utf-8"))
    return json.dumps([r for r in rows if int(r["task_id"]) not in MBPP_TEST_IDS]).encode("utf-8")


def hotpotqa_first50(original: bytes) -> bytes:
    """The first 50 questions of the official dev (distractor) file, in the Hugging Face layout eval.datasets reads."""
    rows = json.loads(original.decode("utf-8"))[:HOTPOTQA_DEV_FIRST]
    out = [{"question": r["question"], "answer": r["answer"], "type": r["type"], "level": r["level"],
            "supporting_facts": {"title": [t for t, _ in r["supporting_facts"]],
                                 "sent_id": [i for _, i in r["supporting_facts"]]},
            "context": {"title": [t for t, _ in r["context"]], "sentences": [s for _, s in r["context"]]}}
           for r in rows]
    return json.dumps(out, ensure_ascii=False).encode("utf-8")


#: Downloads one upstream part of an assembled file: (URL, most bytes it may have) -> its bytes.
Get = Callable[[str, int], bytes]

#: RAP's step buckets as llm-reasoners' full_data holds them, and those its test splits (v1 hard, v2 easy) list.
BLOCKSWORLD_STEP_FILES = (2, 4, 6, 8, 10, 12, 14, 16)
BLOCKSWORLD_SPLIT_STEPS = (2, 4, 6, 8, 10, 12)
# The upstream parts are small (step lists <= 33 kB, instances <= 0.5 kB); what is assembled is pinned, so
# these only bound a download.
_BW_LIST_CAP = 1 << 16
_BW_PDDL_CAP = 1 << 13
_BW_PARALLEL = 8
_PDDL_ATOM = re.compile(r"\(\s*([^()\s]+)((?:\s+[^()\s]+)*)\s*\)")


@dataclass(frozen=True, slots=True)
class BlocksworldAssembly:
    """How blocksworld.jsonl is assembled: llm-reasoners' step lists joined with each PlanBench instance.

    For each `full_data/step_N.json` entry (instance path, gold plan, length), in bucket order, one JSON
    line: the instance's PDDL as LLMs-Planning holds it, its initial and goal facts and gold plan in
    PlanBench's words (llm-reasoners' bw_utils: facts sorted by predicate then arguments, a-l named by
    bw_config.yaml's colours), the question as its `fill_template` writes it, and whether RAP's hard (v1)
    and easy (v2) test splits hold it.
    """

    #: llm-reasoners' examples/CoT/blocksworld/data folder (step lists and splits).
    rap_data: str
    #: LLMs-Planning's root at the commit llm-reasoners pins (the instance paths are relative to it).
    planbench: str

    def __call__(self, get: Get) -> bytes:
        """The assembled file, its parts downloaded with `get`."""
        def listed(path: str) -> list[list[object]]:
            rows = json.loads(get(f"{self.rap_data}/{path}", _BW_LIST_CAP).decode("utf-8"))
            return [list(r) for r in rows]

        def instance(entry: list[object]) -> str:
            return str(entry[0]).split("LLMs-Planning/", 1)[1]

        tests = {version: {instance(r) for n in BLOCKSWORLD_SPLIT_STEPS
                           for r in listed(f"split_{version}/split_{version}_step_{n}_data.json")}
                 for version in ("v1", "v2")}
        entries = [r for n in BLOCKSWORLD_STEP_FILES for r in listed(f"full_data/step_{n}.json")]
        files = [instance(r) for r in entries]
        # Executor.map cancels the downloads not yet started when one fails (each could wait out its deadline).
        with ThreadPoolExecutor(_BW_PARALLEL) as pool:
            pddls = list(pool.map(lambda f: get(f"{self.planbench}/{f}", _BW_PDDL_CAP).decode("utf-8"), files))
        lines = [json.dumps(_blocksworld_row(f, str(plan), int(str(steps)), pddl, f in tests["v1"], f in tests["v2"]))
                 for f, (_, plan, steps), pddl in zip(files, entries, pddls, strict=True)]
        return "".join(line + "\n" for line in lines).encode("utf-8")


def _blocksworld_row(file: str, plan: str, steps: int, pddl: str, hard: bool, easy: bool) -> dict[str, object]:
    """One line of blocksworld.jsonl, as the assembly writes it."""
    init, goal = (_facts_text(_pddl_atoms(pddl, part)) for part in ("init", "goal"))
    actions = [a.strip("(").strip(")").split(" ") for a in plan.split("\n")[:-1]]
    return {"instance": file.split("blocksworld/", 1)[1], "instance_file": file, "n_steps": steps,
            "gold_plan": plan, "gold_plan_text": "".join(action_text((a[0], *map(_colour, a[1:]))) + "\n"
                                                         for a in actions),
            "init_text": init, "goal_text": goal, "question": f"\n{statement_prompt(statement_of(init, goal))}\n",
            "in_test_v1_hard": hard, "in_test_v2_easy": easy, "pddl": pddl}


def _colour(name: str) -> str:
    """PlanBench's colour for a PDDL block name (a-l)."""
    return COLORS[ord(name) - ord("a")]


def _pddl_atoms(pddl: str, part: str) -> list[tuple[str, ...]]:
    """The atoms of a PDDL problem's (:init ...) or (:goal ...) section, as (predicate, *objects)."""
    start = pddl.index(f"(:{part}")
    depth = 0
    for end in range(start, len(pddl)):
        depth += {"(": 1, ")": -1}.get(pddl[end], 0)
        if depth == 0:
            break
    body = pddl[start + len(part) + 2:end]
    return [(m[1].lower(), *m[2].split()) for m in _PDDL_ATOM.finditer(body) if m[1].lower() != "and"]


def _facts_text(atoms: list[tuple[str, ...]]) -> str:
    """Facts in PlanBench's words, as bw_utils.parse_problem lists them: sorted, joined by commas and a last "and"."""
    ordered = sorted(atoms, key=lambda a: a[0] + " " + " ".join(a[1:]))
    words = [fact_text((a[0], *map(_colour, a[1:]))) for a in ordered]
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


@dataclass(frozen=True, slots=True)
class DataFile:
    """One file of a data set: where it goes, its pinned checksum, and the public original it comes from."""

    #: Where the file lives in the data directory (as eval.datasets reads it, and as a mirror serves it).
    path: str
    #: SHA-256 of the file as written to the data directory.
    sha256: str
    #: The public original.
    upstream: str
    #: SHA-256 of the upstream original, when the file is derived from it by `split`; None: only the
    #: split's output is checked (a split that rewrites JSON canonically checks the content that way).
    upstream_sha256: str | None = None
    #: The standard split turning the original into this file; None: the original is the file as is.
    split: Callable[[bytes], bytes] | None = None
    #: The pinned size in bytes of the file as written (and of the original when there is no split):
    #: a download is refused one byte past it. None: the cap is UNPINNED_MAX_BYTES.
    size: int | None = None
    #: The pinned size of the upstream original a split reads; None: the cap is UNPINNED_MAX_BYTES.
    upstream_size: int | None = None
    #: How the file is assembled from several upstream files (`upstream` then names the main one), the
    #: result checked against `sha256`; None: it is one upstream file (split or not).
    assemble: Callable[[Get], bytes] | None = None

    @property
    def original_pinned(self) -> bool:
        """Whether the upstream original itself is checked against a pinned checksum (not just what is written)."""
        return self.split is None or self.upstream_sha256 is not None


@dataclass(frozen=True, slots=True)
class DataSource:
    """A data set's files, licence and where they come from, as `loom data list` shows it."""

    name: str
    files: tuple[DataFile, ...]
    origin: str
    licence: str
    #: Which standard split the set is: "dev" or "train" (develop on these), "test" (for a final
    #: evaluation, never for tuning prompts), "all" (a set published without splits).
    split: str = "dev"


def _got(name: str, folder: str, file: str, sha256: str, size: int) -> DataSource:
    return DataSource(name, (DataFile(f"got/{folder}/{file}", sha256, f"{_GOT}/examples/{folder}/{file}", size=size),),
                      "Graph-of-Thoughts (spcl/graph-of-thoughts)", "BSD-style", "all")


SOURCES: dict[str, DataSource] = {
    "game24": DataSource(
        "game24",
        (DataFile("game24/24_dev.csv", "60b975bba52bc492868fe32621521e44a8f2778ddc24db687c8e40de6e417e3b",
                  f"{_TOT}/src/tot/data/24/24.csv",
                  "b9f12b3e36d987a3c714c4cef17d89a137d7c59da26532fcfb93b4821d8111b5", game24_dev,
                  size=45_888, upstream_size=_GAME24_ORIGINAL_SIZE),),
        "Tree-of-Thoughts 24.csv (princeton-nlp/tree-of-thought-llm), ranks 901-1000 held out", "MIT"),
    # Pinned from the upstream repository's git objects at _TOT's commit: the same 24.csv whose dev split
    # reproduces the pinned dev file byte for byte.
    "game24_test": DataSource(
        "game24_test",
        (DataFile("game24/24_test.csv", "33f0d0f6bcec4bedb4e4066bc04a7ad8bb554b37f67ef60a58cd3b109dc8914f",
                  f"{_TOT}/src/tot/data/24/24.csv",
                  "b9f12b3e36d987a3c714c4cef17d89a137d7c59da26532fcfb93b4821d8111b5", game24_test,
                  size=3_778, upstream_size=_GAME24_ORIGINAL_SIZE),),
        "Tree-of-Thoughts 24.csv, the paper's test slice (ranks 901-1000)", "MIT", "test"),
    "gsm8k": DataSource(
        "gsm8k",
        (DataFile("gsm8k/train.jsonl", "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
                  f"{_GSM}/grade_school_math/data/train.jsonl", size=4_166_206),),
        "GSM8K train split (openai/grade-school-math)", "MIT", "train"),
    # The upstream test.jsonl at _GSM's commit (git blob e4c2ff4942b9a78bd74f04141224c11e28d12dc9).
    "gsm8k_test": DataSource(
        "gsm8k_test",
        (DataFile("gsm8k/test.jsonl", "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
                  f"{_GSM}/grade_school_math/data/test.jsonl", size=749_738),),
        "GSM8K test split (openai/grade-school-math), 1319 problems", "MIT", "test"),
    "keyword_counting": _got("keyword_counting", "keyword_counting", "countries.csv",
                             "d1be929b6170f1e81edcdfbed4fc8e6879be0242494de0254a716e02a5361b85", 217_306),
    "sorting32": _got("sorting32", "sorting", "sorting_032.csv",
                      "5a9136993314252b3eeb58b5425c47dbcdfff99aea0c627b659a28285cf2265e", 20_108),
    "sorting64": _got("sorting64", "sorting", "sorting_064.csv",
                      "600e4b6272eb7e82db7837076cba949f0505e1021c5207fff18f48f7bea71609", 39_308),
    "sorting128": _got("sorting128", "sorting", "sorting_128.csv",
                       "51c0572dc4263938441e891d227143ab76a13fab10474d91e399df135af56082", 77_810),
    "set_intersection32": _got("set_intersection32", "set_intersection", "set_intersection_032.csv",
                               "5bad14479cd6c121e5bbb4561cfeca948952932a3b5e79ae7ec229213eaa5f48", 31_986),
    "set_intersection64": _got("set_intersection64", "set_intersection", "set_intersection_064.csv",
                               "287c8d1e102a5a6b4737588b0913bea78b5fc680b86f230eaafc0c921b45a35e", 67_305),
    "set_intersection128": _got("set_intersection128", "set_intersection", "set_intersection_128.csv",
                                "75d18abe106d303b56e09e56bc00c88040f3daf49541ca177117ab32b56b6076", 147_413),
    # The upstream file as is (all 156 games); `loom bench --tasks crosswords` runs the paper's 20 test games of it.
    "crosswords": DataSource(
        "crosswords",
        (DataFile("crosswords/mini0505.json", "50590d5886fac5e0971f483df93668a8f3c638d8312a490655b869a93d569154",
                  f"{_TOT}/src/tot/data/crosswords/mini0505.json", size=134_771),),
        "Tree-of-Thoughts 5x5 mini crosswords (princeton-nlp/tree-of-thought-llm), 156 games", "MIT", "all"),
    # The two below are checked after their split only: no copy of the originals' bytes could be proven
    # here (MBPP's repository is too large to mirror, and HotpotQA's file lives on a plain web host,
    # copied only by third parties). Their splits rewrite the JSON in one layout, so the pinned checksum
    # of the written file holds whatever the original's formatting: a pretty-printed copy of
    # sanitized-mbpp.json, and the official HotpotQA layout rebuilt from the dev file, both split into
    # the pinned files byte for byte (tests/test_data_cli.py).
    "mbpp": DataSource(
        "mbpp",
        (DataFile("mbpp/sanitized-mbpp-nontest.json",
                  "0f364884bc5aa912f8adf4e10da6c67b3dd6580ccc91e761ce015e9a0aae81f6",
                  f"{_MBPP}/mbpp/sanitized-mbpp.json",
                  split=mbpp_nontest, size=100_768),),
        "MBPP sanitized (google-research/google-research), test split (task ids 11-510) held out", "Apache-2.0"),
    "hotpotqa": DataSource(
        "hotpotqa",
        (DataFile("hotpotqa/hotpot_dev_distractor_first50.json",
                  "6ac3f92cf5b04d41aa4ab86ce247271e77dbd894ac63c7309f1728b6084b4e4b",
                  "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json", split=hotpotqa_first50,
                  size=343_927),),
        "HotpotQA dev, distractor setting (hotpotqa.github.io), first 50 questions", "CC BY-SA 4.0"),
    # The same file llm-reasoners' CoT, ToT and RAP examples read (its git object at _RAP's commit).
    "prontoqa": DataSource(
        "prontoqa",
        (DataFile("prontoqa/345hop_random_true.json",
                  "f72eaf608740f69b2115f967150b864677ea94b08b7b17a935dc81781147aae7",
                  f"{_RAP}/examples/CoT/prontoqa/data/345hop_random_true.json", size=3_281_978),),
        "PrOntoQA 3-5 hop, true ontology (via maitrix-org/llm-reasoners), 500 examples", "Apache-2.0", "all"),
    # Assembled from llm-reasoners' step lists and splits and the 602 PlanBench instances they name, both
    # at pinned commits; the result reproduces the data folder's file byte for byte.
    "blocksworld": DataSource(
        "blocksworld",
        (DataFile("blocksworld/blocksworld.jsonl", "25133f0824fc44cd5ba9cf60ac6952d76cd2e78980808cb2e736f7e51867b1c9",
                  f"{_RAP}/examples/CoT/blocksworld/data/full_data/", size=1_013_417,
                  assemble=BlocksworldAssembly(f"{_RAP}/examples/CoT/blocksworld/data", _PLANBENCH)),),
        "Blocksworld (PlanBench instances, llm-reasoners RAP's 602 problems of 2-16 steps)", "Apache2, MIT",
        "all"),
}

#: The original's file name for each set, as a user who downloaded it by hand has it (read by eval.datasets).
UPSTREAM_NAMES: dict[str, str] = {
    name: f.path.rsplit("/", 1)[0] + "/" + f.upstream.rsplit("/", 1)[1]
    for name, src in SOURCES.items() for f in src.files if f.split is not None
}


def fetch_command(name: str) -> str:
    """The exact command that downloads a data set."""
    return f"loom data fetch {name}"


def fetch_hint(name: str) -> str:
    """How to get a missing data set: the exact command."""
    return f"run `{fetch_command(name)}`"


def source(name: str) -> DataSource:
    """The named data set's source, or a one-line error listing the names."""
    found = SOURCES.get(name)
    if found is None:
        raise FetchError(f"no downloadable data set {name!r}; choose from: {', '.join(SOURCES)}")
    return found


def is_present(src: DataSource, data_dir: Path) -> bool:
    """Whether every file of the set is in `data_dir` (its checksums were checked when it was written)."""
    return all((data_dir / f.path).is_file() for f in src.files)


def fetch(name: str, dest: Path | None = None, base_url: str | None = None,
          deadline_s: float | None = None) -> list[Path]:
    """Download a set into `dest` (default: the cache dir), checked against its pinned checksums; the files written.

    `base_url` (default: $THOUGHTLOOM_DATA_URL) is a mirror serving the data directory's layout; without
    one, each file comes from its upstream original and the set's standard split is applied (or is
    assembled from its upstream parts, each held in memory under its cap). Each
    download ends at `deadline_s` (default: scaled to the file's pinned size, see
    llm.download.default_deadline) and is refused one byte past the pinned size (UNPINNED_MAX_BYTES
    where no size is pinned). A failed fetch leaves the files already in `dest` as they were.
    """
    src = source(name)
    dest = dest or cache_data_dir()
    base = base_url if base_url is not None else os.environ.get(DATA_URL_ENV) or None
    written = []
    for f in src.files:
        target = dest / f.path
        # The folders this fetch creates, innermost first: a failed fetch removes them again.
        created = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
        try:
            _fetch_file(f, base, target, deadline_s)
        except BaseException:
            for folder in created:
                try:
                    folder.rmdir()
                except OSError:  # not empty (another fetch wrote into it) or already gone
                    break
            raise
        written.append(target)
    return written


def _fetch_file(f: DataFile, base: str | None, target: Path, deadline_s: float | None) -> None:
    """Download one file of a set from the mirror `base` or its upstream (split as the set says), check it,
    and rename it into place."""
    if not base and f.assemble is not None:
        assemble = f.assemble
        data = _derived(f, lambda: assemble(lambda url, cap: _get(url, cap, deadline_s)), "assemble")
        try:
            _write(target, _checked(data, f.sha256, f"{f.path} (assembled from {f.upstream} and the files it names)"))
        except OSError as exc:
            raise FetchError(f"cannot write {target}: {exc.strerror or exc}") from None
        return
    split = None if base else f.split
    sha256: str | None  # None: an original checked only after its split
    if base:
        url, size, sha256, what = f"{base.rstrip('/')}/{f.path}", f.size, f.sha256, f.path
    elif split is None:
        url, size, sha256, what = f.upstream, f.size, f.sha256, f.upstream
    else:
        url, size, sha256, what = f.upstream, f.upstream_size, f.upstream_sha256, f.upstream
    part, got = _download(url, size, target, deadline_s)
    try:
        if sha256 is not None:
            _checked_sha(got, sha256, what)
        if split is not None:
            split_f = split
            original = part.read_bytes()
            data = _checked(_derived(f, lambda: split_f(original), "split"), f.sha256,
                            f"{f.path} (split of {f.upstream})")
            _write(target, data)
        else:
            part.replace(target)
    except OSError as exc:
        raise FetchError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        part.unlink(missing_ok=True)


def _download(url: str, size: int | None, target: Path, deadline_s: float | None) -> tuple[Path, str]:
    """The body of `url` in a new file beside `target`, and its SHA-256; a one-line FetchError (and no
    file left behind) when the download fails or passes `size` (UNPINNED_MAX_BYTES when None)."""
    cap = UNPINNED_MAX_BYTES if size is None else size
    deadline = default_deadline(cap) if deadline_s is None else deadline_s
    digest = hashlib.sha256()
    try:
        part, out = _new_part(target)
    except OSError as exc:
        raise FetchError(f"cannot write {target.parent}: {exc.strerror or exc}") from None
    try:
        with out:
            for block in stream(url, max_bytes=cap, deadline_s=deadline, pinned=size is not None):
                digest.update(block)
                out.write(block)
    except BaseException as exc:  # an interrupt too: no partial file is left behind
        part.unlink(missing_ok=True)
        if isinstance(exc, DownloadError):
            raise FetchError(str(exc)) from None
        if isinstance(exc, OSError):
            raise FetchError(f"cannot write {target}: {exc.strerror or exc}") from None
        raise
    return part, digest.hexdigest()


def _new_part(target: Path) -> tuple[Path, BinaryIO]:
    """A new file beside `target` (the same file system, so renaming it into place is atomic), opened for writing.

    Its own name: an interrupted fetch never leaves a partial file under the real name, and two
    fetches never write into one file. Created as a plain open would (not mkstemp's 0600), since
    the data directory may be shared.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{secrets.token_hex(6)}.part")
    return part, open(part, "xb")


def _write(target: Path, data: bytes) -> None:
    """Write `data` to `target` through a partial file renamed into place."""
    part, out = _new_part(target)
    try:
        with out:
            out.write(data)
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)


def _get(url: str, cap: int, deadline_s: float | None) -> bytes:
    """The body of `url` (at most `cap` bytes, an upper bound, not a pinned size), or a one-line FetchError."""
    deadline = default_deadline(cap) if deadline_s is None else deadline_s
    try:
        return b"".join(stream(url, max_bytes=cap, deadline_s=deadline, pinned=False))
    except DownloadError as exc:
        raise FetchError(str(exc)) from None


def _derived(f: DataFile, make: Callable[[], bytes], verb: str) -> bytes:
    """What `make` derives from downloaded originals (a split, an assembly), or a one-line FetchError when
    an original is not the layout it reads."""
    try:
        return make()
    except FetchError:  # a download of the assembly's that failed says so itself
        raise
    except (ValueError, KeyError, IndexError, TypeError) as exc:  # UnicodeDecodeError and JSON errors included
        raise FetchError(f"cannot {verb} {f.upstream}: it is not the layout this version reads ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None


def _checked(data: bytes, sha256: str, what: str) -> bytes:
    """`data` if its SHA-256 is the pinned one, else a one-line refusal."""
    _checked_sha(hashlib.sha256(data).hexdigest(), sha256, what)
    return data


def _checked_sha(got: str, sha256: str, what: str) -> None:
    """A one-line refusal unless the SHA-256 `got` is the pinned one."""
    if got != sha256:
        raise FetchError(f"refused {what}: its SHA-256 is {got}, not the pinned {sha256} "
                         "(a corrupted or changed download)")
