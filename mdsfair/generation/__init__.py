"""How mdsfair decodes summaries: the sequence generator the tasks build
(:mod:`.sequence_generator`: fairseq's, with a working n-gram blocker) and
that blocker (:mod:`.ngram_blocking`). Every module here is imported so its
registrations run."""
from mdsfair._autoimport import import_all_submodules

import_all_submodules(__name__, __file__)
