"""How many jobs the worker steps together and keeps parked, unless told
otherwise (``--max-batch``, ``--max-parked``)."""

DEFAULT_MAX_BATCH = 8
DEFAULT_MAX_PARKED = 32
