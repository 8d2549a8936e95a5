"""What is said for what was written: the lexicon and normalization, SSML,
pause tags, a text cut into segments, text that arrives in pieces and the
captions of what was said."""
