"""Progress bars for long work (datagen, decoding): count, rate and, when the total is known, ETA."""
import contextlib
import sys

import tqdm


@contextlib.contextmanager
def progress_bar(description: str, total: int = None, unit: str = "lines",
                 disable: bool = False):
    """A tqdm bar on stderr that redraws at most once a second (readable in CI logs too)."""
    bar = tqdm.tqdm(total=total, desc=description, unit=unit, file=sys.stderr,
                    mininterval=1.0, dynamic_ncols=True, disable=disable)
    try:
        yield bar
    finally:
        bar.close()
