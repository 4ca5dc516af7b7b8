"""The vocabulary of an imported hiersumm model (:mod:`mdsfair.importers.hiersumm`):
fairseq's ``<s> <pad> </s> <unk>`` carry the hiersumm code's ``<S>``,
``<PAD>``, ``</S>`` and the SentencePiece model's unknown piece, then every
other piece follows in the SentencePiece model's order, so the vocabulary is
theirs, permuted (no entry added or lost)."""

from typing import List, Sequence, Tuple

from fairseq.data import Dictionary

from mdsfair.importers.hiersumm_checkpoint import HiersummImportError

#: The hiersumm code's special pieces (train_abstractive.py: ``spm.PieceToId``)
#: and the fairseq dictionary role each one takes.
HIERSUMM_ROLE_PIECES = {"bos": "<S>", "pad": "<PAD>", "eos": "</S>"}


def sentencepiece_order(processor, path: str) -> Tuple[List[str], List[int]]:
    """The fairseq dictionary of an imported model and where each entry comes from.

    Returns ``symbols`` (the entries after fairseq's four specials, for
    ``dict.txt``) and ``order``: ``order[i]`` is the SentencePiece id behind
    fairseq index ``i``. fairseq's ``<s>``, ``<pad>``, ``</s>``, ``<unk>``
    (indices 0-3) take the ids of hiersumm's ``<S>``, ``<PAD>``, ``</S>`` and
    of the model's unknown piece; every other id follows in the model's order.
    A piece whose string is already taken (a control ``<s>`` beside ``<S>``,
    say) is listed as ``spm:ID:PIECE``; SentencePiece never emits control
    pieces, so no text maps to it.
    """
    unk_id = processor.unk_id()
    roles = {}
    for role, piece in HIERSUMM_ROLE_PIECES.items():
        piece_id = processor.piece_to_id(piece)
        if piece_id == unk_id and processor.id_to_piece(unk_id) != piece:
            raise HiersummImportError(
                f"{path}: the SentencePiece model has no piece {piece!r}, which the hiersumm code uses as "
                f"{role.upper()} (their symbols: <PAD> <S> </S> <T> <P> <Q>)"
            )
        roles[role] = piece_id
    head = [roles["bos"], roles["pad"], roles["eos"], unk_id]
    if len(set(head)) != 4:
        raise HiersummImportError(f"{path}: <S>, <PAD>, </S> and the unknown piece share ids {head}")
    taken = {"<s>", "<pad>", "</s>", "<unk>"}
    symbols, order = [], list(head)
    for piece_id in range(processor.get_piece_size()):
        if piece_id in head:
            continue
        piece = processor.id_to_piece(piece_id)
        symbol = piece if piece not in taken else f"spm:{piece_id}:{piece}"
        taken.add(symbol)
        symbols.append(symbol)
        order.append(piece_id)
    return symbols, order


def build_dictionary(symbols: Sequence[str]) -> Dictionary:
    dictionary = Dictionary()
    for symbol in symbols:
        dictionary.add_symbol(symbol)
    return dictionary
