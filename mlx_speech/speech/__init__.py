"""What ``TTS`` does with a request, seam by seam: resolving it once
(``resolution``), reading its text as the model is given it within the one
length limit (``reading``, ``limits``), and opening the streams every
adapter reads (``opening``, ``streams``)."""
