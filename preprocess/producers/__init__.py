"""Side-data producers (graphs, parses, ...); every module here registers its
producers with :func:`mdsfair.preprocess.side_data.register_side_data_producer`."""
