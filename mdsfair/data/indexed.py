"""fairseq mmap indexed datasets that keep their stored dtype.

fairseq's :class:`MMapIndexedDataset` casts every item to int64, which is right
for token ids but wrong for float side data (a paragraph graph). The reader
here returns numpy arrays in the stored dtype; files are fairseq's own format
(``.bin`` + ``.idx``), so fairseq tools read them too.
"""

import numpy as np
from fairseq.data.indexed_dataset import (
    MMapIndexedDataset,
    MMapIndexedDatasetBuilder,
    data_file_path,
    index_file_path,
)


class NumpyMMapDataset(MMapIndexedDataset):
    """Items as numpy arrays of the stored dtype.

    Items are copied out of the memory map: a view would outlive the map if
    the dataset object were collected first, and crash the process.
    """

    def __getitem__(self, i):
        ptr, size = self._index[i]
        return np.frombuffer(self._bin_buffer, dtype=self._index.dtype, count=size, offset=ptr).copy()


class ArrayWriter:
    """Writes numpy arrays of a fixed dtype to ``prefix.bin`` / ``prefix.idx``."""

    def __init__(self, prefix: str, dtype):
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        self._builder = MMapIndexedDatasetBuilder(data_file_path(prefix), dtype=self.dtype.type)

    def add(self, array) -> None:
        array = np.asarray(array)
        if array.dtype != self.dtype:
            if np.issubdtype(self.dtype, np.integer):
                info = np.iinfo(self.dtype)
                if array.size and (array.min() < info.min or array.max() > info.max):
                    raise OverflowError(
                        f"{self.prefix}: values in [{array.min()}, {array.max()}] do not fit {self.dtype}"
                    )
            array = array.astype(self.dtype)
        self._builder._data_file.write(np.ascontiguousarray(array).reshape(-1).tobytes(order="C"))
        self._builder._sizes.append(array.size)

    def finalize(self) -> None:
        self._builder.finalize(index_file_path(self.prefix))

    def abort(self) -> None:
        """Close the data file without writing the index (a failed run: the
        caller removes what it wrote)."""
        if not self._builder._data_file.closed:
            self._builder._data_file.close()


def token_dtype(vocab_size: int):
    """The smallest unsigned dtype that holds every token id."""
    return np.uint16 if vocab_size < 65500 else np.int32
