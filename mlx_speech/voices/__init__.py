"""What a voice name means: saved voices, the rules for a clip to clone, and
resolving the voice a request names."""
