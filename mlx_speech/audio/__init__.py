"""Sound: ``Audio`` (mono float32 samples at a rate), its formats and
streaming containers, resampling, pace, and the markers between chunks.
It knows nothing of models, text or protocols."""
