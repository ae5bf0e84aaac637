#!/usr/bin/env python3
"""Writes tests/data/tokenizer_corpus.json: the strings every tokenizer is checked on against the
Hugging Face reference (tests/model/hf_tokenizer_test.cpp). Deterministic; rerun after edits."""
import json
import os

BASE = [
    # English, contractions (the (?i:'s|...) alternatives), punctuation
    "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say we've done what you'd've done; it's John's.",
    "DON'T SHOUT, IT'S RUDE. WE'LL SEE. I'D SAY YOU'RE RIGHT.", "'s 't 're 've 'm 'll 'd",
    "'S'T'RE'VE'M'LL'D", "rock 'n' roll", "It\u2019s curly \u2018quoted\u2019 and \u201cdouble\u201d",
    "Mr. Smith (aged 42) paid $1,234.56 for 3 items @ 10% off.", "e.g. i.e. etc... !!! ??? ?!",
    "Once upon a time, there was a little girl named Lily.", "a", "A", "I", "ab", "word",
    "antidisestablishmentarianism", "supercalifragilisticexpialidocious",
    "Tom and Lily went to the park. They played on the swings.",
    "hello-world_foo.bar/baz\\qux", "CamelCaseIdentifierName", "snake_case_name_here",
    "ALLCAPS and lowercase and MiXeD", "x" * 300, "ab" * 150, "Hello" * 40,
    # numbers
    "0", "1", "12", "123", "1234", "12345", "123456", "1234567", "1234567890123",
    "3.14159265358979", "1,000,000", "1 000 000", "-42", "+7", "2024-01-15T10:30:00Z",
    "v1.2.3-rc4", "0x1F 0b1010 0o777", "1e-5 6.022e23", "\u0661\u0662\u0663 \u06f4\u06f5",
    "\uff11\uff12\uff13\uff14", "x\u00b2 + y\u00b3 = z\u2074", "\u00bd \u00bc \u2153", "\u216b \u2160\u2161\u2162",
    "\u2460\u2461\u2462", "\u0967\u0968\u0969", "phone: +1 (555) 123-4567",
    # whitespace
    " ", "  ", "   ", "    ", "        ", "\n", "\n\n", "\n\n\n", "\t", "\t\t", "\r\n", "\r\n\r\n",
    " \n ", "a b", "a  b", "a   b", "a    b", "a\tb", "a\nb", "a\n\nb", "a\r\nb", "a \n b",
    "  leading spaces", "trailing spaces   ", "  both  ", "\n\nleading newlines", "trailing newlines\n\n",
    "line1\nline2\n\nline4\n", "tabs\tand\tspaces \t mixed", "  \t  \n  \t  ",
    "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b", "a\u0085b", "a\u000bb", "a\u000cb", "a\u2003b\u2009c",
    "a \u00a0 b", "\u00a0\u00a0", "end with space ", "end with newline\n", " x", "  x", "\nx", "x\n",
    "word \n\n  next", "   \n\n\n   ", "\n \n \n",
    # code
    "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main() { printf(\"hi\\n\"); }", "const f = (a, b) => a ?? b;",
    "SELECT * FROM users WHERE id = 42;", "<div class=\"x\">Hi &amp; bye</div>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "x += 1; y -= 2; z *= 3; w /= 4;",
    "if (a != b && c >= d || !e) { return; }", "```python\nprint('hi')\n```",
    "$ ls -la | grep foo > out.txt 2>&1", "https://example.com/path?q=1&r=two#frag",
    "user.name+tag@example.co.uk", "    indented code\n        more indent", "::<>::{}[]()",
    "a->b; c::d; e.f; g?.h", "i++ + ++j", "#!/bin/bash\necho $HOME", "// comment\n/* block */",
    "\\begin{equation} E = mc^2 \\end{equation}", "| col1 | col2 |\n|------|------|",
    "- item one\n- item two\n  - nested", "**bold** _italic_ `code`", "~~~~ ^^^^ |||| ````",
    # CJK
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u5427\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.", "\u4e2d\u6587English\u6df7\u5408text",
    "hello\u4e16\u754c123abc", "\u3000\u5168\u89d2\u30b9\u30da\u30fc\u30b9", "\uff28\uff45\uff4c\uff4c\uff4f\uff01",
    "\u9f98\u9f98\u9f98", "\U00020000\U0002a6d6", "\u3042" * 50,
    # other scripts
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629.",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u0532\u0561\u0580\u0565\u0582",
    "Stra\u00dfe \u00fcber \u00e4\u00f6\u00fc \u00c4\u00d6\u00dc", "caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade",
    "\u0130stanbul \u0131\u015f\u0131k", "\u017b\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u", "\u1e9e\u00df \u0130i \u0131I \u017f\u017fs", "'\u017f 'K '\u212a",
    "\u13a0\u13a1\u13a2 \u1401\u1402", "\u2c00\u2c01 \ua640\ua641", "\U00010400\U00010428",
    # emoji and symbols
    "\U0001F600", "\U0001F600\U0001F601\U0001F602", "I \u2764\ufe0f NY", "\U0001F44D\U0001F3FD",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5",
    "1\ufe0f\u20e3 #\ufe0f\u20e3", "\U0001F3F3\ufe0f\u200d\U0001F308", "emoji\U0001F680in\U0001F30Dtext",
    "\u2603 \u2605 \u2192 \u21d2 \u2200 \u2203 \u221e \u2260 \u2264", "\u00a9 \u00ae \u2122 \u00a7 \u00b6 \u2020",
    "\u20ac100 \u00a350 \u00a51000 \u20b9200", "\u266a\u266b \u2660\u2663\u2665\u2666",
    "\U0001D400\U0001D401\U0001D402", "\u2500\u2502\u250c\u2510", "\U0001F9D1\u200d\U0001F4BB coding",
    # combining and normalization
    "e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "o\u0308\u0304",
    "\u0041\u0323\u0307", "\u1e0a\u0323", "\u0301 leading mark", "Z\u0351\u036b\u0343a\u0306l\u0357g\u0311o\u0335",
    "\ufb01 \ufb02 ligatures", "\u2126 ohm \u212a kelvin", "\u00c5 \u0041\u030a \u212b",
    "n\u0303 \u00f1", "\u0915\u093c \u0958", "\uff76\uff9e \u30ac", "\u0627\u064e\u0644\u0652",
    # controls and odd code points
    "\u0000", "a\u0000b", "\u0001\u0002\u0003", "\u007f", "\u0080\u009f", "\u200b zero width",
    "a\u200cb\u200dc", "\ufeffBOM", "\ufffd replacement", "\uffff", "\U0010FFFD", "\U000E0041",
    "\u202eright-to-left override", "\u00ad soft hyphen",
    # special tokens of the tested tokenizers (plain text for the others)
    "<|begin_of_text|>Hello", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|endoftext|>", "text<|endoftext|>more", "<s>", "</s>", "<s>Hello</s>", " <s> spaced </s> ",
    "<unk>", "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{}</tool_call>",
    "\uff5cbegin\u2581of\u2581sentence\uff5c", "<\uff5cbegin\u2581of\u2581sentence\uff5c>Hi<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<|im_start|><|im_start|>", "<|im_start", "im_start|>", "<|fake_token|>", "<|reserved_special_token_5|>",
    "<<|eot_id|>>", "<|eot_id|><|eot_id|>",
]

VARIANTS = [
    "Hello world", "I'm sure they'll say we've done what you'd've done; it's John's.",
    "1234567890123", "a  b", "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "def foo(x):\n    return x * 2\n",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "cafe\u0301",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "<|im_start|>user\nHi<|im_end|>",
    "Mr. Smith (aged 42) paid $1,234.56 for 3 items @ 10% off.", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
]


def main():
    corpus = list(BASE)
    for v in VARIANTS:  # the same text after spaces, newlines and words
        corpus += [" " + v, "  " + v, "\n" + v, v + " ", v + "\n\n", "x" + v, v.upper(), "(" + v + ")",
                   v + " " + v, "\t" + v + "\t"]
    paragraph = ("Pagoda is a C++20 LLM inference engine. It has paged KV blocks, 8 kernels, and "
                 "tokenizers for 5 families \u2014 \u4e2d\u6587, \u0627\u0644\u0639\u0631\u0628\u064a\u0629, "
                 "\U0001F600!\n\n  Indented line\twith tab.\r\n")
    corpus += [paragraph, paragraph * 8]
    corpus += ["".join(chr(c) for c in range(32, 127)), "".join(chr(c) for c in range(0xA0, 0x180)),
               "".join(chr(c) for c in range(1, 32))]
    seen, unique = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer_corpus.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(unique, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{out}: {len(unique)} strings")


if __name__ == "__main__":
    main()
