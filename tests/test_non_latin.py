"""Non-Latin text: sentence splitting and ROUGE give no silently wrong results."""

import logging

from rouge_score import tokenizers

from mdsfair.evaluation import rouge155
from mdsfair.evaluation.fast_rouge import FastRougeScorer, ScriptAwareTokenizer
from mdsfair.text import mostly_non_latin, non_latin_share, split_sentences


def test_splitter_cuts_chinese_sentences_with_or_without_space():
    assert split_sentences("今天天气很好。我们去公园吧！你来吗？好的") == [
        "今天天气很好。",
        "我们去公园吧！",
        "你来吗？",
        "好的",
    ]
    # closing brackets stay with the sentence they close; ASCII "!" before Han ends a sentence
    assert split_sentences("他说：「你好。」然后走了。") == ["他说：「你好。」", "然后走了。"]
    assert split_sentences("Hello!你好。") == ["Hello!", "你好。"]


def test_splitter_cuts_arabic_and_urdu_sentences():
    assert split_sentences("كيف حالك؟ أنا بخير. شكرا لك") == ["كيف حالك؟", "أنا بخير.", "شكرا لك"]
    assert split_sentences("یہ ایک جملہ ہے۔ یہ دوسرا ہے۔") == ["یہ ایک جملہ ہے۔", "یہ دوسرا ہے۔"]


def test_splitter_english_rules_unchanged():
    text = "Mr. Smith went to Washington. He saw the U.S. Capitol! It was 3.5 m tall. and so on"
    assert split_sentences(text) == [
        "Mr. Smith went to Washington.",
        "He saw the U.S. Capitol!",
        "It was 3.5 m tall. and so on",
    ]
    assert split_sentences("the cat sat . the dog ran .") == ["the cat sat .", "the dog ran ."]


def test_script_aware_tokenizer_equals_rouge_score_on_ascii_and_keeps_other_scripts():
    ours, stock = ScriptAwareTokenizer(use_stemmer=True), tokenizers.DefaultTokenizer(use_stemmer=True)
    for text in ["The cats were running quickly.", "U.S. GDP rose 3.5% in 2019 -- 'officially'."]:
        assert ours.tokenize(text) == stock.tokenize(text)
    assert stock.tokenize("今天天气很好") == []  # the bug: everything deleted
    assert ours.tokenize("今天天气很好。我们running") == ["今", "天", "天", "气", "很", "好", "我", "们", "run"]
    assert ours.tokenize("كيف حالك؟ أنا بخير") == ["كيف", "حالك", "أنا", "بخير"]
    # accented Latin letters separate words, as ROUGE-1.5.5's [^A-Za-z0-9] does; Cyrillic words stay whole
    assert ours.tokenize("Привет, мир! café") == ["привет", "мир", "caf"]


def test_fast_rouge_scores_chinese_and_arabic_by_hand_counted_overlap():
    scorer = FastRougeScorer()
    # 6 characters each, 5 shared unigrams: R = P = 5/6
    recall, precision, f1 = scorer.score_pair(["今天天气很好。"], ["今天天气不好。"])["rouge-1"]
    assert (round(recall, 6), round(precision, 6)) == (round(5 / 6, 6), round(5 / 6, 6))
    # hypothesis bigram (كيف, حالك) is one of the reference's 2 bigrams
    recall, precision, _ = scorer.score_pair(["كيف حالك؟"], ["كيف حالك اليوم؟"])["rouge-2"]
    assert (recall, precision) == (0.5, 1.0)


def test_official_rouge_warns_on_non_latin_references(caplog):
    assert non_latin_share("今天 is 好") == 3 / 5
    assert mostly_non_latin(["an English text", "今天天气很好", "Mostly English 好"]) == [1]
    models = [[["the cat sat"]], [["今天天气很好。"]]]
    with caplog.at_level(logging.WARNING, logger=rouge155.logger.name):
        assert rouge155.warn_non_latin_references(models) == [1]
    assert "1 of 2 reference sets are mostly in non-Latin script" in caplog.text and "--fast" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=rouge155.logger.name):
        assert rouge155.warn_non_latin_references([[["plain English"]]]) == []
    assert caplog.text == ""


def test_preprocessing_rule_splitter_cuts_chinese_arabic_and_cyrillic_sentences():
    from mdsfair.preprocess.structure import split_sentences_rule

    assert split_sentences_rule("今天天气很好。我们去公园吧！你来吗？好的") == [
        "今天天气很好。",
        "我们去公园吧！",
        "你来吗？",
        "好的",
    ]
    assert split_sentences_rule("كيف حالك؟ أنا بخير. شكرا لك") == ["كيف حالك؟", "أنا بخير.", "شكرا لك"]
    assert split_sentences_rule("یہ ایک جملہ ہے۔ یہ دوسرا ہے۔") == ["یہ ایک جملہ ہے۔", "یہ دوسرا ہے۔"]
    assert split_sentences_rule("Он пришёл. Она ушла. и всё") == ["Он пришёл.", "Она ушла. и всё"]
    # English rules unchanged: abbreviations, initials, decimals, a lower-case (accented) word after a period
    assert split_sentences_rule("Mr. Smith met J. Smith. It was 3.5 m tall. and élan. Étude") == [
        "Mr. Smith met J. Smith.",
        "It was 3.5 m tall. and élan.",
        "Étude",
    ]
