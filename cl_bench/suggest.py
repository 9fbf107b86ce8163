"""Nearest names for a misspelt key or choice, so that a refusal can say "did you mean ...?"."""
import difflib

CUTOFF = 0.6  # below this, a name is too far off to be what the user meant


def _score(word: str, option: str) -> float:
    """How alike two names are, as spelt and with their underscore-separated words in any order: `lr_msk` is
    near `mask_lr`, which a plain edit ratio ranks below `lr_gamma`."""
    def words(name: str) -> str:
        return "_".join(sorted(name.split("_")))
    return max(difflib.SequenceMatcher(None, word, option).ratio(),
               difflib.SequenceMatcher(None, words(word), words(option)).ratio())


def nearest(word: str, options) -> list[str]:
    """The options close to word, the closest first."""
    scored = sorted(((_score(word, o), o) for o in options), key=lambda p: -p[0])
    return [o for s, o in scored if s >= CUTOFF]


def ranked(word: str, options) -> list[str]:
    """Every option, the close ones first (closest first), then the rest in their given order."""
    close = nearest(word, options)
    return close + [o for o in options if o not in close]


def did_you_mean(word: str, options, prefix: str = "") -> str:
    """' (did you mean PREFIX+X?)' for the nearest option X, or ''."""
    close = nearest(word, options)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""
