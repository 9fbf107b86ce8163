"""Locating a dataset's files under data.root, and fetching them with torchvision's verified downloader."""
from __future__ import annotations

from pathlib import Path

from cl_bench.errors import UserError

from .common import Layout


class MissingFiles(UserError):
    """A dataset's files are not under the root, said as `cl-bench train` takes it (data.root, data.download);
    for_prepare() says it as `cl-bench data prepare` does (--root, --download)."""

    def __init__(self, say):
        super().__init__(say("data.root", "pass data.download=true"))
        self.say = say

    def for_prepare(self) -> str:
        return self.say("--root", "add --download")


def _files(layout: Layout, name: str, root: Path, download: bool) -> list[Path]:
    """The dataset's files in the order of its layout, fetched first if missing and `download` is set."""
    folder = root / layout.folder
    missing = _missing(folder, layout)
    if missing and download and layout.torchvision_class is None:
        raise UserError(f"{name} cannot be downloaded by cl-bench: put {layout.where} "
                        f"({', '.join(missing)}) in {folder}")
    if missing and download:
        _download(layout, root)
        missing = _missing(folder, layout)
        if missing:
            raise UserError(f"{layout.title} was downloaded into {root} but {folder} still lacks {', '.join(missing)}")
    if missing:
        holder = f"contains {layout.folder}" if layout.folder else "holds them"

        def say(root_key: str, download: str) -> str:
            fetch = f"; they are {layout.where}" if layout.torchvision_class is None else (
                f", or {download} to fetch them")
            return (f"{name} needs the {layout.title} files in {folder}, which lacks {', '.join(missing)}: put them "
                    f"there or set {root_key} to the folder that {holder}{fetch}")
        raise MissingFiles(say)
    return [_first_existing(folder, stem, layout.suffixes) for stem in layout.files]


def _first_existing(folder: Path, stem: str, suffixes: tuple[str, ...]) -> Path | None:
    for suffix in suffixes:
        if (folder / (stem + suffix)).is_file():
            return folder / (stem + suffix)
    return None


def _missing(folder: Path, layout: Layout) -> list[str]:
    """The expected file names not found in `folder`, written as `name[.gz]` when several endings are accepted."""
    endings = "".join(f"[{s}]" for s in layout.suffixes if s)
    return [stem + endings for stem in layout.files if _first_existing(folder, stem, layout.suffixes) is None]


def _download(layout: Layout, root: Path) -> None:
    # Imported here: torchvision takes seconds to import and only downloads need it.
    import torchvision.datasets

    dataset_class = getattr(torchvision.datasets, layout.torchvision_class)
    try:
        for split in layout.splits:
            dataset_class(str(root), download=True, **split)
    except Exception as error:  # network, checksum and archive failures all mean "could not fetch"
        reason = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"could not download {layout.title} into {root}: {reason}") from error
