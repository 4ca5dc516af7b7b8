"""How mdsfair decodes summaries: the sequence generator the tasks build
(:mod:`.sequence_generator`: fairseq's, with a working n-gram blocker), that
blocker (:mod:`.ngram_blocking`), the length penalty of both generators,
fairseq's or GNMT's (:mod:`.length_penalty`). (The beam-row bookkeeping of the
cross-attentions that keep their source-side cache once per source is a
module of its own below, :mod:`mdsfair.modules.hypothesis_rows`.) Every
module here is imported so its registrations run."""

from mdsfair._autoimport import import_all_submodules

import_all_submodules(__name__, __file__)
