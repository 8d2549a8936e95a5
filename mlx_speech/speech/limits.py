"""The one bound on a text's length (``--max-input-chars``,
``TTS.max_text_chars``): counted as written and again as the model reads it
(normalization can make a text several times longer, and stops reading once
past the bound), and said one way wherever it is passed."""

from __future__ import annotations

from ..request import TextTooLong


class TextLimit:
    def __init__(self, most: int | None = None):
        self.most = most  # characters; None: any length

    def check(self, read: str, written: int, normalized: bool = False) -> None:
        """``read``: the text as the model reads it, ``written`` characters as
        sent; ``normalized``: normalization read it out (it may be turned off)."""
        most = self.most
        if most is None or len(read) <= most:
            return
        if len(read) == written:
            raise TextTooLong(f"the text is {written} characters; {self._advice}")
        also = ", or with normalization off" if normalized else ""
        raise TextTooLong(
            f"the text is {written} characters and more than {most} as it is read "
            f"out; {self._advice}{also}"
        )

    def check_parts(self, read: int) -> None:
        """``read``: the characters of a text's parts (voice tags, SSML)
        together, as the model reads them."""
        if self.most is not None and read > self.most:
            raise TextTooLong(
                f"the text is more than {self.most} characters as it is read out; "
                f"{self._advice}"
            )

    def check_stream(self, read: int) -> None:
        """``read``: a text stream's characters so far, as the model reads
        them; what passes the limit is not spoken."""
        if self.most is not None and read > self.most:
            raise TextTooLong(
                f"this text passed {self.most} characters as it is read out; the "
                f"limit is {self.most}: the rest is not spoken"
            )

    @property
    def _advice(self) -> str:
        return f"the limit is {self.most}: send it in parts"
