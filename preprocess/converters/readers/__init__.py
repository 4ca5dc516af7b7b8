"""The file readers of ``mdsfair-convert``, one module per kind of input.

Each reader turns input files into :class:`~mdsfair.preprocess.converters.common.Record`
objects of a :class:`~mdsfair.preprocess.converters.common.ConversionSession`
(located at their file and 1-based line, counted, bad ones raised or skipped
by the session's error policy); a format module builds clusters from them:

* :mod:`.text`: bytes to text for the others: gzip looked through, bytes that
  are not UTF-8 kept as surrogate escapes and located (:func:`~.text.iter_lines`);
* :mod:`.json_files`: JSON lines or one JSON list per file, and whole-file
  JSON records (:func:`~.json_files.iter_json_records`,
  :func:`~.json_files.read_json_file_record`);
* :mod:`.csv_files`: CSV rows located at their first line (:func:`~.csv_files.iter_csv_rows`),
  and files read as CSV or JSON by their extension (:func:`~.csv_files.iter_csv_or_json_records`);
* :mod:`.hierencdec_files`: HierEncDec's ``.csv`` / ``.json`` data files and
  the cluster of one of their examples (:func:`~.hierencdec_files.iter_hierencdec_records`);
* :mod:`.tables`: Parquet, Arrow and ``datasets.save_to_disk`` tables read with
  pyarrow (:func:`~.tables.iter_table_records`);
* :mod:`.torch_shards`: ``torch.save`` shards of examples (hiersumm's WikiSum),
  loaded with ``weights_only=True``, one record per example located as
  ``FILE[INDEX]`` (:func:`~.torch_shards.iter_shard_records`).
"""
