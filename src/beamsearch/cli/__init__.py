"""The ``beamsearch`` command line: a thin layer over the library.

- :mod:`beamsearch.cli.main`: the parser and :func:`main`;
- :mod:`beamsearch.cli.zoo`: ``demo``, ``translate``, ``evaluate``, ``train`` (the dates translator);
- :mod:`beamsearch.cli.decode`: ``decode`` (corpus decoding), with :mod:`beamsearch.cli.options` (its
  search flags, generated from the decoding configuration and the registered modes) and
  :mod:`beamsearch.cli.decode_files` (its output files);
- :mod:`beamsearch.cli.common`: what they share.

Exit status: 0 when everything asked for was done; 1 when some input got no date (each such input
gets an error line in place) or a checkpoint cannot be loaded; 2 for a usage error.
"""

from beamsearch.cli.main import main, parser

__all__ = ["main", "parser"]
