"""A small speech recognizer trained here on audio synthesized with espeak-ng: spoken dates, clock
times and numbers (:mod:`beamsearch.zoo.speech.text`)."""
